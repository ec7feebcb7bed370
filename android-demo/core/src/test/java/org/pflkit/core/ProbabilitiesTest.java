package org.pflkit.core;

import static org.junit.Assert.assertArrayEquals;
import static org.junit.Assert.assertEquals;

import java.util.List;
import org.junit.Test;

public class ProbabilitiesTest {
  @Test
  public void softmaxOfKnownValues() {
    assertArrayEquals(new float[] {1 / 3f, 2 / 3f},
        Probabilities.softmax(new float[] {0f, (float) Math.log(2)}), 1e-7f);
    assertArrayEquals(new float[] {0.25f, 0.25f, 0.25f, 0.25f},
        Probabilities.softmax(new float[] {7f, 7f, 7f, 7f}), 0f);
  }

  @Test
  public void softmaxIsStableForHugeLogits() {
    float[] p = Probabilities.softmax(new float[] {1000f, 1001f, -1e30f});
    double e = Math.E;
    assertArrayEquals(new float[] {(float) (1 / (1 + e)), (float) (e / (1 + e)), 0f}, p, 1e-7f);
  }

  @Test(expected = IllegalArgumentException.class)
  public void softmaxRefusesNaN() {
    Probabilities.softmax(new float[] {0f, Float.NaN});
  }

  @Test
  public void topKOrdersByScoreThenLowerIndex() {
    List<Probabilities.Ranked> top = Probabilities.topK(new float[] {0.1f, 0.4f, 0.1f, 0.4f}, 3);
    assertEquals(3, top.size());
    assertEquals(1, top.get(0).index);
    assertEquals(3, top.get(1).index);
    assertEquals(0, top.get(2).index);
    assertEquals(0.4f, top.get(0).probability, 0f);
  }

  @Test
  public void topKLargerThanTheClassCountReturnsAll() {
    assertEquals(2, Probabilities.topK(new float[] {0.5f, 0.5f}, 3).size());
  }

  @Test(expected = IllegalArgumentException.class)
  public void topKRefusesKZero() {
    Probabilities.topK(new float[] {1f}, 0);
  }
}
