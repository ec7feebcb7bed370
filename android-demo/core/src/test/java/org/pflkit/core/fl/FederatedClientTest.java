package org.pflkit.core.fl;

import static org.junit.Assert.assertArrayEquals;
import static org.junit.Assert.assertEquals;
import static org.junit.Assert.assertFalse;
import static org.junit.Assert.assertNull;
import static org.junit.Assert.assertTrue;
import static org.junit.Assert.fail;

import com.sun.net.httpserver.HttpServer;
import java.io.File;
import java.io.IOException;
import java.net.InetSocketAddress;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.attribute.PosixFilePermission;
import java.time.ZoneOffset;
import java.time.ZonedDateTime;
import java.time.format.DateTimeFormatter;
import java.util.ArrayList;
import java.util.Collections;
import java.util.EnumSet;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ConcurrentLinkedQueue;
import org.junit.After;
import org.junit.Before;
import org.junit.Rule;
import org.junit.Test;
import org.junit.rules.TemporaryFolder;
import org.pflkit.core.Json;
import org.pflkit.core.JsonWriter;
import org.pflkit.core.Safetensors;
import org.pflkit.core.Sha256;
import org.pflkit.core.TensorData;

/**
 * The client's protocol behaviour against a scripted HTTP server on loopback (the JDK's own
 * server: real sockets, real HttpURLConnection): which answers are retried and how long it
 * waits, the global-state cache, the pending upload across a pause. The end-to-end round
 * against pfl-server is {@link FlServerTest}.
 */
public class FederatedClientTest {
  @Rule public final TemporaryFolder tmp = new TemporaryFolder();

  /** One scripted answer. */
  static final class Answer {
    final int status;
    final Map<String, String> headers = new LinkedHashMap<>();
    final byte[] body;

    Answer(int status, String body, String... headers) {
      this(status, body.getBytes(StandardCharsets.UTF_8), headers);
    }

    Answer(int status, byte[] body, String... headers) {
      this.status = status;
      this.body = body;
      for (int i = 0; i < headers.length; i += 2) {
        this.headers.put(headers[i], headers[i + 1]);
      }
    }
  }

  private HttpServer server;
  private final ConcurrentLinkedQueue<Answer> script = new ConcurrentLinkedQueue<>();
  private final List<String> requests = Collections.synchronizedList(new ArrayList<>());
  private final List<byte[]> bodies = Collections.synchronizedList(new ArrayList<>());
  private final List<Long> waits = new ArrayList<>();

  @Before
  public void start() throws IOException {
    server = HttpServer.create(new InetSocketAddress("127.0.0.1", 0), 0);
    server.createContext("/", exchange -> {
      requests.add(exchange.getRequestMethod() + " " + exchange.getRequestURI());
      bodies.add(exchange.getRequestBody().readAllBytes());
      Answer a = script.poll();
      if (a == null) {
        a = new Answer(599, "{\"detail\": \"script exhausted\"}");
      }
      a.headers.forEach((k, v) -> exchange.getResponseHeaders().add(k, v));
      exchange.sendResponseHeaders(a.status, a.body.length == 0 ? -1 : a.body.length);
      exchange.getResponseBody().write(a.body);
      exchange.close();
    });
    server.start();
  }

  @After
  public void stop() {
    server.stop(0);
  }

  String url() {
    return "http://127.0.0.1:" + server.getAddress().getPort();
  }

  FederatedClient client(File dir, RetryPolicy policy) throws IOException {
    return new FederatedClient(url(), dir, new UrlConnectionTransport(2_000, 5_000), policy,
        waits::add);
  }

  FederatedClient enrolled(RetryPolicy policy) throws IOException {
    FederatedClient c = client(tmp.getRoot(), policy);
    script.add(new Answer(200, "{\"client_id\": 7, \"secret\": \"s3cret\"}"));
    assertEquals(7, c.enroll("tok"));
    requests.clear();
    bodies.clear();
    return c;
  }

  static String task(String status, String extra) {
    return "{\"status\": \"" + status + "\", \"retry_after\": 1.0" + extra + "}";
  }

  @Test
  public void enrollmentStoresOwnerOnlyCredentialsAndBindsTheFolderToTheServer()
      throws Exception {
    FederatedClient c = client(tmp.getRoot(), RetryPolicy.defaults());
    script.add(new Answer(200, "{\"client_id\": 3, \"secret\": \"abc\"}"));
    assertEquals(3, c.enroll("the-token"));
    assertEquals("{\"token\":\"the-token\"}",
        new String(bodies.get(0), StandardCharsets.UTF_8));
    File creds = new File(tmp.getRoot(), FederatedClient.CREDENTIALS);
    assertEquals(EnumSet.of(PosixFilePermission.OWNER_READ, PosixFilePermission.OWNER_WRITE),
        Files.getPosixFilePermissions(creds.toPath()));
    assertEquals(3, client(tmp.getRoot(), RetryPolicy.defaults()).clientId());
    try {
      new FederatedClient("http://elsewhere:1", tmp.getRoot(), null, RetryPolicy.defaults(),
          waits::add);
      fail("a folder enrolled with one server is refused for another");
    } catch (IllegalArgumentException e) {
      assertTrue(e.getMessage().contains("is enrolled with"));
    }
  }

