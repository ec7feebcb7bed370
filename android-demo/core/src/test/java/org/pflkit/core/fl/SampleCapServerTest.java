package org.pflkit.core.fl;

import static org.junit.Assert.assertEquals;
import static org.junit.Assert.assertFalse;
import static org.junit.Assert.assertNotNull;
import static org.junit.Assert.assertNull;
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

/**
 * A Java device with more examples than the server's {@code max_num_samples} takes part,
 * weighing the limit (the Python SDK's rule). Before, the task did not carry the limit: the
 * upload got 422, was kept as the pending round and re-sent (422 again) at every step until
 * the round closed. Real {@code pfl-server} on loopback, started with a limit below the golden
 * client's count; the round is resumed after the app was killed before its upload, from the
 * kept round, whose stored count is over the limit.
 */
public class SampleCapServerTest {
  private static final long LIMIT = 7;
  @ClassRule public static final PflServer SERVER = new PflServer("--min-enrolled", "1",
      "--max-num-samples", String.valueOf(LIMIT));

  @Test
  public void aDeviceOverTheLimitReportsTheLimitAlsoForTheRoundItKeptAcrossARestart()
      throws Exception {
    String golden = new String(Files.readAllBytes(
        new File(SERVER.goldens, "run.toml").toPath()), StandardCharsets.UTF_8);
    String run = golden.replace("rounds = 2\neval_interval = 2", "rounds = 1\neval_interval = 1")
        .replace("clients_per_round = 3", "clients_per_round = 1");
    assertTrue("java_client_goldens.py's run changed: update this test",
        run.contains("rounds = 1\n") && run.contains("clients_per_round = 1\n"));
    SERVER.replaceRun(run);

    HttpTransport real = FlServerTest.real();
    List<String> puts = new ArrayList<>();
    HttpTransport killedAtFirstUpload = (method, url, headers, body) -> {
      if (method.equals("PUT")) {
        puts.add(url);
        if (puts.size() == 1) {
          throw new FlServerTest.Killed();  // the app dies with the round persisted, unsent
        }
      }
      return real.send(method, url, headers, body);
    };
    File dir = new File(SERVER.root, "device");
    FederatedClient first = device(dir, killedAtFirstUpload);
    first.enroll(SERVER.token(0));
    Task task = FlServerTest.awaitTrain(first);
    assertEquals("the task states the limit", Long.valueOf(LIMIT), task.maxNumSamples);
    RoundTrainer.Result trained = SERVER.goldenResult(0, first.globalState(task.globalHash));
    assertTrue(trained.numSamples + " examples", trained.numSamples > LIMIT);
    int[] calls = {0};
    RoundTrainer trainer = (t, global, state) -> {
      calls[0]++;
      return trained;
    };
    try {
      first.step(trainer);
      fail("the transport kills the app at the upload");
    } catch (FlServerTest.Killed expected) {
      // the round is persisted with the examples it trained on
    }
    assertEquals(trained.numSamples,
        PendingRound.fromBytes(Files.readAllBytes(new File(dir, PendingRound.FILE).toPath()),
            PendingRound.FILE).numSamples);

    FederatedClient restarted = device(dir, killedAtFirstUpload);
    StepResult result = restarted.step(trainer);  // before: 422 at this and every later step
    assertEquals(StepResult.TRAINED, result.status);
    assertEquals("the kept round was sent, not trained again", 1, calls[0]);
    assertEquals(2, puts.size());
    assertTrue(puts.get(1), puts.get(1).endsWith("num_samples=" + LIMIT));
    assertFalse(new File(dir, PendingRound.FILE).exists());
    assertNotNull("the round's state was committed", restarted.clientState(task.runId));
    assertEquals("the round counted the limit", (double) LIMIT,
        ((Number) closedRound().get("samples")).doubleValue(), 0);
  }

  @Test
  public void aTaskWithALimitOutOfRangeIsRefusedInOneLine() {
    for (String limit : new String[] {"0", "-1", "true", "1.5", "\"10\"", "1000000001", "[10]",
        "1e3"}) {
      try {
        Task.parse(task(limit));
        fail("max_num_samples " + limit + " was taken");
      } catch (IllegalArgumentException expected) {
        assertEquals("task: max_num_samples must be an integer in [1, 1000000000]",
            expected.getMessage());
      }
    }
    assertEquals(Long.valueOf(1_000_000_000L), Task.parse(task("1000000000")).maxNumSamples);
    assertNull("an older server's task", Task.parse(task("null")).maxNumSamples);
  }

  private static FederatedClient device(File dir, HttpTransport http) throws Exception {
    return new FederatedClient(SERVER.url(), dir, http, new RetryPolicy(50, 500, 60_000),
        FederatedClient.THREAD_SLEEP);
  }

  private static byte[] task(String limit) {
    return ("{\"status\": \"wait\", \"retry_after\": 1, \"max_num_samples\": " + limit + "}")
        .getBytes(StandardCharsets.UTF_8);
  }

  /** The metrics of the run's first closed round (polled until it closes). */
  @SuppressWarnings("unchecked")
  private static Map<String, Object> closedRound() throws Exception {
    long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(PflServer.GUARD_SECONDS);
    while (System.nanoTime() < deadline) {
      List<?> history = (List<?>) SERVER.status().get("history");
      if (!history.isEmpty()) {
        return (Map<String, Object>) ((Map<String, Object>) history.get(0)).get("metrics");
      }
      Thread.sleep(100); // poll
    }
    throw new AssertionError("the round never closed");
  }
}
