package org.pflkit.core.personal;

import java.util.Map;

/**
 * Writes chosen values into a training program's parameters through its optimizer.
 *
 * <p>The Android {@code TrainingModule} returns its parameters as tensors over the program's
 * memory, but offers no public way to write them; {@code SGD.step} is the public call that does.
 * An SGD with lr 1 (no momentum or decay) computes {@code p + (-1) g} in float32, so the
 * gradient {@code g = p - target} moves p onto the target up to one rounding; a second step
 * from there is exact (p and target are then within a factor of 2, so {@code p - target} is
 * exact by Sterbenz's lemma). Where {@code p - target} would overflow, the first step goes to
 * 0 instead. {@link #write} repeats until every value equals its target.
 */
public final class ParameterWriter {
  /** More than enough: the second step is exact whenever the first left p near the target. */
  public static final int MAX_STEPS = 4;

  private ParameterWriter() {}

  /** Reads the parameters and takes one SGD(lr = 1) step with the given gradients. */
  public interface Optimizer {
    Map<String, float[]> read() throws Exception;

    void step(Map<String, float[]> gradients) throws Exception;
  }

  /** {@code current - target} in float32 (or {@code current} where that overflows). */
  public static float[] gradientToward(float[] current, float[] target) {
    if (current.length != target.length) {
      throw new IllegalArgumentException("sizes differ: " + current.length + " vs "
          + target.length);
    }
    float[] g = new float[current.length];
    for (int i = 0; i < g.length; i++) {
      if (Float.isNaN(target[i]) || Float.isInfinite(target[i])) {
        throw new IllegalArgumentException("target value " + target[i] + " is not finite");
      }
      g[i] = current[i] - target[i];
      if (Float.isInfinite(g[i])) {  // opposite signs near the float range: go through 0
        g[i] = current[i];
      }
    }
    return g;
  }

  /** Step until the parameters equal {@code targets}; returns the steps taken. */
  public static int write(Optimizer optimizer, Map<String, float[]> targets) throws Exception {
    for (int steps = 0; steps <= MAX_STEPS; steps++) {
      Map<String, float[]> current = optimizer.read();
      Map<String, float[]> gradients = new java.util.LinkedHashMap<String, float[]>();
      boolean equal = true;
      for (Map.Entry<String, float[]> t : targets.entrySet()) {
        float[] now = current.get(t.getKey());
        if (now == null) {
          throw new IllegalArgumentException("the program has no parameter " + t.getKey());
        }
        float[] g = gradientToward(now, t.getValue());
        for (float v : g) {
          equal &= v == 0f;
        }
        gradients.put(t.getKey(), g);
      }
      if (equal) {
        return steps;
      }
      if (steps < MAX_STEPS) {
        optimizer.step(gradients);
      }
    }
    throw new IllegalStateException("parameters did not reach their values in " + MAX_STEPS
        + " SGD steps (is the optimizer lr 1 without momentum or weight decay?)");
  }
}