  /**
   * A server URL typed without its scheme (the app's text field) failed every request as a
   * network error, retried for ten minutes; one with user:password@ was stored and shown.
   */
  @Test
  public void aServerUrlThatIsNoHttpUrlOrHoldsAPasswordIsRefusedAtOnce() throws Exception {
    String[] bad = {"fl.example.org", "ftp://fl.example.org", "https://", "http://[::1",
        "http://user:pa55@127.0.0.1:9", "https://pa55@fl.example.org/"};
    for (String server : bad) {
      try {
        new FederatedClient(server, tmp.newFolder(), new UrlConnectionTransport(2_000, 5_000),
            RetryPolicy.defaults(), waits::add);
        fail(server);
      } catch (IllegalArgumentException e) {
        assertTrue(e.getMessage(), e.getMessage().startsWith("the server URL "));
        assertFalse(e.getMessage(), e.getMessage().contains("pa55"));
      }
    }
    assertTrue(waits.isEmpty());
    for (String good : new String[] {"https://fl.example.org", "HTTP://127.0.0.1:8000/pfl/"}) {
      new FederatedClient(good, tmp.newFolder(), null, RetryPolicy.defaults(), waits::add);
    }
  }

  @Test
  public void retryAfterIsHonouredAndMakesA409Retryable() throws Exception {
    FederatedClient c = enrolled(RetryPolicy.defaults());
    script.add(new Answer(503, "{\"detail\": \"busy\"}", "Retry-After", "3"));
    script.add(new Answer(429, "{\"detail\": \"slow down\"}", "Retry-After", "7"));
    script.add(new Answer(409, "{\"detail\": \"ids taken, try again\"}", "Retry-After", "1"));
    script.add(new Answer(500, "oops", "Retry-After", "0.25"));
    script.add(new Answer(200, task("wait", "")));
    assertEquals("wait", c.poll().status);
    assertEquals(List.of(3000L, 7000L, 1000L, 250L), waits);
    assertEquals(5, requests.size());
  }

  /**
   * The Python SDK's rule: a Retry-After that is an HTTP date (which a phone's skewed clock
   * would turn into hours, or nothing) or over an hour is not honoured: a 5xx backs off, a
   * 409 is final.
   */
  @Test
  public void aRetryAfterDateOrOverAnHourIsNotHonoured() throws Exception {
    FederatedClient c = enrolled(new RetryPolicy(100, 100, 7_200_000));  // waits recorded
    String tomorrow = DateTimeFormatter.RFC_1123_DATE_TIME.format(
        ZonedDateTime.now(ZoneOffset.UTC).plusDays(1));
    String[] odd = {tomorrow, "3601", "-1", "NaN", "Infinity", "1d", "0x10", "soon"};
    for (String wait : odd) {
      script.add(new Answer(503, "{\"detail\": \"busy\"}", "Retry-After", wait));
    }
    script.add(new Answer(503, "{\"detail\": \"busy\"}", "Retry-After", "1e0"));
    script.add(new Answer(503, "{\"detail\": \"busy\"}", "Retry-After", " 3600 "));
    script.add(new Answer(200, task("wait", "")));
    assertEquals("wait", c.poll().status);
    assertEquals(odd.length + 2, waits.size());
    for (int i = 0; i < odd.length; i++) {
      long wait = waits.get(i);
      assertTrue(odd[i] + ": backoff, not the server's wait: " + wait, wait >= 50 && wait <= 150);
    }
    assertEquals(List.of(1000L, 3_600_000L), waits.subList(odd.length, odd.length + 2));
    script.add(new Answer(409, "{\"detail\": \"paused\"}", "Retry-After", tomorrow));
    try {
      c.poll();
      fail("a 409 whose Retry-After is not honoured is final");
    } catch (ServerRefused e) {
      assertEquals(409, e.status);
    }
    assertEquals(odd.length + 2, waits.size());
  }

