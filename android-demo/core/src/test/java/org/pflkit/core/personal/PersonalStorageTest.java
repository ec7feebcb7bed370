package org.pflkit.core.personal;

import static org.junit.Assert.assertArrayEquals;
import static org.junit.Assert.assertEquals;
import static org.junit.Assert.assertFalse;
import static org.junit.Assert.assertNull;
import static org.junit.Assert.assertTrue;
import static org.junit.Assert.fail;

import java.io.ByteArrayInputStream;
import java.io.File;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import org.junit.Rule;
import org.junit.Test;
import org.junit.rules.TemporaryFolder;
import org.pflkit.core.Json;
import org.pflkit.core.JsonWriter;
import org.pflkit.core.ModelCard;
import org.pflkit.core.Safetensors;
import org.pflkit.core.Sha256;
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

  /** The card's artifacts entry for {@link #export}'s initial weights. */
  ModelCard.Artifact listed;

  /** An export folder with personal_init.safetensors: weight all 0.5, bias 1, 2, 3. */
  File export() throws Exception {
    File export = tmp.newFolder("export");
    byte[] bytes = Safetensors.write(weights(0.5f, new float[] {1, 2, 3}), null);
    Files.write(new File(export, recipe.initialWeights).toPath(), bytes);
    listed = listing(recipe.initialWeights, bytes);
    return export;
  }

  /** The artifacts entry a card written with {@code bytes} as {@code file} holds. */
  @SuppressWarnings("unchecked")
  static ModelCard.Artifact listing(String file, byte[] bytes) throws Exception {
    Map<String, Object> card = (Map<String, Object>) Json.parse(new String(Files.readAllBytes(
        new File(TrainerCardTest.dir("superfed_mm"), "model_card.json").toPath()),
        StandardCharsets.UTF_8));
    Map<String, Object> entry = new LinkedHashMap<>();
    entry.put("file", file);
    entry.put("format", "safetensors");
    entry.put("sha256", Sha256.of(new ByteArrayInputStream(bytes)).hex);
    entry.put("bytes", (double) bytes.length);
    Map<String, Object> edited = new LinkedHashMap<>(card);
    edited.put("artifacts", List.of(entry));
    return ModelCard.parse(JsonWriter.write(edited)).artifacts.get(0);
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
    PersonalWeights.Restored restored = PersonalWeights.restore(recipe, dir, "abc", export,
        listed, s);
    assertTrue(restored.problem, restored.problem.contains("parameter head.weight holds NaN"));
    assertNull(restored.lambda);
    assertArrayEquals(new float[] {1, 2, 3}, s.params.get("head.bias"), 0f);
    assertTrue("kept for the user to reset", new File(dir, PersonalWeights.FILE).exists());

    PersonalWeights.save(dir, recipe, "abc", floats(0.25f, new float[] {7, 8, 9}), 0.3f);
    restored = PersonalWeights.restore(recipe, dir, "abc", export, listed, s);
    assertNull(restored.problem);
    assertEquals(0.3f, restored.lambda, 0f);
    assertArrayEquals(new float[] {7, 8, 9}, s.params.get("head.bias"), 0f);

    Files.write(new File(dir, PersonalWeights.FILE).toPath(), new byte[] {1, 2, 3});
    restored = PersonalWeights.restore(recipe, dir, "abc", export, listed, s);
    assertTrue(restored.problem, restored.problem.contains(PersonalWeights.FILE));
    assertArrayEquals(new float[] {1, 2, 3}, s.params.get("head.bias"), 0f);
  }

  @Test
  public void initialWeightsOtherThanTheCardListsAreNotLoaded() throws Exception {
    File dir = dir();
    File export = export();
    File init = new File(export, recipe.initialWeights);
    byte[] listedBytes = Files.readAllBytes(init.toPath());
    // another export's weights of the same shapes and size (a folder pushed in part)
    byte[] other = Safetensors.write(weights(0.75f, new float[] {4, 5, 6}), null);
    assertEquals(listedBytes.length, other.length);
    byte[] longer = Safetensors.write(weights(0.5f, new float[] {1, 2, 3}),
        Map.of("note", "edited"));
    for (byte[] bytes : List.of(other, longer)) {
      Files.write(init.toPath(), bytes);
      LinearHeadSession s = session();
      Map<String, float[]> start = s.weights();
      try {
        PersonalWeights.reset(recipe, dir, export, listed, s);
        fail("loaded initial weights the card does not list");
      } catch (IOException e) {
        assertTrue(e.getMessage(), e.getMessage().startsWith(recipe.initialWeights
            + " does not match its model card"));
      }
      try {
        PersonalWeights.restore(recipe, dir, "abc", export, listed, s);
        fail("restored initial weights the card does not list");
      } catch (IOException e) {
        assertTrue(e.getMessage(), e.getMessage().contains("Copy the card and the artifacts"));
      }
      assertArrayEquals(start.get("head.bias"), s.weights().get("head.bias"), 0f);
    }
    try {
      PersonalWeights.initial(recipe, export, null);
      fail("read initial weights the card does not list");
    } catch (IOException e) {
      assertEquals(recipe.initialWeights + " is not listed in the model card's artifacts",
          e.getMessage());
    }
  }

  @Test
  public void aSavedLambdaOutsideZeroToOneIsNotLoaded() throws Exception {
    File dir = dir();
    PersonalWeights.save(dir, recipe, "abc", floats(0.25f, new float[] {7, 8, 9}), 1.5f);
    File export = export();
    LinearHeadSession s = session();
    PersonalWeights.Restored restored = PersonalWeights.restore(recipe, dir, "abc", export,
        listed, s);
    assertTrue(restored.problem, restored.problem.contains("lam 1.5 is not a number in [0, 1]"));
    assertArrayEquals(new float[] {1, 2, 3}, s.params.get("head.bias"), 0f);
  }

  @Test
  public void resetKeepsTheSavedWeightsWhenTheExportsCannotBeLoaded() throws Exception {
    File dir = dir();
    File saved = new File(dir, PersonalWeights.FILE);
    PersonalWeights.save(dir, recipe, "abc", floats(0.25f, new float[] {7, 8, 9}), null);
    File export = export();
    File noInit = tmp.newFolder("export-without-init");
    try {
      PersonalWeights.reset(recipe, dir, noInit, listed, session());
      fail();
    } catch (IOException e) {
      assertEquals("no personal_init.safetensors beside the model card", e.getMessage());
    }
    assertTrue("not deleted before the initial weights loaded", saved.exists());
    try {
      PersonalWeights.restore(recipe, dir, "another program", noInit, listed, session());
      fail("nothing to load is the one error restore throws");
    } catch (IOException e) {
      assertTrue(e.getMessage().startsWith("no personal_init"));
    }
    LinearHeadSession s = session();
    PersonalWeights.reset(recipe, dir, export, listed, s);
    assertFalse(saved.exists());
    assertArrayEquals(new float[] {1, 2, 3}, s.params.get("head.bias"), 0f);
  }
}
