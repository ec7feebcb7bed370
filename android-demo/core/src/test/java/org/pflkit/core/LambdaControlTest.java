package org.pflkit.core;

import static org.junit.Assert.assertArrayEquals;
import static org.junit.Assert.assertEquals;
import static org.junit.Assert.assertFalse;
import static org.junit.Assert.assertTrue;

import java.io.File;
import java.util.Arrays;
import java.util.HashMap;
import java.util.Map;
import org.junit.Test;

public class LambdaControlTest {
  private static File cardDir(boolean runtime) {
    for (File dir : Fixtures.cardDirs()) {
      ModelCard card = ModelCard.parse(Fixtures.read(new File(dir, "model_card.json")));
      if (card.hasRuntimeLambda() == runtime) {
        return dir;
      }
    }
    throw new AssertionError("no fixture card with runtime lambda = " + runtime);
  }

  private static ModelCard card(boolean runtime) {
    return ModelCard.parse(Fixtures.read(new File(cardDir(runtime), "model_card.json")));
  }

  @Test
  public void sliderMapsOntoTheCardsRange() {
    LambdaControl lam = new LambdaControl(card(true));
    assertEquals(0f, lam.fromSlider(0, 100), 0f);
    assertEquals(1f, lam.fromSlider(100, 100), 0f);
    assertEquals(0.3f, lam.fromSlider(3, 10), 1e-7f);
    assertEquals(30, lam.toSlider(0.3f, 100));
    float verified = card(true).verifiedLambda;
    assertEquals(Float.isNaN(verified) ? 0.5f : verified, lam.initial(), 0f);
    assertArrayEquals(new float[] {0.25f}, lam.input(0.25f), 0f);
  }

  @Test
  public void everySliderPositionIsALambdaTheModelTakes() {
    String text = Fixtures.read(new File(cardDir(true), "model_card.json"));
    // min + (max - min) rounds past max in float32 for 4 % of such ranges (0.02 + 0.33)
    LambdaControl lam = new LambdaControl(ModelCard.parse(Fixtures.mutate(text,
        "inputs.1.range", Arrays.asList(0.02, 0.35))));
    for (int position = 0; position <= 100; position++) {
      float value = lam.fromSlider(position, 100);
      assertArrayEquals(new float[] {value}, lam.input(value), 0f);
    }
    assertEquals(0.35f, lam.fromSlider(100, 100), 0f);
    assertEquals(0.02f, lam.fromSlider(0, 100), 0f);
  }

  @Test
  public void outOfRangeLambdaIsRefusedNotClamped() {
    LambdaControl lam = new LambdaControl(card(true));
    for (float bad : new float[] {-0.01f, 1.01f, Float.NaN}) {
      try {
        lam.input(bad);
        throw new AssertionError("accepted lambda " + bad);
      } catch (IllegalArgumentException e) {
        assertTrue(e.getMessage(), e.getMessage().contains("outside the model's range [0.0, 1.0]"));
      }
    }
  }

  @Test
  public void sliderStartsAtTheVerifiedLambda() {
    String text = Fixtures.read(new File(cardDir(true), "model_card.json"));
    Map<String, Object> entry = new HashMap<>();
    entry.put("file", "model.pte");
    entry.put("runtime_value", 0.7);
    ModelCard card = ModelCard.parse(Fixtures.mutate(text, "parity", Arrays.asList(entry)));
    assertEquals(0.7f, card.verifiedLambda, 0f);
    assertEquals(0.7f, new LambdaControl(card).initial(), 0f);
  }

  @Test
  public void placingTheSliderKeepsTheExactVerifiedLambda() {
    String text = Fixtures.read(new File(cardDir(true), "model_card.json"));
    Map<String, Object> entry = new HashMap<>();
    entry.put("file", "model.pte");
    entry.put("runtime_value", 0.137);
    LambdaSlider slider = new LambdaSlider(new LambdaControl(
        ModelCard.parse(Fixtures.mutate(text, "parity", Arrays.asList(entry)))), 100);
    assertEquals(14, slider.position());
    assertFalse("the app placing the slider changes nothing",
        slider.onProgress(slider.position(), false));
    assertEquals(0.137f, slider.value(), 0f);
    assertTrue(slider.onProgress(40, true));
    assertEquals(0.4f, slider.value(), 1e-7f);
    assertFalse(slider.onProgress(40, true));
  }

  @Test(expected = IllegalArgumentException.class)
  public void sliderPositionOutsideTheSliderIsRefused() {
    new LambdaControl(card(true)).fromSlider(11, 10);
  }

  @Test(expected = IllegalStateException.class)
  public void cardWithoutRuntimeLambdaHasNoControl() {
    new LambdaControl(card(false));
  }
}