  @Test
  public void serverErrorsAndDroppedConnectionsBackOffExponentiallyWithJitter()
      throws Exception {
    FederatedClient c = enrolled(new RetryPolicy(100, 400, 60_000));
    for (int i = 0; i < 4; i++) {
      script.add(new Answer(i % 2 == 0 ? 500 : 502, "oops"));
    }
    script.add(new Answer(200, task("wait", "")));
    c.poll();
    long[] caps = {100, 200, 400, 400};  // min(cap, base 2^k), then jitter 0.5..1.5
    assertEquals(4, waits.size());
    for (int k = 0; k < caps.length; k++) {
      assertTrue(waits.get(k) + " for attempt " + k,
          waits.get(k) >= caps[k] / 2 && waits.get(k) <= caps[k] * 3 / 2);
    }
  }

  /**
   * The JDK drops the answer to a request streamed with a body when it is a 401 (it cannot
   * resend the body to authenticate): a mistyped enrollment token showed no message at all.
   */
  @Test
  public void anUnauthorizedEnrollmentOrUploadCarriesTheServersMessage() throws Exception {
    FederatedClient c = client(tmp.getRoot(), RetryPolicy.defaults());
    script.add(new Answer(401, "{\"detail\": \"unknown enrollment token\"}",
        "WWW-Authenticate", "Bearer"));
    try {
      c.enroll("mistyped");
      fail("refused");
    } catch (ServerRefused e) {
      assertEquals("server refused (401): unknown enrollment token", e.getMessage());
    }
    c = enrolled(RetryPolicy.defaults());
    script.add(new Answer(200, TRAIN));
    script.add(new Answer(200, GLOBAL));
    script.add(new Answer(401, "{\"detail\": \"unknown client credentials\"}",
        "WWW-Authenticate", "Bearer"));
    try {
      c.step(counting(new int[1]));
      fail("refused");
    } catch (ServerRefused e) {
      assertEquals("server refused (401): unknown client credentials", e.getMessage());
    }
  }

  @Test
  public void finalRefusalsAreNotRetriedAndCarryTheServersMessage() throws Exception {
    FederatedClient c = enrolled(RetryPolicy.defaults());
    script.add(new Answer(409, "{\"detail\": \"run 1 is paused\"}"));  // no Retry-After
    try {
      c.poll();
      fail();
    } catch (ServerRefused e) {
      assertEquals(409, e.status);
      assertEquals("run 1 is paused", e.detail);
    }
    script.add(new Answer(401, "not json at all"));
    try {
      c.poll();
      fail();
    } catch (ServerRefused e) {
      assertEquals("not json at all", e.detail);
    }
    assertEquals(2, requests.size());
    assertTrue(waits.isEmpty());
  }

  @Test
  public void givesUpWhenTheRetryBudgetIsSpent() throws Exception {
    FederatedClient c = enrolled(new RetryPolicy(100, 100, 250));
    server.stop(0);  // connection refused from now on
    try {
      c.poll();
      fail();
    } catch (ServerUnavailable e) {
      assertTrue(e.getMessage(), e.getMessage().contains("gave up after"));
    }
    assertFalse(waits.isEmpty());
  }

  @Test
  public void theGlobalStateIsCachedByHashAndVerified() throws Exception {
    FederatedClient c = enrolled(RetryPolicy.defaults());
    byte[] global = Safetensors.write(Collections.singletonMap("w",
        TensorData.ofFloats(new long[] {2}, new float[] {1, 2})), null);
    String digest = Sha256.hex(global);
    script.add(new Answer(200, global));
    assertArrayEquals(new float[] {1, 2}, c.globalState(digest).tensors.get("w").floats(), 0);
    assertArrayEquals(new float[] {1, 2}, c.globalState(digest).tensors.get("w").floats(), 0);
    assertEquals("the second call is served from the cache", 1, requests.size());

    Files.write(new File(tmp.getRoot(), FederatedClient.GLOBAL).toPath(), new byte[] {1, 2});
    script.add(new Answer(200, global));
    c.globalState(digest);
    assertEquals("a damaged cache is downloaded again", 2, requests.size());

    script.add(new Answer(200, global));
    try {
      c.globalState(Sha256.hex(new byte[0]));
      fail();
    } catch (IOException e) {
      assertTrue(e.getMessage(), e.getMessage().contains("hashes to " + digest));
    }
  }

  static final byte[] GLOBAL = Safetensors.write(Collections.singletonMap("w",
      TensorData.ofFloats(new long[] {1}, new float[] {0.5f})), null);
  static final String TRAIN = task("train", ", \"run_id\": 1, \"round\": 4, "
      + "\"global_hash\": \"" + Sha256.hex(GLOBAL) + "\", "
      + "\"config\": {\"lr_schedule\": {\"lr\": 0.1, \"decay\": 0.5}, \"total_rounds\": 5}");

