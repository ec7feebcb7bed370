package org.pflkit.core.fl;

import static org.junit.Assert.assertArrayEquals;
import static org.junit.Assert.assertEquals;
import static org.junit.Assert.assertFalse;
import static org.junit.Assert.assertNotNull;
import static org.junit.Assert.assertNull;
import static org.junit.Assert.assertTrue;
import static org.junit.Assert.fail;

import java.io.File;
import java.io.IOException;
import java.nio.file.Files;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import java.util.concurrent.TimeUnit;
import org.junit.BeforeClass;
import org.junit.ClassRule;
import org.junit.FixMethodOrder;
import org.junit.Test;
import org.junit.runners.MethodSorters;
import org.pflkit.core.AtomicFiles;
import org.pflkit.core.Safetensors;
import org.pflkit.core.TensorData;
import org.pflkit.core.personal.LabeledSamples;

/**
 * Three Java clients take part in round 0 of a real SuPerFed run on a real {@code pfl-server}
 * (loopback, SQLite): one has a corrupt, a wrong-shaped, an incomplete and an overweight
 * update refused first, one loses the
 * server's answer and retries, one is killed between persisting and sending its upload and
 * resumes in a new client object. The round closes with each update counted once and the new
 * global state equal to the sample-weighted mean of the three uploads. The tests share the run
 * and run in name order. The last one checks with pflkit's own reader that the app's labelled
 * samples are in the {@code pfl-client --data} layout.
 */
@FixMethodOrder(MethodSorters.NAME_ASCENDING)
public class FlServerTest {
  @ClassRule public static final PflServer SERVER = new PflServer("--min-enrolled", "3");

  private static final int CLIENTS = 3;
  private static final List<File> DIRS = new ArrayList<>();
  /** Upload bytes each client's trainer produced, by client id. */
  private static final Map<Long, Safetensors> UPLOADS = new TreeMap<>();
  private static final Map<Long, Long> SAMPLES = new TreeMap<>();

  /** Thrown by a transport to model the app being killed: escapes every catch in the client. */
  static final class Killed extends Error {
    private static final long serialVersionUID = 1L;
  }

  @BeforeClass
  public static void enroll() throws Exception {
    for (long id = 0; id < CLIENTS; id++) {
      File dir = new File(SERVER.root, "device" + id);
      DIRS.add(dir);
      FederatedClient client = client(dir, real());
      assertEquals(id, client.enroll(SERVER.token(id)));
      assertTrue(client.isEnrolled());
    }
  }

  static FederatedClient client(File dir, HttpTransport http) throws IOException {
    return new FederatedClient(SERVER.url(), dir, http, new RetryPolicy(50, 500, 60_000),
        FederatedClient.THREAD_SLEEP);
  }

  static HttpTransport real() {
    return new UrlConnectionTransport(
        5_000, (int) TimeUnit.SECONDS.toMillis(PflServer.GUARD_SECONDS));
  }

  /** Poll until round 0 asks this client to train. */
  static Task awaitTrain(FederatedClient client) throws Exception {
    long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(PflServer.GUARD_SECONDS);
    while (System.nanoTime() < deadline) {
      Task task = client.poll();
      if (task.isTrain()) {
        return task;
      }
      Thread.sleep(100); // poll
    }
    throw new AssertionError("round 0 never opened");
  }

  /** Trains by {@link PflServer#goldenResult} and records what it uploads. */
  static final class GoldenTrainer implements RoundTrainer {
    private final long id;
    int calls;

    GoldenTrainer(long id) {
      this.id = id;
    }

    @Override
    public Result train(Task task, Safetensors global, ClientState state) throws Exception {
      calls++;
      assertNull("the first round of a run starts without private state", state);
      assertEquals("round 0 trains at the run's lr (java_client_goldens.py)", 0.05,
          task.learningRate(), 0.0);
      Safetensors global0 = Safetensors.parse(Files.readAllBytes(
          new File(SERVER.goldens, "global0.safetensors").toPath()), "global0");
      assertEquals("the server's round-0 state is the one Python computes", global0.tensors,
          global.tensors);
      Result result = SERVER.goldenResult(id, global);
      SAMPLES.put(id, result.numSamples);
      UPLOADS.put(id, Safetensors.parse(Safetensors.write(result.update, null), "upload"));
      return result;
    }
  }

