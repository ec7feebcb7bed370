package org.pflkit.core.fl;

import static org.junit.Assert.assertEquals;
import static org.junit.Assert.assertFalse;
import static org.junit.Assert.assertTrue;
import static org.junit.Assert.fail;

import com.sun.net.httpserver.HttpExchange;
import com.sun.net.httpserver.HttpServer;
import java.io.File;
import java.io.IOException;
import java.net.InetSocketAddress;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Base64;
import java.util.Collections;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import java.util.function.UnaryOperator;
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
import org.pflkit.core.secagg.DpGrid;
import org.pflkit.core.secagg.RoundSetup;
import org.pflkit.core.secagg.SecAggDevice;
import org.pflkit.core.secagg.SecAggException;

/**
 * A Java device in a SecAgg round over HTTP whose server lies (Python's
 * test_secagg_lying_server.py and test_secagg_reentry.py): the JDK's HTTP server on loopback
 * plays pfl-server's SecAgg routes, with three real {@link SecAggDevice}s as the device's peers,
 * and the device is a real {@link FederatedClient} that trains and then takes part
 * ({@code step()}). It refuses what only a lying server sends, with nothing more sent, and
 * masks a round's change once however often the server asks it to start over.
 */
public class SecAggLyingServerTest {
  private static final long DEVICE = 1;
  private static final long[] ROSTER = {1, 2, 3, 4};
  private static final String SECAGG = Wire.secagg(5, 0);

  @Rule public final TemporaryFolder tmp = new TemporaryFolder();

  private final RoundSetup setup = new RoundSetup(7, ROSTER, 3, 3, 3, 1.0, new byte[32], null,
      null);
  private final byte[] global = Safetensors.write(Collections.singletonMap("w",
      TensorData.ofFloats(new long[] {3}, new float[] {0, 0, 0})),
      Collections.<String, String>emptyMap());
  /** The device's requests that carry something of its round: "POST keys", "PUT masked", ... */
  private final List<String> posted = Collections.synchronizedList(new ArrayList<>());
  private HttpServer server;
  private Map<Long, SecAggDevice> peers;
  private Map<Long, byte[][]> keys;  // everyone's advertised keys, the device's once it sent them
  private Map<Long, byte[]> fromDevice;  // the device's sealed shares, by receiver
  /** Unmask answers the server refuses with 409, each time opening the round afresh. */
  private int refusals;
  private UnaryOperator<Map<Long, byte[][]>> tamperKeys = UnaryOperator.identity();
  private UnaryOperator<Map<String, Object>> tamperRequest = UnaryOperator.identity();
  /** The keys directory as it goes out in JSON: id to [cipher key, mask key] in base64. */
  private UnaryOperator<Map<String, Object>> tamperDirectory = UnaryOperator.identity();
  private UnaryOperator<Map<String, Object>> tamperSetup = UnaryOperator.identity();

  @Before
  public void start() throws IOException {
    reset();
    server = HttpServer.create(new InetSocketAddress("127.0.0.1", 0), 0);
    server.createContext("/", exchange -> {
      try {
        answer(exchange);
      } catch (RuntimeException e) {
        reply(exchange, 500, Collections.singletonMap("detail", String.valueOf(e)));
      }
    });
    server.start();
  }

  @After
  public void stop() {
    server.stop(0);
  }

  /** A fresh round: new peers with new keys, nothing from the device yet. */
  private void reset() {
    peers = new TreeMap<>();
    keys = new TreeMap<>();
    fromDevice = new TreeMap<>();
    for (long id : ROSTER) {
      if (id != DEVICE) {
        peers.put(id, new SecAggDevice(id, setup));
        keys.put(id, peers.get(id).advertiseKeys());
      }
    }
  }

  private void answer(HttpExchange exchange) throws IOException {
    String method = exchange.getRequestMethod();
    String path = exchange.getRequestURI().getPath();
    byte[] body = exchange.getRequestBody().readAllBytes();
    if (path.equals(Wire.ENROLL)) {
      reply(exchange, 200, Json.parse("{\"client_id\": 1, \"secret\": \"s3cret\"}"));
    } else if (path.equals(Wire.TASK)) {
      reply(exchange, 200, task());
    } else if (path.equals(Wire.global(Sha256.hex(global)))) {
      exchange.sendResponseHeaders(200, global.length);
      exchange.getResponseBody().write(global);
      exchange.close();
    } else if (path.startsWith(SECAGG + "/") && method.equals("GET")) {
      reply(exchange, 200, round(path.substring(SECAGG.length() + 1)));
    } else if (path.startsWith(SECAGG + "/")) {
      String step = path.substring(SECAGG.length() + 1);
      posted.add(method + " " + step);
      if (step.equals("unmask") && refusals > 0) {
        refusals--;
        reset();
        reply(exchange, 409, Collections.singletonMap("detail", "try again"));
        return;
      }
      receive(step, body);
      reply(exchange, 200, Collections.emptyMap());
    } else {
      reply(exchange, 404, Collections.singletonMap("detail", "no " + path));
    }
  }