  @Test
  public void aTasksLearningRateIsItsRoundsRateOnTheSchedule() {
    Task task = Task.parse(TRAIN.getBytes(StandardCharsets.UTF_8));
    assertEquals("round 4: 0.1 x 0.5^4", 0.00625, task.learningRate(), 0.0);
    try {
      Task.parse(task("wait", ", \"run_id\": 1, \"round\": 4").getBytes(StandardCharsets.UTF_8))
          .learningRate();
      fail();
    } catch (IllegalArgumentException e) {
      assertTrue(e.getMessage(), e.getMessage().contains("config.lr_schedule"));
    }
  }

  /** A round trainer that counts its calls and keeps p = 9 as the private state. */
  static RoundTrainer counting(int[] trained) {
    return (task, g, state) -> {
      trained[0]++;
      return new RoundTrainer.Result(g.tensors, 12, Collections.singletonMap("loss", 0.5),
          new ClientState(Collections.singletonMap("p", TensorData.ofFloats(new long[] {1},
              new float[] {9})), Collections.emptyMap()));
    };
  }

  @Test
  public void aPauseBeforeTheUploadKeepsTheRoundAndResendsItWithoutTraining() throws Exception {
    FederatedClient c = enrolled(RetryPolicy.defaults());
    String paused = task("paused", ", \"run_id\": 1, \"round\": 4");
    int[] trained = {0};
    RoundTrainer trainer = counting(trained);
    script.add(new Answer(200, TRAIN));
    script.add(new Answer(200, GLOBAL));
    script.add(new Answer(409, "{\"detail\": \"run 1 is paused; uploads are not accepted\"}"));
    StepResult deferred = c.step(trainer);
    assertEquals("the run was paused between training and upload", Wire.WAIT, deferred.status);
    File pending = new File(tmp.getRoot(), PendingRound.FILE);
    assertTrue(pending.exists());
    byte[] upload = PendingRound.fromBytes(Files.readAllBytes(pending.toPath()), "p").upload;

    script.add(new Answer(200, paused));
    assertEquals("paused", c.step(trainer).status);
    assertTrue("a pause keeps the pending round", pending.exists());

    bodies.clear();
    script.add(new Answer(200, TRAIN));  // resumed: the same round is open again
    script.add(new Answer(200, "{\"run_id\": 1, \"round\": 4, \"sha256\": \"x\", "
        + "\"duplicate\": false}"));
    StepResult result = c.step(trainer);
    assertEquals(StepResult.TRAINED, result.status);
    assertEquals("trained once", 1, trained[0]);
    assertArrayEquals(upload, bodies.get(1));
    assertTrue(requests.get(requests.size() - 1).endsWith("/v1/runs/1/rounds/4/update?"
        + "num_samples=12"));
    assertFalse(pending.exists());
    assertArrayEquals(new float[] {9}, c.clientState(1).tensors.get("p").floats(), 0);
    Safetensors sent = Safetensors.parse(upload, "upload");
    assertEquals("{\"loss\":0.5}", sent.metadata.get(Wire.METRICS));
  }

  @Test
  public void aRefusedUploadKeepsTheRoundAndItsPrivateStateUntilTheRoundIsOver()
      throws Exception {
    FederatedClient c = enrolled(RetryPolicy.defaults());
    int[] trained = {0};
    script.add(new Answer(200, TRAIN));
    script.add(new Answer(200, GLOBAL));
    script.add(new Answer(422, "{\"detail\": \"update tensor w has shape [2]\"}"));
    try {
      c.step(counting(trained));
      fail("a refused update is the app's to see");
    } catch (ServerRefused e) {
      assertEquals(422, e.status);
    }
    assertTrue("the round and its new private state are kept",
        new File(tmp.getRoot(), PendingRound.FILE).exists());
    script.add(new Answer(200, task("wait", ", \"run_id\": 1, \"round\": 5")));
    assertEquals(Wire.WAIT, c.step(counting(trained)).status);
    assertEquals("trained once", 1, trained[0]);
    assertFalse(new File(tmp.getRoot(), PendingRound.FILE).exists());
    assertArrayEquals(new float[] {9}, c.clientState(1).tensors.get("p").floats(), 0);
  }

  @Test
  public void aDivergedRoundIsNotUploadedKeepsTheStateAndIsNotTrainedAgain() throws Exception {
    FederatedClient c = enrolled(new RetryPolicy(100, 100, 250));  // a stray upload fails fast
    int[] trained = {0};
    RoundTrainer blownUp = (task, g, state) -> {  // the server would refuse it (422)
      trained[0]++;
      return new RoundTrainer.Result(Collections.singletonMap("w", TensorData.ofFloats(
          new long[] {2}, new float[] {1, Float.NaN})), 12, Collections.emptyMap(), null);
    };
    script.add(new Answer(200, TRAIN));
    script.add(new Answer(200, GLOBAL));
    StepResult first = c.step(blownUp);
    assertEquals(StepResult.DIVERGED, first.status);
    assertEquals(Long.valueOf(4), first.round);
    script.add(new Answer(200, TRAIN));  // polled again while round 4 is open
    assertEquals(StepResult.DIVERGED, c.step(blownUp).status);
    assertEquals("trained once", 1, trained[0]);
    assertTrue("nothing was uploaded", requests.stream().noneMatch(r -> r.startsWith("PUT")));
    assertFalse(new File(tmp.getRoot(), PendingRound.FILE).exists());
    assertNull("no private state was committed", c.clientState(1));
  }

