package org.pflkit.core;

import static org.junit.Assert.assertArrayEquals;
import static org.junit.Assert.assertEquals;
import static org.junit.Assert.assertFalse;
import static org.junit.Assert.assertNotNull;
import static org.junit.Assert.assertNull;
import static org.junit.Assert.assertTrue;
import static org.junit.Assert.fail;

import java.io.File;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import org.junit.Test;

public class ModelCardTest {
  /** The card text of one fixture folder (names: android-demo/tools/make_fixtures.py). */
  private static String cardText(String fixture) {
    File file = new File(new File(Fixtures.root(), fixture), "model_card.json");
    if (!file.isFile()) {
      throw new AssertionError("missing fixture " + file);
    }
    return Fixtures.read(file);
  }

  @Test
  public void parsesEveryExportedCard() throws java.io.IOException {
    for (File dir : Fixtures.cardDirs()) {
      ModelCard card = ModelCard.parse(Fixtures.read(new File(dir, "model_card.json")));
      assertEquals(dir.getName(), ModelCard.SCHEMA_VERSION, "pflkit.model-card/2");
      assertFalse(dir.getName(), card.classes.isEmpty());
      assertEquals(dir.getName(), "logits", card.outputs.get(0).name);
      assertEquals(dir.getName(), card.preprocessing.channels * card.preprocessing.height
          * card.preprocessing.width, card.preprocessing.inputSize());
      for (ModelCard.Artifact a : card.models()) {
        assertTrue(dir.getName() + ": " + a.format, a.format.equals(ModelCard.Artifact.EXECUTORCH)
            || a.format.equals(ModelCard.Artifact.ONNX));
      }
      for (ModelCard.Artifact a : card.artifacts) { // the fixture keeps golden.json, not models
        File file = new File(dir, a.file);
        if (file.isFile()) {
          try (java.io.InputStream in = new java.io.FileInputStream(file)) {
            ArtifactCheck.verify(in, a);
          }
        }
      }
    }
  }

  @Test
  public void aCardOverTheLimitIsRefusedUnreadAndOneAtItIsParsed() throws java.io.IOException {
    String text = cardText("superfed_mm_runtime");
    byte[] padded = new byte[ModelCard.MAX_BYTES];
    java.util.Arrays.fill(padded, (byte) ' ');
    byte[] card = text.getBytes(java.nio.charset.StandardCharsets.UTF_8);
    System.arraycopy(card, 0, padded, 0, card.length);  // JSON with trailing spaces: 1 MiB
    assertTrue(ModelCard.read(new java.io.ByteArrayInputStream(padded), "card").hasRuntimeLambda());
    byte[] over = Arrays.copyOf(padded, ModelCard.MAX_BYTES + 1);
    over[ModelCard.MAX_BYTES] = ' ';
    try {
      ModelCard.read(new java.io.ByteArrayInputStream(over), "pushed/model_card.json");
      fail("a card over 1 MiB is refused");
    } catch (java.io.IOException e) {
      assertEquals("pushed/model_card.json: more than 1048576 bytes, too large for a model card"
          + " (at most 1 MiB): not read", e.getMessage());
    }
  }

  @Test
  public void superfedRuntimeLambdaCardHasTheLamInput() {
    ModelCard card = ModelCard.parse(cardText("superfed_mm_runtime"));
    assertTrue(card.hasRuntimeLambda());
    assertTrue(card.mixture.runtimeChoices().contains(card.lambda.name));
    assertEquals("lam", card.lambda.name);
    assertTrue(Double.isNaN(card.mixture.number("lam")));
    assertArrayEquals(new float[] {0f, 1f}, card.lambdaRange(), 0f);
    assertEquals("superfed", card.mixture.kind);
    assertTrue(card.mixture.summary, card.mixture.summary.contains("lambda an input"));
  }

  @Test
  public void superfedFixedLambdaCardHasOneInput() {
    ModelCard card = ModelCard.parse(cardText("superfed_mm_fixed"));
    assertFalse(card.hasRuntimeLambda());
    assertEquals(0.3, card.mixture.number("lam"), 1e-9);
    assertEquals(1, card.outputs.size());
  }

