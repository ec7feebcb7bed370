package org.pflkit.core.personal;

import static org.junit.Assert.assertArrayEquals;
import static org.junit.Assert.assertEquals;
import static org.junit.Assert.assertNull;
import static org.junit.Assert.assertTrue;
import static org.junit.Assert.fail;

import java.io.File;
import java.util.HashSet;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Random;
import java.util.Set;
import org.junit.Rule;
import org.junit.Test;
import org.junit.rules.TemporaryFolder;
import org.pflkit.core.InvalidModelCardException;
import org.pflkit.core.JsonWriter;
import org.pflkit.core.TrainingSection;
import org.pflkit.core.fl.ClientState;

public class PersonalizationTest {
  @Rule public final TemporaryFolder tmp = new TemporaryFolder();

  static final int FEATURES = 4;
  static final int CLASSES = 3;

  /** A training section like pfl-export writes, for the linear head program. */
  static Map<String, Object> section(Integer lambdaSize, Map<String, Object> lambda) {
    Map<String, Object> s = new LinkedHashMap<>();
    s.put("schema_version", "pflkit.training/1");
    s.put("program", "personal_train.pte");
    s.put("initial_weights", "personal_init.safetensors");
    s.put("train_method", "train");
    s.put("prepare_method", null);
    s.put("image_shape", List.of((double) FEATURES));
    s.put("inputs", LinearHeadSession.inputSpecs(FEATURES, lambdaSize));
    s.put("outputs", List.of(
        Map.of("name", "loss", "shape", List.of(), "dtype", "float32"),
        Map.of("name", "logits", "shape", List.of("batch", (double) CLASSES), "dtype",
            "float32")));
    s.put("parameters", List.of(
        Map.of("name", "head.weight", "shape", List.of(3.0, 4.0), "dtype", "float32"),
        Map.of("name", "head.bias", "shape", List.of(3.0), "dtype", "float32")));
    s.put("max_batch", 64.0);
    s.put("loss", "cross-entropy of the personalized head");
    Map<String, Object> sgd = new LinkedHashMap<>();
    sgd.put("name", "head");
    sgd.put("parameters", List.of("head.weight", "head.bias"));
    sgd.put("lr", 0.5);
    sgd.put("momentum", 0.5);
    sgd.put("weight_decay", 0.0);
    sgd.put("dampening", 0.0);
    sgd.put("nesterov", false);
    sgd.put("kind", "sgd");
    s.put("optimizers", List.of(sgd));
    s.put("schedule", Map.of("epochs", 5.0, "batch_size", 4.0,
        "phases", List.of(Map.of("optimizer", "head", "rows", "train"))));
    s.put("splits", lambda == null ? List.of()
        : List.of(Map.of("name", "held_out", "fraction", 0.25, "if_empty", "all")));
    s.put("lambda", lambda);
    s.put("choose_lambda_on", lambda == null ? null : "held_out");
    return s;
  }

  static TrainingSection parse(Map<String, Object> section) {
    return TrainingSection.parse(JsonWriter.write(section));
  }

  /** Separable rows: class prototypes plus seeded noise. */
  static float[] images(long[] labels, long seed) {
    Random rng = new Random(seed);
    float[] x = new float[labels.length * FEATURES];
    for (int r = 0; r < labels.length; r++) {
      for (int f = 0; f < FEATURES; f++) {
        x[r * FEATURES + f] = (f == labels[r] ? 2f : 0f) + (float) rng.nextGaussian() * 0.3f;
      }
    }
    return x;
  }

  static long[] labels(int n) {
    long[] y = new long[n];
    for (int i = 0; i < n; i++) {
      y[i] = i % CLASSES;
    }
    return y;
  }

