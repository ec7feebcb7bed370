package org.pflkit.core.personal;

import static org.junit.Assert.assertArrayEquals;
import static org.junit.Assert.assertEquals;
import static org.junit.Assert.assertFalse;
import static org.junit.Assert.assertNull;
import static org.junit.Assert.assertTrue;
import static org.junit.Assert.fail;

import java.io.File;
import java.io.IOException;
import java.nio.file.Files;
import java.util.LinkedHashMap;
import java.util.Map;
import org.junit.Rule;
import org.junit.Test;
import org.junit.rules.TemporaryFolder;
import org.pflkit.core.Safetensors;
import org.pflkit.core.TensorData;
import org.pflkit.core.TrainingSection;

/**
 * What the personalize screen finds in app storage can never make it fail on every start: samples
 * and personal weights it cannot use are reported and kept until the user clears or resets them,
 * and a reset never deletes saved weights before the export's initial ones are loaded.
 */
public class PersonalStorageTest {
  @Rule public final TemporaryFolder tmp = new TemporaryFolder();

  static final int FEATURES = PersonalizationTest.FEATURES;
  static final int CLASSES = PersonalizationTest.CLASSES;
  static final long[] SHAPE = {FEATURES};

  final TrainingSection recipe = PersonalizationTest.parse(PersonalizationTest.section(null, null));

  File dir() throws IOException {
    return tmp.newFolder("personal");
  }

  /** An export folder with personal_init.safetensors: weight all 0.5, bias 1, 2, 3. */
  File export() throws IOException {
    File export = tmp.newFolder("export");
    Files.write(new File(export, recipe.initialWeights).toPath(),
        Safetensors.write(weights(0.5f, new float[] {1, 2, 3}), null));
    return export;
  }

  static Map<String, TensorData> weights(float w, float[] bias) {
    float[] weight = new float[CLASSES * FEATURES];
    java.util.Arrays.fill(weight, w);
    Map<String, TensorData> t = new LinkedHashMap<>();
    t.put("head.weight", TensorData.ofFloats(new long[] {CLASSES, FEATURES}, weight));
    t.put("head.bias", TensorData.ofFloats(new long[] {CLASSES}, bias));
    return t;
  }

  static Map<String, float[]> floats(float w, float[] bias) {
    Map<String, float[]> out = new LinkedHashMap<>();
    weights(w, bias).forEach((k, v) -> out.put(k, v.floats()));
    return out;
  }

  LinearHeadSession session() {
    return new LinearHeadSession(recipe, FEATURES, CLASSES, new float[CLASSES * FEATURES]);
  }

  @Test
  public void samplesOfAnotherModelOpenAsAProblemThatClearReplaces() throws Exception {
    File dir = dir();
    LabeledSamples other = LabeledSamples.open(dir, new long[] {FEATURES + 1}, CLASSES);
    other.add(new float[FEATURES + 1], 0);
    LabeledSamples samples = LabeledSamples.open(dir, SHAPE, CLASSES);
    assertTrue(samples.problem(), samples.problem().contains("samples of another model?"));
    assertEquals(0, samples.size());
    assertArrayEquals(new int[CLASSES], samples.counts());
    try {
      samples.add(new float[FEATURES], 1);
      fail("the unusable file is not overwritten by a new sample");
    } catch (IOException e) {
      assertTrue(e.getMessage(), e.getMessage().endsWith("clear the samples to start again"));
    }
    assertEquals(1, LabeledSamples.open(dir, new long[] {FEATURES + 1}, CLASSES).size());
    samples.clear();
    assertNull(samples.problem());
    samples.add(new float[FEATURES], 1);
    assertArrayEquals(new long[] {1}, LabeledSamples.open(dir, SHAPE, CLASSES).labels());
  }

