package org.pflkit.core.personal;

import static org.junit.Assert.assertEquals;
import static org.junit.Assert.assertTrue;
import static org.junit.Assert.fail;

import java.util.List;
import java.util.Map;
import org.junit.Test;
import org.pflkit.core.InvalidModelCardException;

/**
 * A card whose batch size is over the program's {@code max_batch} is refused when it is read,
 * naming the field, instead of failing inside the runtime at the first (or, with several
 * phases, a later) step of a personalization that has already changed weights.
 */
public class TrainingSectionBoundsTest {
  static Map<String, Object> withBatch(double batchSize) {
    Map<String, Object> s = PersonalizationTest.section(null, null);
    s.put("schedule", Map.of("epochs", 1.0, "batch_size", batchSize,
        "phases", List.of(Map.of("optimizer", "head", "rows", "train"))));
    return s;
  }

  @Test
  public void aBatchOverMaxBatchIsRefused() {
    assertEquals(64, PersonalizationTest.parse(withBatch(64)).batchSize);
    try {
      PersonalizationTest.parse(withBatch(65));
      fail("a batch of 65 rows for a program of at most 64");
    } catch (InvalidModelCardException e) {
      assertTrue(e.getMessage(), e.getMessage().contains(
          "training.schedule.batch_size: must be at most max_batch (64), found 65"));
    }
  }
}
