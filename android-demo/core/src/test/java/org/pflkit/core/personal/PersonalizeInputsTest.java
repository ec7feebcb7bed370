package org.pflkit.core.personal;

import static org.junit.Assert.assertArrayEquals;
import static org.junit.Assert.assertEquals;
import static org.junit.Assert.assertNotNull;
import static org.junit.Assert.assertNull;
import static org.junit.Assert.assertThrows;
import static org.junit.Assert.assertTrue;
import static org.junit.Assert.fail;

import java.io.File;
import java.nio.file.Files;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import org.junit.Rule;
import org.junit.Test;
import org.junit.rules.TemporaryFolder;
import org.pflkit.core.Safetensors;
import org.pflkit.core.TensorData;
import org.pflkit.core.TrainingSection;

/**
 * What the app hands the personalize flow is checked as pflkit's Python trainer checks it
 * ({@code check_rows}, {@code check_batch}): a lambda outside [0, 1], non-finite images,
 * labels outside the program's classes and no rows at all are refused in one line before any
 * step, so the personal weights never become what the runtime makes of them (NaN weights, a
 * read past the logits) and a data problem is not reported as a diverged training.
 */
public class PersonalizeInputsTest {
  @Rule public final TemporaryFolder tmp = new TemporaryFolder();

  private static final long[] SHAPE = {PersonalizationTest.FEATURES};

  private static TrainingSection lambdaRecipe() {
    Map<String, Object> lam = new LinkedHashMap<>();
    lam.put("size", 2.0);
    return PersonalizationTest.parse(PersonalizationTest.section(2, lam));
  }

  private static LinearHeadSession session(TrainingSection recipe) {
    return new LinearHeadSession(recipe, PersonalizationTest.FEATURES,
        PersonalizationTest.CLASSES, new float[12]);
  }

  /** Personalize on these rows must be refused naming {@code words}, with no step taken. */
  private static void refused(TrainingSection recipe, float[] x, long[] y, float lambda,
      String words) throws Exception {
    LinearHeadSession s = session(recipe);
    Map<String, float[]> start = s.weights();
    try {
      Personalizer.run(recipe, s, SHAPE, x, y, lambda, 7);
      fail("accepted: " + words);
    } catch (IllegalArgumentException e) {
      assertEquals(1, e.getMessage().split("\n").length);
      assertTrue(e.getMessage(), e.getMessage().contains(words));
    }
    assertEquals("no step on refused inputs", 0, s.steps);
    for (String name : recipe.parameterNames()) {
      assertArrayEquals(name, start.get(name), s.weights().get(name), 0f);
    }
  }

  @Test
  public void aLambdaOutsideTheUnitIntervalIsRefused() throws Exception {
    TrainingSection recipe = lambdaRecipe();
    long[] y = PersonalizationTest.labels(24);
    float[] x = PersonalizationTest.images(y, 1);
    for (float bad : new float[] {1.5f, -0.1f, Float.NaN, Float.POSITIVE_INFINITY}) {
      refused(recipe, x, y, bad, "outside [0, 1]");
    }
    long[] few = PersonalizationTest.labels(3);  // no held-out row: lambda is never evaluated
    refused(recipe, PersonalizationTest.images(few, 1), few, 2f, "outside [0, 1]");

    RecipeRunner runner = new RecipeRunner(recipe, session(recipe), SHAPE);
    RecipeRunner.Data data = runner.prepare(x, y);
    for (float bad : new float[] {2f, Float.NaN}) {
      try {
        runner.logits(data, new int[] {0, 1}, bad);
        fail("logits at lambda " + bad);
      } catch (IllegalArgumentException e) {
        assertTrue(e.getMessage(), e.getMessage().contains("lambda " + bad));
      }
      try {
        runner.batch(data, new int[] {0}, bad);
        fail("a batch at lambda " + bad);
      } catch (IllegalArgumentException e) {
        assertTrue(e.getMessage(), e.getMessage().contains("outside [0, 1]"));
      }
    }
    assertEquals("the ends are lambdas", 6, runner.logits(data, new int[] {0, 1}, 1f).length);

    TrainingSection plain = PersonalizationTest.parse(PersonalizationTest.section(null, null));
    LinearHeadSession s = session(plain);
    Personalizer.run(plain, s, SHAPE, x, y, Float.NaN, 7);  // no lambda input: ignored
    assertTrue(s.steps > 0);
  }

  @Test
  public void nonFiniteImagesAreRefusedBeforeTraining() throws Exception {
    TrainingSection recipe = PersonalizationTest.parse(PersonalizationTest.section(null, null));
    long[] y = PersonalizationTest.labels(24);
    for (float bad : new float[] {Float.NaN, Float.NEGATIVE_INFINITY}) {
      float[] x = PersonalizationTest.images(y, 1);
      x[5 * PersonalizationTest.FEATURES + 2] = bad;
      refused(recipe, x, y, 0f, "image value " + bad + " at row 5");
    }
  }