  @Test
  public void samplesWithAClassOutsideTheCardsOpenAsAProblem() throws Exception {
    File dir = dir();
    LabeledSamples.open(dir, SHAPE, CLASSES + 2).add(new float[FEATURES], CLASSES + 1);
    LabeledSamples samples = LabeledSamples.open(dir, SHAPE, CLASSES);
    assertTrue(samples.problem(), samples.problem().contains("class 4 outside 0..2"));
    assertArrayEquals(new int[CLASSES], samples.counts());
    Files.write(new File(dir, LabeledSamples.FILE).toPath(), new byte[] {1, 2, 3});
    assertTrue(LabeledSamples.open(dir, SHAPE, CLASSES).problem().contains("safetensors"));
  }

  @Test
  public void savedWeightsThatCannotBeUsedFallBackToTheExportsAndAreKept() throws Exception {
    File dir = dir();
    File export = export();
    PersonalWeights.save(dir, recipe, "abc", floats(Float.NaN, new float[] {7, 8, 9}), 0.3f);
    LinearHeadSession s = session();
    PersonalWeights.Restored restored = PersonalWeights.restore(recipe, dir, "abc", export, s);
    assertTrue(restored.problem, restored.problem.contains("parameter head.weight holds NaN"));
    assertNull(restored.lambda);
    assertArrayEquals(new float[] {1, 2, 3}, s.params.get("head.bias"), 0f);
    assertTrue("kept for the user to reset", new File(dir, PersonalWeights.FILE).exists());

    PersonalWeights.save(dir, recipe, "abc", floats(0.25f, new float[] {7, 8, 9}), 0.3f);
    restored = PersonalWeights.restore(recipe, dir, "abc", export, s);
    assertNull(restored.problem);
    assertEquals(0.3f, restored.lambda, 0f);
    assertArrayEquals(new float[] {7, 8, 9}, s.params.get("head.bias"), 0f);

    Files.write(new File(dir, PersonalWeights.FILE).toPath(), new byte[] {1, 2, 3});
    restored = PersonalWeights.restore(recipe, dir, "abc", export, s);
    assertTrue(restored.problem, restored.problem.contains(PersonalWeights.FILE));
    assertArrayEquals(new float[] {1, 2, 3}, s.params.get("head.bias"), 0f);
  }

  @Test
  public void aSavedLambdaOutsideZeroToOneIsNotLoaded() throws Exception {
    File dir = dir();
    PersonalWeights.save(dir, recipe, "abc", floats(0.25f, new float[] {7, 8, 9}), 1.5f);
    LinearHeadSession s = session();
    PersonalWeights.Restored restored = PersonalWeights.restore(recipe, dir, "abc", export(), s);
    assertTrue(restored.problem, restored.problem.contains("lam 1.5 is not a number in [0, 1]"));
    assertArrayEquals(new float[] {1, 2, 3}, s.params.get("head.bias"), 0f);
  }

  @Test
  public void resetKeepsTheSavedWeightsWhenTheExportsCannotBeLoaded() throws Exception {
    File dir = dir();
    File saved = new File(dir, PersonalWeights.FILE);
    PersonalWeights.save(dir, recipe, "abc", floats(0.25f, new float[] {7, 8, 9}), null);
    File noInit = tmp.newFolder("export-without-init");
    try {
      PersonalWeights.reset(recipe, dir, noInit, session());
      fail();
    } catch (IOException e) {
      assertEquals("no personal_init.safetensors beside the model card", e.getMessage());
    }
    assertTrue("not deleted before the initial weights loaded", saved.exists());
    try {
      PersonalWeights.restore(recipe, dir, "another program", noInit, session());
      fail("nothing to load is the one error restore throws");
    } catch (IOException e) {
      assertTrue(e.getMessage().startsWith("no personal_init"));
    }
    LinearHeadSession s = session();
    PersonalWeights.reset(recipe, dir, export(), s);
    assertFalse(saved.exists());
    assertArrayEquals(new float[] {1, 2, 3}, s.params.get("head.bias"), 0f);
  }
}