  private Map<String, Object> task() {
    Map<String, Object> secagg = new LinkedHashMap<>();
    secagg.put("round_id", setup.roundId);
    secagg.put("roster", Arrays.asList(1, 2, 3, 4));
    secagg.put("threshold", setup.threshold);
    secagg.put("neighbours", setup.neighbours);
    secagg.put("dimension", setup.dimension);
    secagg.put("clip_range", setup.clipRange);
    secagg.put("graph_seed", b64(setup.graphSeed));
    secagg.put("dp_clip_norm", null);  // pfl-server's setup of a round without DP
    secagg.put("dp_noise_multiplier", null);
    Map<String, Object> task = new LinkedHashMap<>();
    task.put("status", "train");
    task.put("retry_after", 1.0);
    task.put("run_id", 5);
    task.put("round", 0);
    task.put("global_hash", Sha256.hex(global));
    task.put("config", Collections.emptyMap());
    task.put("secagg", tamperSetup.apply(secagg));
    return task;
  }

  private void receive(String step, byte[] body) {
    if (step.equals("keys")) {
      Map<?, ?> pair = (Map<?, ?>) Json.parse(new String(body, StandardCharsets.UTF_8));
      keys.put(DEVICE, new byte[][] {unb64(pair.get("cipher_key")), unb64(pair.get("mask_key"))});
    } else if (step.equals("shares")) {
      Map<?, ?> json = (Map<?, ?>) Json.parse(new String(body, StandardCharsets.UTF_8));
      ((Map<?, ?>) json.get("shares")).forEach((to, blob) ->
          fromDevice.put(Long.parseLong((String) to), unb64(blob)));
    }
  }

  /** The server's answer to the device's GET of a step. */
  private Map<String, Object> round(String step) {
    Map<String, Object> out = new LinkedHashMap<>();
    if (step.equals("keys")) {
      Map<Long, byte[][]> others = new TreeMap<>(keys);
      others.remove(DEVICE);
      Map<String, Object> directory = new TreeMap<>();
      tamperKeys.apply(others).forEach((id, pair) ->
          directory.put(Long.toString(id), Arrays.asList(b64(pair[0]), b64(pair[1]))));
      out.put("keys", tamperDirectory.apply(directory));
    } else if (step.equals("shares")) {
      Map<String, Object> inbox = new TreeMap<>();
      peers.forEach((id, peer) -> {
        Map<Long, byte[][]> theirs = new TreeMap<>(keys);
        theirs.remove(id);
        inbox.put(Long.toString(id), b64(peer.shareKeys(theirs).get(DEVICE)));
      });
      out.put("shares", inbox);
    } else {
      out.put("survivors", Arrays.asList(1, 2, 3, 4));
      out.put("dropped", Collections.emptyList());
      out = tamperRequest.apply(out);
    }
    return out;
  }

  private static void reply(HttpExchange exchange, int status, Object json) throws IOException {
    byte[] bytes = JsonWriter.write(json).getBytes(StandardCharsets.UTF_8);
    exchange.getResponseHeaders().add("Content-Type", "application/json");
    exchange.sendResponseHeaders(status, bytes.length);
    exchange.getResponseBody().write(bytes);
    exchange.close();
  }

  /** The device as the app starts it: a FederatedClient on its folder (enrolled once). */
  private FederatedClient device() throws IOException {
    File dir = tmp.getRoot();
    FederatedClient c = new FederatedClient("http://127.0.0.1:" + server.getAddress().getPort(),
        dir, new UrlConnectionTransport(2_000, 5_000), new RetryPolicy(1, 1, 0), millis -> { });
    if (!c.isEnrolled()) {
      assertEquals(DEVICE, c.enroll("tok"));
    }
    return c;
  }

  private StepResult step(FederatedClient c) throws Exception {
    return c.step((task, g, state) -> new RoundTrainer.Result(Collections.singletonMap("w",
        TensorData.ofFloats(new long[] {3}, new float[] {0.25f, -0.5f, 0.125f})), 10,
        Collections.<String, Double>emptyMap(), null));
  }

  /** The device's one-line refusal of this round. */
  private String refusal() throws Exception {
    return refusal(SecAggException.class);
  }

  private String refusal(Class<? extends RuntimeException> kind) throws Exception {
    try {
      fail("the device did not refuse the round: " + step(device()).status);
      return null;
    } catch (RuntimeException e) {
      assertTrue(e.toString(), kind.isInstance(e));
      assertFalse(e.getMessage(), e.getMessage().contains("\n"));
      return e.getMessage();
    }
  }

  @Test
  public void anHonestRoundIsTakenPartIn() throws Exception {
    assertEquals(StepResult.TRAINED, step(device()).status);
    assertEquals(Arrays.asList("POST keys", "POST shares", "PUT masked", "POST unmask"), posted);
  }