  @Test
  public void labelsOutsideTheProgramsClassesAreRefused() throws Exception {
    TrainingSection recipe = lambdaRecipe();
    assertEquals(PersonalizationTest.CLASSES, recipe.classes);
    for (long bad : new long[] {PersonalizationTest.CLASSES, -1, Long.MAX_VALUE}) {
      long[] y = PersonalizationTest.labels(24);
      float[] x = PersonalizationTest.images(y, 1);
      y[23] = bad;
      refused(recipe, x, y, 0.5f, "label " + bad + " at row 23 is not a class of this program "
          + "(0..2)");
    }
  }

  @Test
  public void noRowsAndRowsOfAnotherSizeAreRefused() throws Exception {
    TrainingSection recipe = PersonalizationTest.parse(PersonalizationTest.section(null, null));
    refused(recipe, new float[0], new long[0], 0f, "no labelled rows");
    long[] y = PersonalizationTest.labels(8);
    refused(recipe, new float[8 * PersonalizationTest.FEATURES - 1], y, 0f,
        "31 image values for 8 rows of 4");
    try {
      new RecipeRunner(recipe, session(recipe), new long[] {1, 2, 2});
      fail("images of another shape than the program's image input");
    } catch (IllegalArgumentException e) {
      assertTrue(e.getMessage(), e.getMessage().contains("takes [4] per row, the images are "
          + "[1, 2, 2]"));
    }
  }

  /** A program whose features come from {@code prepare} (FedRoD's shape), prepare giving x. */
  private static TrainingSection prepareRecipe() {
    Map<String, Object> section = PersonalizationTest.section(null, null);
    section.put("prepare_method", "prepare");
    section.put("inputs", List.of(
        Map.of("name", "features", "shape", List.of("batch", 4.0), "dtype", "float32", "from",
            "prepare"),
        Map.of("name", "label", "shape", List.of("batch"), "dtype", "int64", "from", "label")));
    return PersonalizationTest.parse(section);
  }

  /** The linear head behind a prepare method that returns {@code out} of its images. */
  private static TrainingSession withPrepare(TrainingSection recipe,
      java.util.function.UnaryOperator<float[]> out) {
    LinearHeadSession head = session(recipe);
    return new TrainingSession() {
      @Override
      public List<float[]> prepare(float[] images, int rows) {
        return List.of(out.apply(images));
      }

      @Override
      public void newOptimizers() {
        head.newOptimizers();
      }

      @Override
      public float step(String optimizer, List<ProgramInput> inputs) {
        return head.step(optimizer, inputs);
      }

      @Override
      public float[] logits(List<ProgramInput> inputs) {
        return head.logits(inputs);
      }

      @Override
      public Map<String, float[]> weights() {
        return head.weights();
      }

      @Override
      public void loadWeights(Map<String, float[]> weights) {
        head.loadWeights(weights);
      }
    };
  }

  @Test
  public void preparedInputsAreCheckedAndNoRowsIsOneLineForAPrepareProgram() throws Exception {
    TrainingSection recipe = prepareRecipe();
    long[] y = PersonalizationTest.labels(8);
    float[] x = PersonalizationTest.images(y, 1);
    Personalizer.Report ok = Personalizer.run(recipe, withPrepare(recipe, images -> images),
        SHAPE, x, y, 0f, 3);
    assertTrue(ok.steps > 0);
    // before: IndexOutOfBoundsException (no prepare output for no rows)
    says(assertThrows(IllegalArgumentException.class, () -> Personalizer.run(recipe,
        withPrepare(recipe, images -> images), SHAPE, new float[0], new long[0], 0f, 3)),
        "no labelled rows");
    TrainingSession overflowing = withPrepare(recipe, images -> {
      float[] features = images.clone();
      features[6] = Float.POSITIVE_INFINITY;
      return features;
    });
    says(assertThrows(IllegalStateException.class, () -> Personalizer.run(recipe, overflowing,
        SHAPE, x, y, 0f, 3)), "prepare gave Infinity for input features at row 1");
    TrainingSession halved = withPrepare(recipe, images -> new float[images.length / 2]);
    says(assertThrows(IllegalStateException.class, () -> Personalizer.run(recipe, halved, SHAPE,
        x, y, 0f, 3)), "prepare gave 16 values for input features, which takes [4] per row");
  }

  private static void says(Throwable e, String words) {
    assertTrue(e.getMessage(), e.getMessage().contains(words));
  }

