package org.pflkit.core;

import java.util.ArrayList;
import java.util.Arrays;
import java.util.Collections;
import java.util.Comparator;
import java.util.List;

/** Softmax over logits and top-k selection, matching {@code torch.softmax} / {@code topk}. */
public final class Probabilities {
  private Probabilities() {}

  /** One ranked class. */
  public static final class Ranked {
    public final int index;
    public final float probability;

    Ranked(int index, float probability) {
      this.index = index;
      this.probability = probability;
    }

    @Override
    public String toString() {
      return "[" + index + ", " + probability + "]";
    }
  }

  /** Numerically stable softmax (max subtracted first); accumulated in double. */
  public static float[] softmax(float[] logits) {
    if (logits.length == 0) {
      throw new IllegalArgumentException("softmax of zero logits");
    }
    float max = Float.NEGATIVE_INFINITY;
    for (float v : logits) {
      if (Float.isNaN(v)) {
        throw new IllegalArgumentException("logits contain NaN: " + Arrays.toString(logits));
      }
      max = Math.max(max, v);
    }
    double[] e = new double[logits.length];
    double sum = 0;
    for (int i = 0; i < logits.length; i++) {
      e[i] = Math.exp((double) logits[i] - max);
      sum += e[i];
    }
    float[] out = new float[logits.length];
    for (int i = 0; i < out.length; i++) {
      out[i] = (float) (e[i] / sum);
    }
    return out;
  }

  /** The k largest scores, best first; equal scores keep the lower class index first. */
  public static List<Ranked> topK(float[] scores, int k) {
    if (k < 1) {
      throw new IllegalArgumentException("k must be >= 1, got " + k);
    }
    List<Ranked> all = new ArrayList<Ranked>(scores.length);
    for (int i = 0; i < scores.length; i++) {
      all.add(new Ranked(i, scores[i]));
    }
    Collections.sort(all, new Comparator<Ranked>() {
      @Override
      public int compare(Ranked a, Ranked b) {
        int byScore = Float.compare(b.probability, a.probability);
        return byScore != 0 ? byScore : Integer.compare(a.index, b.index);
      }
    });
    List<Ranked> top = new ArrayList<Ranked>(all.subList(0, Math.min(k, all.size())));
    return Collections.unmodifiableList(top);
  }
}
