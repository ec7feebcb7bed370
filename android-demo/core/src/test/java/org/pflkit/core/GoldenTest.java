package org.pflkit.core;

import static org.junit.Assert.assertEquals;
import static org.junit.Assert.assertTrue;

import java.io.File;
import java.util.Collections;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import org.junit.Test;

/** The core against golden vectors written by the Python side (pfl-export --golden). */
public class GoldenTest {
  /** The bar from the issue: the core's numbers match Python's to 1e-6. */
  private static final double TOL = 1e-6;

  private static List<Map<String, Object>> samples(File dir) {
    Map<String, Object> golden = Fixtures.json(new File(dir, "golden.json"));
    assertEquals("pflkit.golden/1", golden.get("schema_version"));
    assertEquals("model_card.json", golden.get("card"));
    List<Map<String, Object>> samples = Fixtures.objects(golden.get("samples"));
    assertTrue(dir.getName() + " has no samples", !samples.isEmpty());
    return samples;
  }

  private static ModelCard card(File dir) {
    return ModelCard.parse(Fixtures.read(new File(dir, "model_card.json")));
  }

  @Test
  public void preprocessingMatchesPython() {
    for (File dir : Fixtures.cardDirs()) {
      Preprocessing pre = card(dir).preprocessing;
      for (Map<String, Object> s : samples(dir)) {
        int[] shape = Fixtures.ints(s.get("raw_shape"));
        assertEquals(pre.channels, shape[2]);
        float[] input = pre.apply(Fixtures.floats(s.get("raw")), shape[0], shape[1]);
        double diff = Fixtures.maxAbsDiff(Fixtures.floats(s.get("input")), input);
        assertTrue(dir.getName() + ": preprocessing differs by " + diff, diff <= TOL);
      }
    }
  }

  @Test
  public void softmaxAndTopKMatchPython() {
    for (File dir : Fixtures.cardDirs()) {
      for (Map<String, Object> s : samples(dir)) {
        float[] expected = Fixtures.floats(s.get("probabilities"));
        float[] probs = Probabilities.softmax(Fixtures.floats(s.get("logits")));
        double diff = Fixtures.maxAbsDiff(expected, probs);
        assertTrue(dir.getName() + ": softmax differs by " + diff, diff <= TOL);
        assertTopK(dir.getName(), s.get("top_k"), expected,
            Probabilities.topK(probs, Fields.array(s.get("top_k"), "top_k").size()));
      }
    }
  }

  /**
   * The whole pipeline (raw pixels -> top-k) with a backend that replays the logits Python
   * computed for the golden input, after checking it was handed exactly that input and lambda.
   */
  @Test
  public void classifierPipelineReproducesGoldenTopK() throws Exception {
    for (File dir : Fixtures.cardDirs()) {
      ModelCard card = card(dir);
      for (Map<String, Object> s : samples(dir)) {
        final float[] goldenInput = Fixtures.floats(s.get("input"));
        final float[] logits = Fixtures.floats(s.get("logits"));
        final Float lam = s.containsKey("lam") ? (float) Fields.number(s.get("lam"), "lam") : null;
        assertEquals(dir.getName(), card.hasRuntimeLambda(), lam != null);
        final String name = dir.getName();
        Classifier.Backend replay = (image, shape, lambda) -> {
          assertTrue(name, Fixtures.maxAbsDiff(goldenInput, image) <= TOL);
          assertEquals(name, image.length, shape[0] * shape[1] * shape[2] * shape[3]);
          assertEquals(name, lam, lambda == null ? null : lambda[0]);
          Map<String, float[]> out = new HashMap<>();
          for (ModelCard.TensorSpec spec : card.outputs) {
            out.put(spec.name, logits); // every head replays the headline logits
          }
          return out;
        };
        int[] shape = Fixtures.ints(s.get("raw_shape"));
        int k = Fields.array(s.get("top_k"), "top_k").size();
        Classifier.Result result = new Classifier(card, replay)
            .classify(Fixtures.floats(s.get("raw")), shape[0], shape[1], lam, k);
        assertEquals(card.outputs.size(), result.topK.size());
        assertTopK(name, s.get("top_k"), Fixtures.floats(s.get("probabilities")),
            result.topK.get("logits"));
        assertTrue(result.inferenceNanos >= 0 && result.preprocessNanos >= 0);
      }
    }
  }

  /**
   * Rank by rank, the probability matches; the class matches too, unless Python's
   * probabilities for the two classes tie within the tolerance (then either order is right).
   */
  private static void assertTopK(String where, Object expectedNode, float[] expectedProbs,
      List<Probabilities.Ranked> actual) {
    List<Object> expected = Fields.array(expectedNode, "top_k");
    assertEquals(where, expected.size(), actual.size());
    for (int r = 0; r < expected.size(); r++) {
      double[] pair = Fields.numbers(expected.get(r), "top_k[" + r + "]");
      Probabilities.Ranked got = actual.get(r);
      assertEquals(where + " rank " + r, pair[1], got.probability, TOL);
      assertEquals(where + " rank " + r + " class " + got.index + " vs " + (int) pair[0],
          pair[1], expectedProbs[got.index], TOL);
    }
  }

  @Test
  public void classifierRefusesAMissingOrUnexpectedLambda() throws Exception {
    for (File dir : Fixtures.cardDirs()) {
      ModelCard card = card(dir);
      Classifier c = new Classifier(card, (image, shape, lambda) -> Collections.emptyMap());
      float[] raw = new float[card.preprocessing.inputSize()];
      Float wrong = card.hasRuntimeLambda() ? null : 0.5f;
      try {
        c.classify(raw, card.preprocessing.height, card.preprocessing.width, wrong, 3);
        throw new AssertionError(dir.getName() + ": accepted lambda " + wrong);
      } catch (IllegalArgumentException e) {
        assertTrue(e.getMessage(), e.getMessage().contains("lambda"));
      }
    }
  }

  @Test
  public void classifierNamesAMissingOutput() throws Exception {
    ModelCard card = card(Fixtures.cardDirs().get(0));
    Float lam = card.hasRuntimeLambda() ? 0.5f : null;
    Classifier c = new Classifier(card, (image, shape, lambda) -> Collections.emptyMap());
    float[] raw = new float[card.preprocessing.inputSize()];
    try {
      c.classify(raw, card.preprocessing.height, card.preprocessing.width, lam, 3);
      throw new AssertionError("accepted a backend that returned nothing");
    } catch (IllegalStateException e) {
      assertTrue(e.getMessage(), e.getMessage().contains("no output \"logits\""));
    }
  }
}
