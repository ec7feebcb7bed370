package org.pflkit.core.fl;

import static org.junit.Assert.assertEquals;
import static org.junit.Assert.assertNotNull;
import static org.junit.Assert.assertTrue;

import java.io.File;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.Callable;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import org.junit.ClassRule;
import org.junit.Test;
import org.pflkit.core.Safetensors;
import org.pflkit.core.TensorData;

/**
 * A secure-aggregation round on a real {@code pfl-server} (issue 24 item 5) with a Java device,
 * a Python {@code pfl-client} and a second Java device that goes offline right after its masked
 * input: the round closes from the others' shares of the missing device's seed with all three
 * updates in the sum, and the new global state is the mean of the three changes.
 */
public class SecAggServerTest {
  @ClassRule public static final PflServer SERVER = new PflServer("--min-enrolled", "3");

  /** The device that stops after its masked input: every later request fails like this. */
  static final class Gone extends Error {
    private static final long serialVersionUID = 1L;

    Gone() {
      super("offline after the masked input");
    }
  }

  @Test
  public void aRoundClosesWithAJavaAPythonAndADroppedDevice() throws Exception {
    String golden = new String(Files.readAllBytes(
        new File(SERVER.goldens, "run.toml").toPath()), StandardCharsets.UTF_8);
    String run = golden.replace("rounds = 2\neval_interval = 2", "rounds = 1\neval_interval = 1")
        + "[aggregation]\nsecagg = true\nsecagg_threshold = 0.6\n";  // 3 devices: t = 2
    assertTrue("java_client_goldens.py's run changed: update this test",
        run.contains("rounds = 1\n") && run.contains("clients_per_round = 3"));
    File data = SERVER.replaceRunWithPythonDevice("secagg", run);

    List<byte[]> masked = new ArrayList<>();
    HttpTransport real = FlServerTest.real();
    HttpTransport recording = (method, url, headers, body) -> {
      HttpTransport.Response answer = real.send(method, url, headers, body);
      if (url.endsWith("/secagg/masked") && answer.status == 200) {
        masked.add(body);
      }
      return answer;
    };
    boolean[] sentMasked = {false};
    HttpTransport dropping = (method, url, headers, body) -> {
      if (sentMasked[0]) {
        throw new Gone();
      }
      HttpTransport.Response answer = real.send(method, url, headers, body);
      sentMasked[0] = url.endsWith("/secagg/masked") && answer.status == 200;
      return answer;
    };
    FederatedClient java = device(new File(SERVER.root, "java"), recording);
    FederatedClient dropped = device(new File(SERVER.root, "dropped"), dropping);
    assertEquals(0, java.enroll(SERVER.token(0)));
    assertEquals(2, dropped.enroll(SERVER.token(2)));
    Process python = SERVER.start(new File(SERVER.root, "pfl-client.log"), "pfl-client",
        "--server", SERVER.url(), "--data", data.getPath(), "--token", SERVER.token(1),
        "--threads", "1", "--give-up-after", String.valueOf(PflServer.GUARD_SECONDS),
        "--max-backoff", "1", "--log-level", "warning");
    ExecutorService pool = Executors.newFixedThreadPool(2);
    try {
      Task task = FlServerTest.awaitTrain(java);
      assertNotNull("the task carries the round's SecAgg setup", task.secagg);
      Safetensors global = java.globalState(task.globalHash);
      RoundTrainer.Result mine = SERVER.goldenResult(0, global);
      RoundTrainer.Result theirs = SERVER.goldenResult(2, global);
      Future<StepResult> javaStep = pool.submit(step(java, mine));
      Future<StepResult> droppedStep = pool.submit(step(dropped, theirs));
      try {
        droppedStep.get(PflServer.GUARD_SECONDS, TimeUnit.SECONDS);
        throw new AssertionError("the dropped device finished its round");
      } catch (ExecutionException e) {
        assertTrue(String.valueOf(e.getCause()), e.getCause() instanceof Gone);
      }
      assertEquals(StepResult.TRAINED, javaStep.get(PflServer.GUARD_SECONDS,
          TimeUnit.SECONDS).status);
      assertEquals("one masked input, 4 bytes a coordinate",
          4 * SecAggRound.change(global.tensors, mine.update).length, masked.get(0).length);

      assertTrue("pfl-client finished", python.waitFor(PflServer.GUARD_SECONDS,
          TimeUnit.SECONDS));
      assertEquals("pfl-client's exit status", 0, python.exitValue());
      Map<String, Object> status = SERVER.status();
      assertEquals("finished", status.get("status"));
      @SuppressWarnings("unchecked")
      Map<String, Object> round0 = (Map<String, Object>) ((List<?>) status.get("history")).get(0);
      @SuppressWarnings("unchecked")
      Map<String, Object> metrics = (Map<String, Object>) round0.get("metrics");
      assertEquals("all three masked inputs are in the sum", 3.0,
          ((Number) metrics.get("participants")).doubleValue(), 0);

      // the new global is the mean of the three changes: what remains of it after the two
      // Java changes is the pfl-client's (deterministic: its golden one), up to the float32
      // rounding of the stored global (3 x ~1e-8) and quantization (7e-10); a mask that did
      // not cancel would leave errors near 1
      Task finished = java.poll();
      Safetensors after = java.globalState(finished.globalHash);
      double[] mean = SecAggRound.change(global.tensors, subset(after, mine.update));
      double[] a = SecAggRound.change(global.tensors, mine.update);
      double[] b = SecAggRound.change(global.tensors, theirs.update);
      double[] python1 = SecAggRound.change(global.tensors,
          SERVER.goldenResult(1, global).update);
      double worst = 0;
      for (int i = 0; i < mean.length; i++) {
        worst = Math.max(worst, Math.abs(3 * mean[i] - a[i] - b[i] - python1[i]));
      }
      assertTrue("the pfl-client's implied change is off its golden one by " + worst,
          worst < 1e-6);
    } finally {
      pool.shutdownNow();
      python.destroyForcibly();
    }
  }

  private static FederatedClient device(File dir, HttpTransport http) throws IOException {
    return new FederatedClient(SERVER.url(), dir, http,
        new RetryPolicy(50, 500, TimeUnit.SECONDS.toMillis(PflServer.GUARD_SECONDS)),
        FederatedClient.THREAD_SLEEP);
  }

  private static Callable<StepResult> step(FederatedClient client, RoundTrainer.Result result) {
    return () -> client.step((t, g, state) -> result);
  }

  /** The tensors of {@code state} that {@code like} has. */
  private static Map<String, TensorData> subset(Safetensors state, Map<String, TensorData> like) {
    Map<String, TensorData> out = new LinkedHashMap<>();
    for (String name : like.keySet()) {
      out.put(name, state.tensors.get(name));
    }
    return out;
  }
}
