package org.pflkit.core.personal;

import static org.junit.Assert.assertArrayEquals;
import static org.junit.Assert.assertEquals;
import static org.junit.Assert.assertTrue;
import static org.junit.Assert.fail;

import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import org.junit.Test;
import org.pflkit.core.TrainingSection;

/**
 * A Personalize whose training diverges (weights overflow to Inf/NaN) is refused in one line,
 * and the program keeps the weights it started from: the screen saves a report's weights over
 * the user's personal ones, so non-finite ones must never become a report.
 */
public class DivergedPersonalizationTest {
  @Test
  public void divergedTrainingIsRefusedAndTheStartingWeightsAreKept() throws Exception {
    Map<String, Object> section = PersonalizationTest.section(null, null);
    @SuppressWarnings("unchecked")
    Map<String, Object> sgd = new LinkedHashMap<>((Map<String, Object>)
        ((List<?>) section.get("optimizers")).get(0));
    sgd.put("lr", 1e38);  // a valid card value whose steps overflow float32
    section.put("optimizers", List.of(sgd));
    TrainingSection recipe = PersonalizationTest.parse(section);
    long[] y = PersonalizationTest.labels(24);
    LinearHeadSession session = new LinearHeadSession(recipe, PersonalizationTest.FEATURES,
        PersonalizationTest.CLASSES, new float[12]);
    Map<String, float[]> start = new LinkedHashMap<>();
    start.put("head.weight", new float[12]);
    start.put("head.bias", new float[] {0.5f, -0.25f, 0f});
    session.loadWeights(start);
    try {
      Personalizer.run(recipe, session, new long[] {PersonalizationTest.FEATURES},
          PersonalizationTest.images(y, 1), y, 0f, 7);
      fail("diverged weights were returned");
    } catch (IllegalStateException e) {
      assertEquals(1, e.getMessage().split("\n").length);
      assertTrue(e.getMessage(), e.getMessage().contains("not finite"));
    }
    assertTrue("it did train", session.steps > 0);
    for (String name : recipe.parameterNames()) {
      assertArrayEquals(name, start.get(name), session.weights().get(name), 0f);
    }
  }
}