  /**
   * A trainer that reports its loss as it is: a blown-up round's NaN loss used to throw from
   * Result (every poll trained again, never {@code diverged}); a round without a step (NaN
   * loss, finite weights) is uploaded without that metric, as the Python SDK does.
   */
  @Test
  public void aNanLossIsNotSentAndNanWeightsWithItAreADivergence() throws Exception {
    FederatedClient c = enrolled(new RetryPolicy(100, 100, 250));
    int[] trained = {0};
    RoundTrainer blownUp = (task, g, state) -> {
      trained[0]++;
      return new RoundTrainer.Result(Collections.singletonMap("w", TensorData.ofFloats(
          new long[] {2}, new float[] {Float.NaN, Float.NaN})), 12,
          Collections.singletonMap("loss", Double.NaN), null);
    };
    script.add(new Answer(200, TRAIN));
    script.add(new Answer(200, GLOBAL));
    assertEquals(StepResult.DIVERGED, c.step(blownUp).status);
    script.add(new Answer(200, TRAIN));
    assertEquals(StepResult.DIVERGED, c.step(blownUp).status);
    assertEquals("trained once", 1, trained[0]);

    RoundTrainer noStep = (task, g, state) -> new RoundTrainer.Result(g.tensors, 0,
        Map.of("loss", Double.NaN, "acc", Double.POSITIVE_INFINITY, "n", 3.0), null);
    script.add(new Answer(200, TRAIN.replace("\"round\": 4", "\"round\": 5")));
    script.add(new Answer(200, "{\"run_id\": 1, \"round\": 5, \"sha256\": \"x\", "
        + "\"duplicate\": false}"));
    bodies.clear();
    assertEquals(StepResult.TRAINED, c.step(noStep).status);
    assertEquals("{\"n\":3}", Safetensors.parse(bodies.get(1), "upload").metadata.get(
        Wire.METRICS));
  }

  /**
   * A metric name (400) or a sample count (422) the server refuses is the trainer's error in
   * one line, not a refusal at every re-send of the pending round.
   */
  @Test
  public void aMetricNameOrSampleCountTheServerRefusesIsTheTrainersErrorInOneLine() {
    for (String name : new String[] {"", "loss\n", "a\u001b[31m", "x".repeat(65), "a\u00a0b",
        "\u200bz", "\ud83d\ude00".repeat(65)}) {
      try {
        new RoundTrainer.Result(Collections.emptyMap(), 1, Collections.singletonMap(name, 1.0),
            null);
        fail(name);
      } catch (IllegalArgumentException e) {
        assertEquals("a metric name must be 1 to 64 printable characters (no control character"
            + " or line break)", e.getMessage());
      }
    }
    for (String name : new String[] {"train loss", "x".repeat(64), "\u00e9t\u00e9",
        "\ud83d\ude00", "\ud83d\ude00".repeat(64)}) {  // 64 characters, as Python counts
      assertEquals(1, new RoundTrainer.Result(Collections.emptyMap(), 1,
          Collections.singletonMap(name, 1.0), null).metrics.size());
    }
    for (long count : new long[] {-1, Wire.MAX_NUM_SAMPLES + 1, Long.MAX_VALUE}) {
      try {  // the server's route takes [0, 1e9]: 422, at every re-send until the round ends
        new RoundTrainer.Result(Collections.emptyMap(), count, Collections.emptyMap(), null);
        fail(String.valueOf(count));
      } catch (IllegalArgumentException e) {
        assertEquals("numSamples must be in [0, 1000000000] (the examples the round trained on)"
            + ", found " + count, e.getMessage());
      }
    }
    assertEquals(Wire.MAX_NUM_SAMPLES, new RoundTrainer.Result(Collections.emptyMap(),
        Wire.MAX_NUM_SAMPLES, Collections.emptyMap(), null).numSamples);
  }

  @Test
  public void aDamagedPendingFileIsDiscardedAndTheRoundTrainedAgain() throws Exception {
    FederatedClient c = enrolled(RetryPolicy.defaults());
    Files.write(new File(tmp.getRoot(), PendingRound.FILE).toPath(), new byte[] {1, 2, 3});
    int[] trained = {0};
    script.add(new Answer(200, TRAIN));
    script.add(new Answer(200, GLOBAL));
    script.add(new Answer(200, "{\"run_id\": 1, \"round\": 4, \"sha256\": \"x\", "
        + "\"duplicate\": false}"));
    assertEquals(StepResult.TRAINED, c.step(counting(trained)).status);
    assertEquals(1, trained[0]);
    assertArrayEquals(new float[] {9}, c.clientState(1).tensors.get("p").floats(), 0);
  }

