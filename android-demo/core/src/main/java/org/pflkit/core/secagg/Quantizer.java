package org.pflkit.core.secagg;

/**
 * Float updates to integers modulo 2^32, as Python's {@code pflkit.sdk.secagg.quantize}: each
 * coordinate clipped to [-c, c] and rounded (half to even, numpy's rint) to one of
 * {@code floor((2^32 - 1) / n) + 1} levels, so the sum of n never wraps.
 */
public final class Quantizer {
  private static final long MODULUS = 1L << 32;

  private Quantizer() {}

  /** The top level for {@code n} devices. */
  public static long levels(int n) {
    return (MODULUS - 1) / n;
  }

  /** The distance between two levels. */
  public static double step(double clipRange, int n) {
    return 2 * clipRange / levels(n);
  }

  /** Each coordinate's level, as a uint32 held in an int. */
  public static int[] quantize(double[] update, double clipRange, int n) {
    double delta = step(clipRange, n);
    int[] out = new int[update.length];
    for (int i = 0; i < update.length; i++) {
      double x = update[i];
      if (Double.isNaN(x) || Double.isInfinite(x)) {
        throw new IllegalArgumentException("the update has non-finite values: nothing to "
            + "quantize");
      }
      x = Math.max(-clipRange, Math.min(clipRange, x));
      out[i] = (int) (long) Math.rint((x + clipRange) / delta);
    }
    return out;
  }
}