  @Test
  public void logitsOfAnotherClassCountAreRefusedNotMisread() throws Exception {
    TrainingSection recipe = PersonalizationTest.parse(PersonalizationTest.section(null, null));
    LinearHeadSession twoClasses = new LinearHeadSession(recipe, PersonalizationTest.FEATURES,
        2, new float[8]);  // a program of 2 classes behind a card that declares 3
    RecipeRunner runner = new RecipeRunner(recipe, twoClasses, SHAPE);
    long[] y = PersonalizationTest.labels(6);
    RecipeRunner.Data data = runner.prepare(PersonalizationTest.images(y, 1), y);
    says(assertThrows("scored 2-class logits as 3-class ones", IllegalStateException.class,
        () -> runner.accuracy(data, new int[] {0, 1, 2, 3, 4, 5}, 0f)),
        "gave 12 logits for 6 rows; its card declares 3 classes");
  }

  @Test
  public void aRoundWithoutUsableRowsIsRefusedAndTheProgramKeepsItsWeights() throws Exception {
    TrainingSection recipe = PersonalizationTest.parse(PersonalizationTest.section(null, null));
    long[] y = PersonalizationTest.labels(12);
    float[] nan = PersonalizationTest.images(y, 2);
    nan[0] = Float.NaN;
    float[][] images = {new float[0], nan};
    long[][] labels = {new long[0], y};
    for (int i = 0; i < images.length; i++) {
      LinearHeadSession s = session(recipe);
      try {  // before: an update of 0 samples, or NaN weights reported as a diverged round
        new ProgramRoundTrainer(recipe, s, SHAPE, images[i], labels[i], 9).train(
            ProgramRoundTrainerTest.task(),
            ProgramRoundTrainerTest.global(ProgramRoundTrainerTest.startState()), null);
        fail("trained a round on unusable rows");
      } catch (IllegalArgumentException e) {
        assertTrue(e.getMessage(), e.getMessage().contains(i == 0 ? "no labelled rows"
            : "image value NaN at row 0"));
      }
      assertEquals(0, s.steps);
      assertArrayEquals("the global state was not loaded", new float[3],
          s.weights().get("head.bias"), 0f);
    }
  }

  @Test
  public void storedSamplesMustBeFinite() throws Exception {
    File dir = tmp.getRoot();
    LabeledSamples samples = LabeledSamples.open(dir, SHAPE, PersonalizationTest.CLASSES);
    try {
      samples.add(new float[] {0, Float.NaN, 0, 0}, 1);
      fail("stored a NaN input");
    } catch (IllegalArgumentException e) {
      assertTrue(e.getMessage(), e.getMessage().contains("NaN"));
    }
    assertEquals(0, samples.size());
    assertNull(samples.problem());

    Map<String, TensorData> rows = new LinkedHashMap<>();
    rows.put("x", TensorData.ofFloats(new long[] {1, 4},
        new float[] {0, Float.POSITIVE_INFINITY, 0, 0}));
    rows.put("y", TensorData.ofLongs(new long[] {1}, new long[] {1}));
    Files.write(new File(dir, LabeledSamples.FILE).toPath(), Safetensors.write(rows, null));
    LabeledSamples pushed = LabeledSamples.open(dir, SHAPE, PersonalizationTest.CLASSES);
    assertNotNull("a file with an infinite input is not used", pushed.problem());
    assertTrue(pushed.problem(), pushed.problem().contains("Infinity"));
    assertEquals(0, pushed.size());
    List<String> kept = List.of(dir.list());
    assertTrue("the file is kept until cleared", kept.contains(LabeledSamples.FILE));
  }

  @Test
  public void storedSamplesAreExactlyXAndYAsPflClientReadsThem() throws Exception {
    File dir = tmp.getRoot();
    Map<String, TensorData> extra = new LinkedHashMap<>();  // the next add would drop "w"
    extra.put("x", TensorData.ofFloats(new long[] {1, 4}, new float[4]));
    extra.put("y", TensorData.ofLongs(new long[] {1}, new long[] {1}));
    extra.put("w", TensorData.ofFloats(new long[] {1}, new float[] {2}));
    Map<String, TensorData> grid = new LinkedHashMap<>();  // labels of 2 dimensions
    grid.put("x", TensorData.ofFloats(new long[] {2, 4}, new float[8]));
    grid.put("y", TensorData.ofLongs(new long[] {1, 2}, new long[] {0, 1}));
    for (Map<String, TensorData> rows : List.of(extra, grid)) {
      byte[] bytes = Safetensors.write(rows, null);
      File file = new File(dir, LabeledSamples.FILE);
      Files.write(file.toPath(), bytes);
      LabeledSamples samples = LabeledSamples.open(dir, SHAPE, PersonalizationTest.CLASSES);
      assertNotNull(rows.keySet() + " used", samples.problem());
      assertTrue(samples.problem(), samples.problem().contains("expected exactly x float32"));
      try {
        samples.add(new float[4], 0);
        fail("added to a file it cannot use");
      } catch (java.io.IOException e) {
        assertArrayEquals("the file is kept as it was", bytes, Files.readAllBytes(file.toPath()));
      }
    }
  }
}