  @Test
  public void credentialsThatEnrollmentDidNotWriteAreRefusedNamingTheFile() throws Exception {
    File creds = new File(tmp.getRoot(), FederatedClient.CREDENTIALS);
    String[] bad = {"\"client_id\": \"8\", \"secret\": \"s\"", "\"client_id\": true, "
        + "\"secret\": \"s\"", "\"client_id\": 1.5, \"secret\": \"s\"",
        "\"client_id\": -1, \"secret\": \"s\"", "\"client_id\": 1e10, \"secret\": \"s\"",
        "\"client_id\": 8", "\"client_id\": 8, \"secret\": \"\"", "\"secret\": \"s\"",
        "\"client_id\": 8, \"secret\": \"s\\r\\nX: y\"", "\"client_id\": 8, \"secret\": \"a b\""};
    for (String fields : bad) {
      Files.write(creds.toPath(), ("{\"server\": \"" + url() + "\", " + fields + "}")
          .getBytes(StandardCharsets.UTF_8));
      try {
        client(tmp.getRoot(), RetryPolicy.defaults());
        fail(fields);
      } catch (IOException e) {
        assertTrue(e.getMessage(), e.getMessage().startsWith(creds.getPath() + ": not the "
            + "credentials enrollment writes (server, client_id in 0..2147483647, secret)"));
      }
    }
    assertTrue(creds.delete());
    FederatedClient c = client(tmp.getRoot(), RetryPolicy.defaults());
    for (String answer : new String[] {"1.5, \"secret\": \"s\"", "-1, \"secret\": \"s\"",
        "\"8\", \"secret\": \"s\"", "2147483648, \"secret\": \"s\"",
        "8, \"secret\": \"s\\r\\nX-Injected: 1\"", "8, \"secret\": \"s\u00e9\""}) {
      script.add(new Answer(200, "{\"client_id\": " + answer + "}"));
      try {
        c.enroll("tok");
        fail(answer);
      } catch (IOException e) {
        assertEquals("enrollment: the server's answer holds no client id in 0..2147483647 and "
            + "sendable secret; nothing was stored", e.getMessage());
      }
      assertFalse(c.isEnrolled());
      assertFalse(creds.exists());
    }
    requests.clear();
    for (String token : new String[] {"x9Q\n", " x9Q", "x9\u00f6Q", ""}) {
      try {
        c.enroll(token);
        fail(token);
      } catch (IllegalArgumentException e) {
        assertTrue(e.getMessage(), e.getMessage().startsWith("the token or secret holds a "
            + "space, a control character"));
        assertFalse(e.getMessage().contains("x9"));
      }
    }
    assertEquals("a token a header cannot carry is not sent", 0, requests.size());
  }

  @Test
  public void thePendingRoundIsCommittedOnlyOnceTheServerIsDoneWithIt() {
    PendingRound pending = new PendingRound(1, 4, 12, Sha256.hex(GLOBAL), null, new byte[0],
        null);
    String[][] cases = {  // task JSON extra, status, over?
        {", \"run_id\": 1, \"round\": 4", "paused", "false"},
        {", \"run_id\": 1, \"round\": 4", "wait", "false"},
        {", \"run_id\": 1, \"round\": 4", "uploaded", "true"},
        {", \"run_id\": 1, \"round\": 5", "wait", "true"},
        {", \"run_id\": 2, \"round\": 0", "wait", "true"},
        {", \"run_id\": 1, \"round\": 4", "stopped", "true"},
        {", \"run_id\": 1, \"round\": 4", "finished", "true"},
    };
    for (String[] c : cases) {
      Task t = Task.parse(task(c[1], c[0]).getBytes(StandardCharsets.UTF_8));
      assertEquals(c[1] + c[0], Boolean.parseBoolean(c[2]),
          pending.isOver(t));
    }
    String other = "\"global_hash\": \"" + Sha256.hex(new byte[0]) + "\"";
    String[][] histories = {  // task JSON extra, why superseded (null: it is not)
        {", \"run_id\": 1, \"round\": 4", null},
        {", \"run_id\": 1, \"round\": 4, \"global_hash\": \"" + Sha256.hex(GLOBAL) + "\"", null},
        {", \"run_id\": 1, \"round\": 5, " + other, null},
        {", \"run_id\": 2, \"round\": 0", null},
        {", \"run_id\": 1, \"round\": 3", "run 1 is back at round 3"},
        {", \"run_id\": 1, \"round\": 4, " + other,
            "run 1 started round 4 again, from another global state"},
    };
    for (String[] h : histories) {
      Task t = Task.parse(task("wait", h[0]).getBytes(StandardCharsets.UTF_8));
      assertEquals(h[0], h[1], pending.superseded(t));
    }
    Task trained = Task.parse(TRAIN.getBytes(StandardCharsets.UTF_8));
    PendingRound configured = new PendingRound(1, 4, 12, Sha256.hex(GLOBAL),
        trained.configDigest(), new byte[0], null);
    assertNull(configured.superseded(trained));
    Task recreated = Task.parse(TRAIN.replace("\"lr\": 0.1", "\"lr\": 0.2")
        .getBytes(StandardCharsets.UTF_8));  // same round and global, another config
    assertEquals("run 1 runs under another config", configured.superseded(recreated));
  }

