package org.pflkit.core.personal;

import static org.junit.Assert.assertArrayEquals;
import static org.junit.Assert.assertEquals;
import static org.junit.Assert.assertNull;
import static org.junit.Assert.assertTrue;

import java.io.File;
import java.io.FileInputStream;
import java.io.InputStream;
import java.net.URL;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.util.List;
import java.util.Map;
import java.util.Random;
import org.junit.Test;
import org.pflkit.core.ArtifactCheck;
import org.pflkit.core.ModelCard;
import org.pflkit.core.TrainingSection;

/**
 * The training sections of real {@code pfl-export --trainer} exports (one per method, the
 * {@code fixtures/trainer/} cards and their {@code personal_init.safetensors}) parse, and the
 * recipe runner builds the inputs the programs declare.
 */
public class TrainerCardTest {
  static File dir(String method) throws Exception {
    URL url = TrainerCardTest.class.getResource("/fixtures/trainer/" + method);
    return new File(url.toURI());
  }

  static ModelCard card(String method) throws Exception {
    return ModelCard.parse(new String(Files.readAllBytes(new File(dir(method),
        "model_card.json").toPath()), StandardCharsets.UTF_8));
  }

  @Test
  public void everyMethodsTrainingSectionParsesWithItsInitialWeights() throws Exception {
    for (String method : List.of("superfed_mm", "fedrod_linear", "pflmoe_mfe")) {
      ModelCard card = card(method);
      TrainingSection recipe = card.training;
      assertEquals("personal_train.pte", recipe.program);
      ModelCard.Artifact weights = null;
      for (ModelCard.Artifact a : card.artifacts) {
        weights = a.file.equals(recipe.initialWeights) ? a : weights;
      }
      try (InputStream in = new FileInputStream(new File(dir(method), weights.file))) {
        ArtifactCheck.verify(in, weights);  // the file is the one the card lists
      }
      Map<String, float[]> initial = PersonalWeights.initial(recipe, dir(method), weights);
      assertEquals(recipe.parameterNames(), List.copyOf(initial.keySet()));
      assertEquals("only .pte/.onnx are inference models", 1, card.models().size());
    }
  }

  @Test
  public void eachMethodDeclaresItsPersonalPart() throws Exception {
    TrainingSection superfed = card("superfed_mm").training;
    assertNull("SuPerFed trains w_l on images", superfed.prepareMethod);
    assertEquals(6, superfed.lambda.size);
    assertEquals("holdout", superfed.chooseLambdaOn);
    assertEquals(11, superfed.lambdaGrid.length);
    assertTrue(superfed.parameterNames().get(0).startsWith("local."));

    TrainingSection fedrod = card("fedrod_linear").training;
    assertEquals("prepare", fedrod.prepareMethod);
    assertEquals(List.of("phi"), List.of(fedrod.optimizers.get(0).name));
    assertNull(fedrod.lambda);

    TrainingSection moe = card("pflmoe_mfe").training;
    assertEquals(2, moe.phases.size());
    assertEquals("gate", moe.phases.get(1).rows);
    assertEquals("skip", moe.splits.get(0).ifEmpty);
  }

  @Test
  public void theRunnerBuildsTheInputsTheProgramDeclares() throws Exception {
    ModelCard card = card("superfed_mm");
    long[] shape = {card.preprocessing.channels, card.preprocessing.height,
        card.preprocessing.width};
    RecipeRunner runner = new RecipeRunner(card.training, null, shape);
    long[] labels = {3, 1, 4, 1, 5};
    RecipeRunner.Data data = runner.prepare(new float[5 * 64], labels);
    List<ProgramInput> batch = runner.batch(data, new int[] {0, 2}, 0.3f);
    assertEquals("image", batch.get(0).name);
    assertArrayEquals(new long[] {2, 1, 8, 8}, batch.get(0).shape);
    assertArrayEquals(new long[] {3, 4}, batch.get(1).longs);
    assertArrayEquals(new long[] {6}, batch.get(2).shape);
    assertEquals(0.3f, batch.get(2).floats[5], 0f);
    Map<String, int[]> rows = runner.splitRows(20, new Random(1));
    assertEquals("floor(0.1 * 20) held out for the lambda choice", 2, rows.get("holdout").length);
    assertEquals(18, rows.get("train").length);
  }
}