  @Test
  public void aServerThatRefusesTheLastMessageAndStartsOverGetsTheChangeMaskedOnce()
      throws Exception {
    refusals = 3;
    for (int restart = 0; restart < 3; restart++) {  // a new client object: the app restarted
      StepResult result = step(device());
      assertEquals(Wire.WAIT, result.status);
      assertEquals(Long.valueOf(0), result.round);
    }
    assertEquals("masked once", 1, Collections.frequency(posted, "PUT masked"));
    assertEquals(Arrays.asList("POST keys", "POST shares", "PUT masked", "POST unmask"), posted);
    assertTrue("the round stays pending", new File(tmp.getRoot(), PendingRound.FILE).isFile());
  }

  /**
   * Python's order: the roster and the change's size are checked before the round is marked
   * begun, so a setup the device refused does not make it sit out the corrected one.
   */
  @Test
  public void aRefusedSetupIsNoAttemptAndTheCorrectedRoundIsTakenPartIn() throws Exception {
    tamperSetup = secagg -> {
      secagg.put("roster", Arrays.asList(2, 3, 4));
      return secagg;
    };
    assertEquals("client 1 is not in round 7's roster", refusal());
    tamperSetup = secagg -> {
      secagg.put("dimension", 4);
      return secagg;
    };
    assertEquals("secagg: the update has 3 floating values, the round masks 4",
        refusal(IllegalArgumentException.class));
    assertEquals("nothing sent", Collections.emptyList(), posted);
    tamperSetup = UnaryOperator.identity();
    assertEquals(StepResult.TRAINED, step(device()).status);
    assertEquals(Arrays.asList("POST keys", "POST shares", "PUT masked", "POST unmask"), posted);
  }

  /** As Python's device: DP's C and z both in a run config's ranges, or neither; else refused. */
  @Test
  public void aDpSetupOutsideARunConfigsRangesIsRefusedBeforeAnythingIsSent() throws Exception {
    String refused = "secagg: the task's dp_clip_norm and dp_noise_multiplier are not both in a"
        + " run config's ranges (docs/privacy.md)";
    Object[][] lies = {{0.5, null}, {null, 1.0}, {0.0, 1.0}, {-1.0, 1.0}, {1e6 + 1, 1.0},
        {0.5, 1e3 + 1}, {"0.5", 1.0}, {0.5, true}};
    for (Object[] dp : lies) {
      tamperSetup = secagg -> {
        secagg.put("dp_clip_norm", dp[0]);
        secagg.put("dp_noise_multiplier", dp[1]);
        return secagg;
      };
      assertEquals(Arrays.toString(dp), refused, refusal());
    }
    assertEquals("nothing sent", Collections.emptyList(), posted);
    tamperSetup = secagg -> {  // the ranges' ends, with the clip range a server gives them
      secagg.put("dp_clip_norm", 1e6);
      secagg.put("dp_noise_multiplier", 1e3);
      double t = ((Number) secagg.get("threshold")).doubleValue();
      secagg.put("clip_range", 1e6 + DpGrid.QUANTIZATION_SIGMAS * 1e3 * 1e6 / Math.sqrt(t));
      return secagg;
    };
    assertEquals(StepResult.TRAINED, step(device()).status);
  }

  @Test
  public void anUnmaskRequestPaddedWithTheDeviceItselfOrStrangersIsRefused() throws Exception {
    tamperRequest = ask -> {
      ask.put("survivors", Arrays.asList(1, 1, 1));
      ask.put("dropped", Arrays.asList(2, 3, 4));
      return ask;
    };
    assertEquals("client 1: the unmask request names [1] twice or from outside the roster: "
        + "refused", refusal());
    assertFalse(posted.contains("POST unmask"));
  }

  @Test
  public void anUnusableOrRespeltPeerKeyIsRefusedBeforeAnyShareLeaves() throws Exception {
    tamperKeys = directory -> {
      directory.put(2L, new byte[][] {directory.get(2L)[0], new byte[32]});
      return directory;
    };
    assertEquals("client 1: client 2's advertised key is not a usable X25519 public key",
        refusal());
    assertEquals(Collections.singletonList("POST keys"), posted);
  }

  /** A key that is not text is named by its kind: never the server's text, of any length. */
  @Test
  public void aPeerKeyThatIsNotTextIsRefusedWithoutQuotingIt() throws Exception {
    String hostile = "s3cret \u001b[2J" + "x".repeat(100_000);
    tamperDirectory = directory -> {
      directory.put("2", Arrays.asList(Collections.singletonMap("k", hostile), "AAAA"));
      return directory;
    };
    assertEquals("expected base64 text, found an object", refusal());
    assertEquals(Collections.singletonList("POST keys"), posted);
  }

  private static String b64(byte[] raw) {
    return Base64.getEncoder().encodeToString(raw);
  }

  private static byte[] unb64(Object text) {
    return Base64.getDecoder().decode((String) text);
  }
}
