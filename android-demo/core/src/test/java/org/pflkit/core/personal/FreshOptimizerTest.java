package org.pflkit.core.personal;

import static org.junit.Assert.assertArrayEquals;
import static org.junit.Assert.assertEquals;

import java.util.Map;
import org.junit.Test;
import org.pflkit.core.TrainingSection;
import org.pflkit.core.fl.RoundTrainer;

/**
 * Every walk of the recipe starts with fresh optimizer state, as pflkit's Python stage does (a
 * new {@code torch.optim.SGD} per stage, a new one per federated round): the app keeps one
 * loaded program, and momentum carried over from the last Personalize or round would change
 * the next one's first steps. The test program's SGD keeps its momentum buffers between calls,
 * as ExecuTorch's does.
 */
public class FreshOptimizerTest {
  static final long[] SHAPE = {PersonalizationTest.FEATURES};

  @Test
  public void personalizingAgainFromTheSameWeightsGivesTheSameWeights() throws Exception {
    TrainingSection recipe = PersonalizationTest.parse(PersonalizationTest.section(null, null));
    assertEquals("the recipe has momentum", 0.5, recipe.optimizers.get(0).momentum, 0);
    long[] y = PersonalizationTest.labels(24);
    float[] x = PersonalizationTest.images(y, 1);
    LinearHeadSession session = new LinearHeadSession(recipe, PersonalizationTest.FEATURES,
        PersonalizationTest.CLASSES, new float[12]);
    Map<String, float[]> start = session.weights();
    Personalizer.Report first = Personalizer.run(recipe, session, SHAPE, x, y, 0f, 7);
    session.loadWeights(start);  // the screen's Reset
    Personalizer.Report again = Personalizer.run(recipe, session, SHAPE, x, y, 0f, 7);
    for (String name : recipe.parameterNames()) {
      assertArrayEquals(name, first.weights.get(name), again.weights.get(name), 0f);
    }
  }

  @Test
  public void aRoundAfterPersonalizingTrainsAsOnAFreshProgram() throws Exception {
    TrainingSection recipe = PersonalizationTest.parse(PersonalizationTest.section(null, null));
    long[] y = PersonalizationTest.labels(12);
    float[] x = PersonalizationTest.images(y, 2);
    LinearHeadSession fresh = new LinearHeadSession(recipe, 4, 3, new float[12]);
    RoundTrainer.Result want = new ProgramRoundTrainer(recipe, fresh, SHAPE, x, y, 9)
        .train(ProgramRoundTrainerTest.task(), ProgramRoundTrainerTest.global(
            ProgramRoundTrainerTest.startState()), null);

    LinearHeadSession used = new LinearHeadSession(recipe, 4, 3, new float[12]);
    Personalizer.run(recipe, used, SHAPE, x, y, 0f, 3);
    RoundTrainer.Result got = new ProgramRoundTrainer(recipe, used, SHAPE, x, y, 9)
        .train(ProgramRoundTrainerTest.task(), ProgramRoundTrainerTest.global(
            ProgramRoundTrainerTest.startState()), null);
    for (String name : recipe.parameterNames()) {
      assertArrayEquals(name, want.update.get(name).floats(), got.update.get(name).floats(), 0f);
    }
  }
}