  static final byte[] RESTORED = Safetensors.write(Collections.singletonMap("w",
      TensorData.ofFloats(new long[] {1}, new float[] {0.25f})), null);

  @Test
  public void aPendingRoundOfAHistoryTheRestoredServerLostIsDroppedNotUploaded()
      throws Exception {
    FederatedClient c = enrolled(RetryPolicy.defaults());
    int[] trained = {0};
    script.add(new Answer(200, TRAIN));
    script.add(new Answer(200, GLOBAL));
    script.add(new Answer(409, "{\"detail\": \"run 1 is paused; uploads are not accepted\"}"));
    assertEquals(Wire.WAIT, c.step(counting(trained)).status);
    File pending = new File(tmp.getRoot(), PendingRound.FILE);
    assertTrue(pending.exists());

    requests.clear();
    script.add(new Answer(200, TRAIN.replace("\"round\": 4", "\"round\": 3")
        .replace(Sha256.hex(GLOBAL), Sha256.hex(RESTORED))));  // a backup of round 3
    script.add(new Answer(200, RESTORED));
    script.add(new Answer(200, "{\"run_id\": 1, \"round\": 3, \"sha256\": \"x\", "
        + "\"duplicate\": false}"));
    StepResult result = c.step(counting(trained));
    assertEquals(StepResult.TRAINED, result.status);
    assertEquals(Long.valueOf(3), result.round);
    assertEquals("round 3 of the restored history is trained", 2, trained[0]);
    assertTrue(requests.toString(), requests.stream().noneMatch(r -> r.contains("/rounds/4/")));
    assertFalse(pending.exists());
  }

  @Test
  public void aGlobalStateWithNanIsTheServersFaultNotADivergence() throws Exception {
    FederatedClient c = enrolled(RetryPolicy.defaults());
    byte[] broken = Safetensors.write(Collections.singletonMap("w",
        TensorData.ofFloats(new long[] {2}, new float[] {0.5f, Float.NaN})), null);
    String task = TRAIN.replace(Sha256.hex(GLOBAL), Sha256.hex(broken));
    int[] trained = {0};
    script.add(new Answer(200, task));
    script.add(new Answer(200, broken));
    for (int poll = 0; poll < 2; poll++) {
      try {
        c.step(counting(trained));
        fail("a NaN global state is refused");
      } catch (IOException e) {
        assertEquals("global state " + Sha256.hex(broken) + ": the server's global state holds "
            + "NaN or Inf (tensor w); nothing is trained on it or uploaded and the device keeps"
            + " its state: the run's operator must act", e.getMessage());
      }
      script.add(new Answer(200, task));  // cached: polled, not downloaded again
    }
    assertEquals("never trained", 0, trained[0]);
    assertTrue("nothing was uploaded", requests.stream().noneMatch(r -> r.startsWith("PUT")));
    assertFalse(new File(tmp.getRoot(), PendingRound.FILE).exists());
  }

  // A device's private state belongs to one run config (the Python SDK's rule): a run
  // recreated on the server under the same id (a new database, another model) is refused the
  // state trained under the old one, in one line, the file kept.

  static final String OTHER_CONFIG = TRAIN.replace("\"round\": 4", "\"round\": 0")
      .replace("\"total_rounds\": 5", "\"total_rounds\": 5, \"model\": \"resnet\"");
  static final String UPLOADED = "{\"run_id\": 1, \"round\": 4, \"sha256\": \"x\", "
      + "\"duplicate\": false}";

  private File stateFile() {
    return new File(tmp.getRoot(), FederatedClient.CLIENT_STATE);
  }

  private Map<String, Object> cache() throws IOException {
    @SuppressWarnings("unchecked")
    Map<String, Object> cache = (Map<String, Object>) Json.parse(new String(Files.readAllBytes(
        new File(tmp.getRoot(), FederatedClient.CACHE).toPath()), StandardCharsets.UTF_8));
    return new LinkedHashMap<>(cache);
  }