  @Test
  public void a_corruptWrongShapedIncompleteAndOverweightUpdatesAreRefused() throws Exception {
    FederatedClient client = client(DIRS.get(0), real());
    Task task = awaitTrain(client);
    Map<String, TensorData> good =
        SERVER.goldenResult(0, client.globalState(task.globalHash)).update;
    byte[] valid = Safetensors.write(good, null);

    byte[] corrupt = valid.clone();
    corrupt[3] = 0x7f;  // header length far past the end
    ServerRefused refused = upload(client, task, corrupt, 10);
    assertEquals(400, refused.status);

    Map<String, TensorData> wrongShape = new LinkedHashMap<>(good);
    wrongShape.put("head.bias", TensorData.ofFloats(new long[] {9}, new float[9]));
    refused = stepWith(client, wrongShape, 10);
    assertEquals(422, refused.status);
    assertTrue(refused.detail, refused.detail.contains("head.bias"));
    assertTrue("a refused update is kept, with the private state it would commit",
        new File(DIRS.get(0), PendingRound.FILE).exists());

    Map<String, TensorData> extra = new LinkedHashMap<>(good);
    extra.put("head.extra", TensorData.ofFloats(new long[] {1}, new float[1]));
    assertEquals(422, stepWith(client, extra, 10).status);
    Map<String, TensorData> missing = new LinkedHashMap<>(good);
    missing.remove("head.weight");
    refused = stepWith(client, missing, 10);
    assertEquals(422, refused.status);
    assertTrue(refused.detail, refused.detail.contains("lacks"));
    // the server's default max_num_samples: 100000 (the client reports at most the task's)
    assertEquals(Long.valueOf(100_000), task.maxNumSamples);
    refused = upload(client, task, valid, 100_001);
    assertEquals(422, refused.status);
    assertTrue(refused.detail, refused.detail.contains("max_num_samples"));

    Map<String, Object> round = currentRound();
    assertEquals("nothing was counted", new ArrayList<>(), round.get("received"));
    assertNull(client.clientState(task.runId));

    GoldenTrainer trainer = new GoldenTrainer(0);
    client.discardPending();  // the app's call: train the round again
    StepResult result = client.step(trainer);
    assertEquals(StepResult.TRAINED, result.status);
    assertFalse(result.duplicate);
    assertEquals(1, trainer.calls);
  }

  @Test
  public void b_aLostAnswerIsRetriedAndCountedOnce() throws Exception {
    HttpTransport real = real();
    int[] puts = {0};
    HttpTransport losesFirstAnswer = (method, url, headers, body) -> {
      HttpTransport.Response answer = real.send(method, url, headers, body);
      if (method.equals("PUT") && puts[0]++ == 0) {
        throw new IOException("connection reset (the answer was lost)");
      }
      return answer;
    };
    FederatedClient client = client(DIRS.get(1), losesFirstAnswer);
    awaitTrain(client);
    StepResult result = client.step(new GoldenTrainer(1));
    assertEquals(StepResult.TRAINED, result.status);
    assertTrue("the retry sent the same bytes: the server says duplicate", result.duplicate);
    assertEquals(2, puts[0]);
    assertEquals(2, ((List<?>) currentRound().get("received")).size());
  }

  @Test
  public void c_aClientKilledBeforeSendingResumesWithTheSameBytes() throws Exception {
    HttpTransport real = real();
    HttpTransport diesOnUpload = (method, url, headers, body) -> {
      if (method.equals("PUT")) {
        throw new Killed();
      }
      return real.send(method, url, headers, body);
    };
    GoldenTrainer trainer = new GoldenTrainer(2);
    FederatedClient doomed = client(DIRS.get(2), diesOnUpload);
    awaitTrain(doomed);
    try {
      doomed.step(trainer);
      fail("the transport kills the app");
    } catch (Killed expected) {
      // the process is gone; only the folder survives
    }
    File pendingFile = new File(DIRS.get(2), PendingRound.FILE);
    byte[] persisted = AtomicFiles.readOrNull(pendingFile);
    assertNotNull("the upload was persisted before sending", persisted);
    PendingRound pending = PendingRound.fromBytes(persisted, "pending");

    List<byte[]> sent = new ArrayList<>();
    HttpTransport recording = (method, url, headers, body) -> {
      if (method.equals("PUT")) {
        sent.add(body);
      }
      return real.send(method, url, headers, body);
    };
    StepResult result = client(DIRS.get(2), recording).step(trainer);
    assertEquals(StepResult.TRAINED, result.status);
    assertEquals("not trained again", 1, trainer.calls);
    assertEquals(1, sent.size());
    assertArrayEquals(pending.upload, sent.get(0));
    assertFalse(pendingFile.exists());
  }