  @Test
  public void fedrodPersonalizedCardsExposeBothHeads() {
    for (String fixture : new String[] {"fedrod_personalized", "fedrod_new_client"}) {
      ModelCard card = ModelCard.parse(cardText(fixture));
      assertEquals("personalized", card.mixture.head);
      assertNotNull(card.output(ModelCard.GENERIC_OUTPUT));
      assertFalse(card.hasRuntimeLambda());
    }
    ModelCard generic = ModelCard.parse(cardText("fedrod_generic"));
    assertEquals("generic", generic.mixture.head);
    assertNull(generic.output(ModelCard.GENERIC_OUTPUT));
  }

  @Test
  public void newClientClassCountsAreAChoiceEntryKeyedByName() {
    Object counts = ModelCard.parse(cardText("fedrod_new_client")).mixture.choice
        .get("class_distribution");
    assertEquals(list(5.0, 0.0, 12.0, 0.0, 0.0, 3.0, 0.0, 0.0, 9.0, 1.0), counts);
    // a trained FedRoD-hyper client's head also comes from its class counts: the card says so
    assertNotNull(ModelCard.parse(cardText("fedrod_personalized")).mixture.choice
        .get("class_distribution"));
  }

  @Test
  public void plainAndPflmoeCardsHaveOneOutputAndNoLambda() {
    for (String fixture : new String[] {"fedavg", "pflmoe_mfe"}) {
      ModelCard card = ModelCard.parse(cardText(fixture));
      assertEquals(1, card.outputs.size());
      assertFalse(card.hasRuntimeLambda());
    }
    assertNull(ModelCard.parse(cardText("fedavg")).mixture);
    ModelCard moe = ModelCard.parse(cardText("pflmoe_mfe"));
    assertTrue(moe.mixture.summary, moe.mixture.summary.startsWith("PFL-MFE"));
    assertEquals(32, moe.preprocessing.height); // LeNet-5: 28x28 images are resized
  }

  @Test
  public void readsTheMixtureOfAMethodItHasNeverHeardOf() {
    String text = Fixtures.mutate(cardText("fedavg"), "mixture",
        map("kind", "my_method", "summary", "logits / temperature", "choice", map(),
            "details", map("temperature", list(0.5, 2.0))));
    ModelCard.Mixture mix = ModelCard.parse(text).mixture;
    assertEquals("my_method", mix.kind);
    assertEquals("logits / temperature", mix.summary);
    assertEquals("personalized", mix.head);
    assertTrue(mix.choice.isEmpty());
  }

  @Test
  public void aRuntimeChoiceOfAnUnknownMethodIsItsInputByName() {
    String text = Fixtures.mutate(cardText("superfed_mm_runtime"), "mixture",
        mixture("my_method", map("strength", "runtime")));
    text = Fixtures.mutate(text, "inputs.1.name", "strength");
    ModelCard card = ModelCard.parse(text);
    assertEquals("strength", card.lambda.name);
    assertEquals(java.util.Collections.singleton("strength"), card.mixture.runtimeChoices());
  }

  @Test
  public void ignoresUnknownExtraKeys() {
    String text = Fixtures.mutate(cardText("fedavg"), "future_field", list(1.0, "x"));
    text = Fixtures.mutate(text, "preprocessing.note", "extra");
    assertEquals(10, ModelCard.parse(text).classes.size());
  }

