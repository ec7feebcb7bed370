package org.pflkit.core.personal;

import static org.junit.Assert.assertArrayEquals;
import static org.junit.Assert.assertEquals;
import static org.junit.Assert.assertTrue;
import static org.junit.Assert.fail;

import java.nio.charset.StandardCharsets;
import java.util.LinkedHashMap;
import java.util.Map;
import org.junit.Test;
import org.pflkit.core.Safetensors;
import org.pflkit.core.TensorData;
import org.pflkit.core.TrainingSection;
import org.pflkit.core.fl.RoundTrainer;
import org.pflkit.core.fl.Task;

public class ProgramRoundTrainerTest {
  static Task task() {
    String json = "{\"status\": \"train\", \"retry_after\": 1, \"run_id\": 1, \"round\": 2, "
        + "\"global_hash\": \"" + "0".repeat(64) + "\", \"config\": {}}";
    return Task.parse(json.getBytes(StandardCharsets.UTF_8));
  }

  static Safetensors global(Map<String, TensorData> tensors) throws Exception {
    return Safetensors.parse(Safetensors.write(tensors, null), "global");
  }

  /** A round's global state for the linear head program. */
  static Map<String, TensorData> startState() {
    Map<String, TensorData> start = new LinkedHashMap<>();
    float[] w = new float[12];
    w[0] = 0.25f;
    start.put("head.weight", TensorData.ofFloats(new long[] {3, 4}, w));
    start.put("head.bias", TensorData.ofFloats(new long[] {3}, new float[] {0, 0, 1}));
    return start;
  }

  @Test
  public void theProgramTrainsFromTheGlobalStateAndUploadsItsParameters() throws Exception {
    TrainingSection recipe = PersonalizationTest.parse(PersonalizationTest.section(null, null));
    LinearHeadSession session = new LinearHeadSession(recipe, 4, 3, new float[12]);
    long[] y = PersonalizationTest.labels(12);
    Map<String, TensorData> start = startState();
    RoundTrainer.Result r = new ProgramRoundTrainer(recipe, session, new long[] {4},
        PersonalizationTest.images(y, 2), y, 9).train(task(), global(start), null);
    assertEquals(12, r.numSamples);
    assertEquals("5 epochs of 3 batches", 15, session.steps);
    assertArrayEquals(session.weights().get("head.bias"), r.update.get("head.bias").floats(), 0f);
    assertTrue(r.metrics.containsKey("loss_head"));

    Map<String, Object> frozen = PersonalizationTest.section(null, null);
    @SuppressWarnings("unchecked")
    Map<String, Object> sgd = new LinkedHashMap<>((Map<String, Object>)
        ((java.util.List<?>) frozen.get("optimizers")).get(0));
    sgd.put("lr", 0.0);
    frozen.put("optimizers", java.util.List.of(sgd));
    TrainingSection still = PersonalizationTest.parse(frozen);
    RoundTrainer.Result same = new ProgramRoundTrainer(still, new LinearHeadSession(still, 4, 3,
        new float[12]), new long[] {4}, PersonalizationTest.images(y, 2), y, 9)
        .train(task(), global(start), null);
    assertEquals("with lr 0 the update is the global state it started from", start,
        same.update);
  }

  @Test
  public void aPersonalPartIsNeverUploadedAsAnotherMethodsUpdate() throws Exception {
    TrainingSection recipe = PersonalizationTest.parse(PersonalizationTest.section(null, null));
    Map<String, TensorData> fedavg = new LinkedHashMap<>();
    fedavg.put("body.1.weight", TensorData.ofFloats(new long[] {1}, new float[1]));
    fedavg.put("head.bias", TensorData.ofFloats(new long[] {3}, new float[3]));
    try {
      new ProgramRoundTrainer(recipe, new LinearHeadSession(recipe, 4, 3, new float[12]),
          new long[] {4}, new float[0], new long[0], 0).train(task(), global(fedavg), null);
      fail();
    } catch (IllegalStateException e) {
      assertTrue(e.getMessage(), e.getMessage().contains("trains [head.bias, head.weight]; the "
          + "run's update is [body.1.weight, head.bias]"));
    }
  }
}