  @Test
  public void personalizingRaisesHeldOutAccuracyDeterministically() throws Exception {
    TrainingSection recipe = parse(section(null, null));
    long[] y = labels(24);
    float[] x = images(y, 1);
    LinearHeadSession a = new LinearHeadSession(recipe, FEATURES, CLASSES, new float[12]);
    Personalizer.Report report = Personalizer.run(recipe, a, new long[] {FEATURES}, x, y, 0f, 7);
    assertEquals(6, report.heldOutRows);
    assertEquals(18, report.trainRows);
    assertEquals("zero weights predict class 0 for all", 1.0 / 3, report.accuracyBefore, 0.17);
    assertEquals(1.0, report.accuracyAfter, 0);
    assertEquals("5 epochs of ceil(18 / 4) batches", 25, report.steps);
    assertNull(report.lambdaAfter);

    LinearHeadSession b = new LinearHeadSession(recipe, FEATURES, CLASSES, new float[12]);
    Personalizer.Report again = Personalizer.run(recipe, b, new long[] {FEATURES}, x, y, 0f, 7);
    assertArrayEquals(report.weights.get("head.weight"), again.weights.get("head.weight"), 0f);
  }

  @Test
  public void superfedsLambdaIsDrawnPerBatchAndReChosenOnItsSplit() throws Exception {
    Map<String, Object> lam = new LinkedHashMap<>();
    lam.put("size", 2.0);
    lam.put("fixed", null);
    lam.put("layer_of", null);
    TrainingSection recipe = parse(section(2, lam));
    // the frozen federated head is wrong (it swaps classes 0 and 1): lambda 1 is best
    float[] frozen = new float[12];
    frozen[1] = 3;
    frozen[FEATURES] = 3;
    frozen[2 * FEATURES + 2] = 3;
    long[] y = labels(40);
    LinearHeadSession s = new LinearHeadSession(recipe, FEATURES, CLASSES, frozen);
    Personalizer.Report r = Personalizer.run(recipe, s, new long[] {FEATURES}, images(y, 3), y,
        0.5f, 11);
    assertEquals(0.5f, r.lambdaBefore, 0f);
    assertTrue("lambda re-chosen toward the local head: " + r.lambdaAfter,
        r.lambdaAfter >= 0.7f);
    assertTrue(r.accuracyAfter + " vs " + r.accuracyBefore, r.accuracyAfter > r.accuracyBefore);

    RecipeRunner runner = new RecipeRunner(recipe, s, new long[] {FEATURES});
    Random rng = new Random(0);
    float[] draw = runner.drawLambda(rng);
    assertEquals("one shared draw for model mixing", draw[0], draw[1], 0f);
    lam.put("layer_of", List.of(0.0, 1.0));
    float[] layers = new RecipeRunner(parse(section(2, lam)), s, new long[] {FEATURES})
        .drawLambda(new Random(0));
    assertTrue("one draw per layer", layers[0] != layers[1]);
    lam.put("fixed", 0.25);
    assertArrayEquals(new float[] {0.25f, 0.25f}, new RecipeRunner(parse(section(2, lam)), s,
        new long[] {FEATURES}).drawLambda(rng), 0f);
  }

  @Test
  public void splitsTakeTheirShareAndTheRestTrains() {
    Map<String, Object> lam = new LinkedHashMap<>();
    lam.put("size", 1.0);
    TrainingSection recipe = parse(section(1, lam));
    RecipeRunner runner = new RecipeRunner(recipe, null, new long[] {FEATURES});
    Map<String, int[]> rows = runner.splitRows(10, new Random(3));
    assertEquals(2, rows.get("held_out").length);
    assertEquals(8, rows.get("train").length);
    Set<Integer> all = new HashSet<>();
    for (int[] set : rows.values()) {
      for (int i : set) {
        all.add(i);
      }
    }
    assertEquals(10, all.size());
    assertEquals("an empty split with if_empty = all uses every row", 3,
        runner.splitRows(3, new Random(3)).get("held_out").length);
  }