  @Test
  public void d_theRoundClosesWithTheWeightedMeanOfEachUploadCountedOnce() throws Exception {
    Map<String, Object> closed = null;
    long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(PflServer.GUARD_SECONDS);
    while (closed == null && System.nanoTime() < deadline) {
      Map<String, Object> status = SERVER.status();
      List<?> history = (List<?>) status.get("history");
      if (!history.isEmpty()) {
        @SuppressWarnings("unchecked")
        Map<String, Object> first = (Map<String, Object>) history.get(0);
        closed = first;
      } else {
        Thread.sleep(100); // poll
      }
    }
    assertNotNull("round 0 closed", closed);
    @SuppressWarnings("unchecked")
    Map<String, Object> metrics = (Map<String, Object>) closed.get("metrics");
    long samples = 0;
    for (long n : SAMPLES.values()) {
      samples += n;
    }
    assertEquals(3.0, ((Number) metrics.get("participants")).doubleValue(), 0);
    assertEquals((double) samples, ((Number) metrics.get("samples")).doubleValue(), 0);

    FederatedClient client = client(DIRS.get(0), real());
    Safetensors next = client.globalState((String) closed.get("global_hash"));
    assertEquals(UPLOADS.get(0L).tensors.keySet(), next.tensors.keySet());
    for (String name : next.tensors.keySet()) {
      float[] got = next.tensors.get(name).floats();
      double[] sum = new double[got.length];
      for (Map.Entry<Long, Safetensors> u : UPLOADS.entrySet()) {
        float[] v = u.getValue().tensors.get(name).floats();
        for (int i = 0; i < v.length; i++) {
          sum[i] += (double) v[i] * SAMPLES.get(u.getKey());
        }
      }
      for (int i = 0; i < got.length; i++) {
        float want = (float) (sum[i] / samples);
        assertEquals(name + "[" + i + "]", want, got[i], 1e-6f * Math.max(1f, Math.abs(want)));
      }
    }
    for (long id = 0; id < CLIENTS; id++) {
      ClientState kept = client(DIRS.get((int) id), real()).clientState(
          ((Number) SERVER.status().get("id")).longValue());
      assertNotNull("client " + id + " kept its private state", kept);
      Map<String, TensorData> want = new TreeMap<>();
      for (Map.Entry<String, TensorData> e : SERVER.golden(id).tensors.entrySet()) {
        if (e.getKey().startsWith("state/")) {
          want.put(e.getKey().substring("state/".length()), e.getValue());
        }
      }
      assertEquals(want, new TreeMap<>(kept.tensors));
    }
  }

  @Test
  public void e_labelledSamplesAreWhatPflClientReads() throws Exception {
    File dir = new File(SERVER.root, "samples");
    LabeledSamples samples = LabeledSamples.open(dir, new long[] {1, 2, 2}, 10);
    samples.add(new float[] {0.5f, -1f, 2f, 0f}, 7);
    samples.add(new float[] {1f, 1f, 1f, 1f}, 0);
    String printed = SERVER.python("from pflkit.sdk.client import load_client_data\n"
        + "d = load_client_data('" + dir.getPath() + "')\n"
        + "print(tuple(d.x.shape), d.y.tolist(), d.x.flatten().tolist()[:4])");
    assertEquals("(2, 1, 2, 2) [7, 0] [0.5, -1.0, 2.0, 0.0]", printed);
  }

  private static Map<String, Object> currentRound() throws IOException {
    @SuppressWarnings("unchecked")
    Map<String, Object> round = (Map<String, Object>) SERVER.status().get("current_round");
    return round;
  }

  private static ServerRefused upload(FederatedClient client, Task task, byte[] body,
      long numSamples) throws IOException {
    try {
      client.request("PUT", Wire.update(task.runId, task.round, numSamples), body,
          Wire.OCTET_STREAM);
    } catch (ServerRefused refused) {
      return refused;
    }
    throw new AssertionError("the server accepted " + body.length + " bytes it should refuse");
  }

  /** Train the round again (discarding a refused one) with this update; the refusal. */
  private static ServerRefused stepWith(FederatedClient client, Map<String, TensorData> update,
      long numSamples) throws Exception {
    client.discardPending();
    try {
      client.step((task, global, state) -> new RoundTrainer.Result(update, numSamples,
          new LinkedHashMap<>(), null));
    } catch (ServerRefused refused) {
      return refused;
    }
    throw new AssertionError("the server accepted an update it should refuse");
  }
}