  @Test
  public void rejectsMalformedCardsNamingTheField() {
    String plain = cardText("fedavg");
    String superfed = cardText("superfed_mm_runtime");
    String fedrod = cardText("fedrod_personalized");
    String sha = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
    Object[][] cases = {
        {plain, "schema_version", Fixtures.REMOVE, "schema_version: required field is missing"},
        {plain, "schema_version", "pflkit.model-card/3", "unsupported version"},
        {plain, "algorithm", "", "algorithm: expected a non-empty string, found the string \"\""},
        {plain, "preprocessing.mean", Fixtures.REMOVE, "preprocessing.mean: required field"},
        {plain, "preprocessing.std.0", 0.0, "preprocessing.std[0]: must be > 0"},
        {plain, "preprocessing.mean", list(0.1, 0.2), "one value per channel (1), found 2"},
        {plain, "preprocessing.resize", "nearest", "preprocessing.resize: expected one of"},
        {plain, "preprocessing.layout", "NHWC", "preprocessing.layout: expected one of \"NCHW\""},
        {plain, "preprocessing.size", list(28.0), "expected [height, width]"},
        {plain, "preprocessing.size.0", 2.5, "preprocessing.size[0]: expected an integer"},
        {plain, "preprocessing.pixel_scale", "255", "expected a number, found the string"},
        {plain, "preprocessing.channels", 0.0, "expected 1 to 4 channels"},
        {plain, "inputs.0.shape.2", 32.0, "inputs[0].shape: expected [\"batch\", 1, 28, 28]"},
        {plain, "inputs.0.shape.0", "dynamic", "inputs[0].shape[0]: expected a number"},
        {plain, "inputs.0.dtype", "uint8", "inputs[0].dtype: expected one of \"float32\""},
        {plain, "inputs", list(), "expected the image input"},
        {plain, "outputs.0.shape.1", 9.0, "(one logit per class)"},
        {plain, "outputs.0.meaning", "probabilities", "outputs[0].meaning: expected one of"},
        {plain, "outputs", list(), "outputs: expected at least one output"},
        {plain, "classes", list("a"), "at least 2 class names"},
        {plain, "classes.1", 3.0, "classes[1]: expected a non-empty string"},
        {plain, "mixture", mixture("superfed", map("lam", "runtime")), "no \"lam\" input"},
        {plain, "mixture", map("kind", "any_method"), "mixture.summary: required field"},
        {plain, "mixture", map("kind", 3.0, "summary", "s"), "mixture.kind: expected a non-empty"},
        {plain, "mixture", mixture("mine", list()), "mixture.choice: expected an object"},
        {plain, "mixture", map("kind", "mine", "summary", "s", "details", 1.0),
            "mixture.details: expected an object"},
        {superfed, "inputs.1.name", "lambda", "a \"lambda\" input needs mixture.choice.lambda"},
        {superfed, "mixture.choice.lam", 0.3, "a \"lam\" input needs mixture.choice.lam"},
        {superfed, "inputs.1.range", Fixtures.REMOVE, "inputs[1].range: required field"},
        {superfed, "inputs.1.range", list(0.8, 0.2), "expected [min, max] with min <= max"},
        {superfed, "inputs.1.shape", list(2.0), "inputs[1].shape: expected [1]"},
        {fedrod, "mixture.choice.head", "both", "mixture.choice.head: expected one of"},
        {fedrod, "outputs.1.name", "logits", "duplicate output name"},
        {plain, "artifacts", list(artifact("../x.pte", "pte", sha)), "plain file name"},
        {plain, "artifacts", list(artifact("m.pte", 3.0, sha)), "artifacts[0].format: expected a"},
        {plain, "artifacts", list(artifact("m.pte", "pte", "\u2026")), "64 lowercase hex"},
        {plain, "source", Fixtures.REMOVE, "source: required field is missing"},
        {plain, "parity", list(map()), "parity[0].file: required field is missing"},
    };
    for (Object[] c : cases) {
      String text = Fixtures.mutate((String) c[0], (String) c[1], c[2]);
      expectRejected(text, (String) c[3]);
    }
    expectRejected("[1, 2]", "(top level): expected an object, found an array");
    expectRejected("{\"schema_version\": ", "not valid JSON: line 1 column 20");
  }

  private static void expectRejected(String text, String fragment) {
    try {
      ModelCard.parse(text);
      fail("accepted a card that should fail with: " + fragment);
    } catch (InvalidModelCardException e) {
      assertTrue("expected \"" + fragment + "\" in: " + e.getMessage(),
          e.getMessage().contains(fragment));
      assertTrue(e.getMessage(), e.getMessage().startsWith("invalid model card: "));
    }
  }

  /** A mixture block of any (even unknown) kind: readers need no list of methods. */
  private static Map<String, Object> mixture(String kind, Object choice) {
    return map("kind", kind, "summary", "a one-line description", "choice", choice);
  }

  private static Map<String, Object> artifact(String file, Object format, String sha) {
    return map("file", file, "format", format, "precision", "fp32", "sha256", sha, "bytes", 1.0);
  }

  private static List<Object> list(Object... items) {
    return new ArrayList<>(Arrays.asList(items));
  }

  private static Map<String, Object> map(Object... kv) {
    Map<String, Object> m = new LinkedHashMap<>();
    for (int i = 0; i < kv.length; i += 2) {
      m.put((String) kv[i], kv[i + 1]);
    }
    return m;
  }
}