  @Test
  public void malformedSectionsNameTheField() {
    Map<String, String> cases = new LinkedHashMap<>();
    cases.put("schedule.phases[0].optimizer", "no optimizer named");
    cases.put("optimizers[0].lr", "finite number >= 0");
    cases.put("optimizers[0].parameters", "is not one of training.parameters");
    cases.put("program", "plain file name");
    for (Map.Entry<String, String> c : cases.entrySet()) {
      Map<String, Object> s = section(null, null);
      @SuppressWarnings("unchecked")
      Map<String, Object> opt = new LinkedHashMap<>((Map<String, Object>)
          ((List<?>) s.get("optimizers")).get(0));
      switch (c.getKey()) {
        case "schedule.phases[0].optimizer":
          s.put("schedule", Map.of("epochs", 1.0, "batch_size", 1.0,
              "phases", List.of(Map.of("optimizer", "gate", "rows", "train"))));
          break;
        case "optimizers[0].lr":
          opt.put("lr", -1.0);
          s.put("optimizers", List.of(opt));
          break;
        case "optimizers[0].parameters":
          opt.put("parameters", List.of("gate.weight"));
          s.put("optimizers", List.of(opt));
          break;
        default:
          s.put("program", "../evil.pte");
      }
      try {
        parse(s);
        fail("accepted a bad " + c.getKey());
      } catch (InvalidModelCardException e) {
        assertTrue(e.getMessage(), e.getMessage().contains("training." + c.getKey()));
        assertTrue(e.getMessage(), e.getMessage().contains(c.getValue()));
      }
    }
  }

  @Test
  public void sgdWithLearningRateOneWritesExactValues() throws Exception {
    Random rng = new Random(5);
    float[] p = new float[1000];
    float[] target = new float[1000];
    for (int i = 0; i < p.length; i++) {
      p[i] = (float) (rng.nextGaussian() * Math.pow(10, rng.nextInt(60) - 30));
      target[i] = (float) (rng.nextGaussian() * Math.pow(10, rng.nextInt(60) - 30));
    }
    target[0] = 0f;
    target[1] = Float.MIN_VALUE;
    target[2] = -Float.MAX_VALUE;
    p[2] = Float.MAX_VALUE / 4;
    Map<String, float[]> param = new LinkedHashMap<>();
    param.put("w", p);
    // ExecuTorch's SGD with lr 1 and no momentum: p = p + (-1) * g, in float32
    ParameterWriter.Optimizer sgd = new ParameterWriter.Optimizer() {
      @Override
      public Map<String, float[]> read() {
        return Map.of("w", param.get("w").clone());
      }

      @Override
      public void step(Map<String, float[]> gradients) {
        float[] w = param.get("w");
        float[] g = gradients.get("w");
        for (int i = 0; i < w.length; i++) {
          w[i] = w[i] + (-1f) * g[i];
        }
      }
    };
    int steps = ParameterWriter.write(sgd, Map.of("w", target));
    assertTrue(steps + " steps", steps <= 3);
    for (int i = 0; i < p.length; i++) {
      assertEquals(target[i], param.get("w")[i], 0f);
    }
  }

  @Test
  public void samplesAndWeightsPersistInAppStorage() throws Exception {
    File dir = tmp.getRoot();
    LabeledSamples samples = LabeledSamples.open(dir, new long[] {FEATURES}, CLASSES);
    samples.add(new float[] {1, 2, 3, 4}, 2);
    samples.add(new float[] {5, 6, 7, 8}, 0);
    LabeledSamples reopened = LabeledSamples.open(dir, new long[] {FEATURES}, CLASSES);
    assertArrayEquals(new long[] {2, 0}, reopened.labels());
    assertArrayEquals(new float[] {1, 2, 3, 4, 5, 6, 7, 8}, reopened.images(), 0f);
    assertArrayEquals(new int[] {1, 0, 1}, reopened.counts());
    assertNull(reopened.problem());

    TrainingSection recipe = parse(section(null, null));
    Map<String, float[]> w = new LinkedHashMap<>();
    w.put("head.weight", new float[12]);
    w.put("head.bias", new float[] {1, 2, 3});
    PersonalWeights.save(dir, recipe, "abc", w, 0.3f);
    ClientState state = PersonalWeights.load(dir, "abc");
    assertArrayEquals(new float[] {1, 2, 3}, state.tensors.get("head.bias").floats(), 0f);
    assertEquals(0.3, ((Number) state.meta.get(PersonalWeights.LAMBDA)).doubleValue(), 1e-7);
    assertNull("weights of another program are not loaded", PersonalWeights.load(dir, "def"));
    assertArrayEquals(new float[] {1, 2, 3}, PersonalWeights.fromTensors(recipe, state.tensors,
        "saved").get("head.bias"), 0f);
  }
}