  private void writeCache(Map<String, Object> cache) throws IOException {
    Files.write(new File(tmp.getRoot(), FederatedClient.CACHE).toPath(),
        JsonWriter.write(cache).getBytes(StandardCharsets.UTF_8));
  }

  /** One round of run 1 trained, uploaded and committed under the TRAIN config. */
  private FederatedClient committedRound(int[] trained) throws Exception {
    FederatedClient c = enrolled(new RetryPolicy(100, 100, 250));  // a stray upload fails fast
    script.add(new Answer(200, TRAIN));
    script.add(new Answer(200, GLOBAL));
    script.add(new Answer(200, UPLOADED));
    assertEquals(StepResult.TRAINED, c.step(counting(trained)).status);
    assertTrue(stateFile().exists());
    return c;
  }

  @Test
  public void aStateOfTheSameRunUnderAnotherConfigIsRefusedInOneLineAndKept() throws Exception {
    int[] trained = {0};
    FederatedClient c = committedRound(trained);
    byte[] kept = Files.readAllBytes(stateFile().toPath());
    assertEquals(Task.parse(TRAIN.getBytes(StandardCharsets.UTF_8)).configDigest(),
        cache().get(FederatedClient.STATE_CONFIG));
    requests.clear();
    for (int poll = 0; poll < 2; poll++) {  // every poll of the recreated run, not just one
      script.add(new Answer(200, OTHER_CONFIG));
      try {
        c.step(counting(trained));
        fail("a state of another config of run 1 is refused");
      } catch (IOException e) {
        assertEquals(stateFile() + ": this device's state of run 1 was trained under another "
            + "config of that run (run 1 was recreated or changed on the server); the file is "
            + "kept as it is: move it away to take part in the run from a fresh state",
            e.getMessage());
      }
    }
    assertEquals("never trained on it", 1, trained[0]);
    assertTrue("nothing was uploaded", requests.stream().noneMatch(r -> r.startsWith("PUT")));
    assertArrayEquals("the file is kept as it is", kept,
        Files.readAllBytes(stateFile().toPath()));
    assertFalse(new File(tmp.getRoot(), PendingRound.FILE).exists());

    assertTrue("moved away: the run is joined from a fresh state", stateFile().delete());
    script.add(new Answer(200, OTHER_CONFIG));
    script.add(new Answer(200, UPLOADED.replace("\"round\": 4", "\"round\": 0")));
    assertEquals(StepResult.TRAINED, c.step(counting(trained)).status);
    assertEquals(Task.parse(OTHER_CONFIG.getBytes(StandardCharsets.UTF_8)).configDigest(),
        cache().get(FederatedClient.STATE_CONFIG));
  }

  @Test
  public void theSameConfigInAnotherKeyOrderAndWhitespaceIsTheSameRun() throws Exception {
    int[] trained = {0};
    FederatedClient c = committedRound(trained);
    script.add(new Answer(200, TRAIN.replace("\"round\": 4", "\"round\": 5").replace(
        "{\"lr_schedule\": {\"lr\": 0.1, \"decay\": 0.5}, \"total_rounds\": 5}",
        "{\"total_rounds\":5,\"lr_schedule\":{\"decay\":0.5,\"lr\":0.1}}")));
    script.add(new Answer(200, UPLOADED.replace("\"round\": 4", "\"round\": 5")));
    assertEquals(StepResult.TRAINED, c.step(counting(trained)).status);
    assertEquals(2, trained[0]);
  }

  /**
   * A cache.json of an older release has no config digest: its state is taken as before. One
   * with the Python SDK's digest, which this client cannot check, keeps working too, and the
   * Python key is dropped once this client replaced the state it described.
   */
  @Test
  public void aCacheWithoutThisClientsDigestTakesTheStateAsBefore() throws Exception {
    int[] trained = {0};
    FederatedClient c = committedRound(trained);
    Map<String, Object> cache = cache();
    cache.remove(FederatedClient.STATE_CONFIG);
    cache.put("state_config", "0".repeat(64));  // the Python SDK's digest
    writeCache(cache);
    script.add(new Answer(200, OTHER_CONFIG.replace("\"round\": 0", "\"round\": 5")));
    script.add(new Answer(200, UPLOADED.replace("\"round\": 4", "\"round\": 5")));
    assertEquals(StepResult.TRAINED, c.step(counting(trained)).status);
    assertEquals(2, trained[0]);
    assertFalse("it described the state replaced", cache().containsKey("state_config"));
    assertEquals(Task.parse(OTHER_CONFIG.getBytes(StandardCharsets.UTF_8)).configDigest(),
        cache().get(FederatedClient.STATE_CONFIG));
  }
}
