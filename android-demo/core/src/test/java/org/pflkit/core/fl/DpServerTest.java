package org.pflkit.core.fl;

import static org.junit.Assert.assertEquals;
import static org.junit.Assert.assertFalse;
import static org.junit.Assert.assertNotNull;
import static org.junit.Assert.assertTrue;
import static org.junit.Assert.fail;

import java.io.File;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.concurrent.TimeUnit;
import org.junit.ClassRule;
import org.junit.Test;
import org.pflkit.core.Safetensors;
import org.pflkit.core.TensorData;

/**
 * A DP-FedAvg round whose devices clip ({@code dp_clip_on_device}) on a real {@code pfl-server}
 * with a Java device and a Python {@code pfl-client} together (issue 24 item 5): the Java
 * client reads {@code clip_norm} from its task and clips its upload, the server refuses the
 * same upload unclipped (422) and accepts both devices' clipped ones, and the run finishes.
 */
public class DpServerTest {
  @ClassRule public static final PflServer SERVER = new PflServer("--min-enrolled", "2");

  /** Far below both devices' change, so both really clip. */
  private static final double CLIP = 0.05;

  @Test
  public void aJavaAndAPythonDeviceClipAndTheServerAcceptsBoth() throws Exception {
    String golden = new String(Files.readAllBytes(
        new File(SERVER.goldens, "run.toml").toPath()), StandardCharsets.UTF_8);
    String run = golden.replace("rounds = 2\neval_interval = 2", "rounds = 1\neval_interval = 1")
        .replace("clients_per_round = 3", "clients_per_round = 2")
        + "[aggregation]\ndp_clip_norm = " + CLIP + "\ndp_noise_multiplier = 1.0\n"
        + "dp_clip_on_device = true\n";
    assertTrue("java_client_goldens.py's run changed: update this test", run.contains(
        "rounds = 1\n") && run.contains("clients_per_round = 2"));
    File data = SERVER.replaceRunWithPythonDevice("dp", run);

    List<byte[]> puts = new ArrayList<>();
    HttpTransport real = FlServerTest.real();
    HttpTransport recording = (method, url, headers, body) -> {
      if (method.equals("PUT")) {
        puts.add(body);
      }
      return real.send(method, url, headers, body);
    };
    FederatedClient java = new FederatedClient(SERVER.url(), new File(SERVER.root, "java"),
        recording, new RetryPolicy(50, 500, 60_000), FederatedClient.THREAD_SLEEP);
    java.enroll(SERVER.token(0));
    Process python = SERVER.start(new File(SERVER.root, "pfl-client.log"), "pfl-client",
        "--server", SERVER.url(), "--data", data.getPath(), "--token", SERVER.token(1),
        "--threads", "1", "--give-up-after", String.valueOf(PflServer.GUARD_SECONDS),
        "--max-backoff", "1", "--log-level", "warning");
    try {
      Task task = FlServerTest.awaitTrain(java);
      assertEquals("the task says to clip", CLIP, task.clipNorm, 0.0);
      Safetensors global = java.globalState(task.globalHash);
      RoundTrainer.Result trained = SERVER.goldenResult(0, global);
      assertTrue(norm(global, trained.update) > CLIP);

      byte[] unclipped = Safetensors.write(trained.update, null);
      try {  // the test's switch: the same upload, not clipped
        java.request("PUT", Wire.update(task.runId, task.round, trained.numSamples), unclipped,
            Wire.OCTET_STREAM);
        fail("the server accepted an update over the clip norm");
      } catch (ServerRefused refused) {
        assertEquals(422, refused.status);
        assertTrue(refused.detail, refused.detail.contains("over the round's clip norm"));
      }

      StepResult result = java.step((t, g, state) -> trained);
      assertEquals("the clipped upload was accepted", StepResult.TRAINED, result.status);
      assertFalse(result.duplicate);
      assertEquals(2, puts.size());
      double clipped = norm(global, Safetensors.parse(puts.get(1), "upload").tensors);
      assertEquals("the Java client clipped its change to C", CLIP, clipped, 1e-6 * CLIP);

      assertTrue("pfl-client finished",
          python.waitFor(PflServer.GUARD_SECONDS, TimeUnit.SECONDS));
      assertEquals("pfl-client's exit status", 0, python.exitValue());
      Map<String, Object> status = SERVER.status();
      assertEquals("finished", status.get("status"));
      @SuppressWarnings("unchecked")
      Map<String, Object> round0 = (Map<String, Object>) ((List<?>) status.get("history")).get(0);
      @SuppressWarnings("unchecked")
      Map<String, Object> metrics = (Map<String, Object>) round0.get("metrics");
      assertEquals("both devices' uploads were counted", 2.0,
          ((Number) metrics.get("participants")).doubleValue(), 0);
      assertNotNull("a DP round", metrics.get("dp_epsilon"));
    } finally {
      python.destroyForcibly();
    }
  }

  /** L2 norm of the update's change to the global state (float64). */
  static double norm(Safetensors global, Map<String, TensorData> update) {
    double squared = 0;
    for (Map.Entry<String, TensorData> e : update.entrySet()) {
      float[] g = global.tensors.get(e.getKey()).floats();
      float[] u = e.getValue().floats();
      for (int i = 0; i < u.length; i++) {
        squared += ((double) u[i] - g[i]) * ((double) u[i] - g[i]);
      }
    }
    return Math.sqrt(squared);
  }
}
