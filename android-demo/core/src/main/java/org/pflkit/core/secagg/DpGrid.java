package org.pflkit.core.secagg;

import java.util.Random;

/**
 * The quantizer's grid as a DP device uses it, as Python's {@code pflkit.sdk.secagg.dp.DpGrid}:
 * the change is clipped to {@code C - room} and rounded to the grid first (room = sqrt(d) *
 * step / 2, so the rounded change's norm stays within C), then its noise share is added as a
 * discrete Gaussian in whole grid steps. Rounding after continuous noise would move the sum by
 * amounts that depend on each device's change; this way the sum is Kairouz et al. 2021's
 * distributed discrete Gaussian, which the accountant's z describes (docs/privacy.md).
 */
public final class DpGrid {
  /** A noise share's std in grid steps, at least (Python's MIN_NOISE_STEPS). */
  public static final double MIN_NOISE_STEPS = 4.0;
  /** Of C, the most the rounding's room may take (Python's MAX_ROUNDING_SHARE). */
  public static final double MAX_ROUNDING_SHARE = 0.5;
  /** Share stds between C and the clip range c (Python's QUANTIZATION_SIGMAS). */
  public static final double QUANTIZATION_SIGMAS = 16.0;
  private static final String REFUSED = "secagg: the round's grid cannot carry DP: ";

  public final double clipNorm;
  public final double offset;
  public final double step;
  public final int dimension;
  public final double noiseSteps;

  private DpGrid(double clipNorm, double offset, double step, int dimension,
      double noiseSteps) {
    this.clipNorm = clipNorm;
    this.offset = offset;
    this.step = step;
    this.dimension = dimension;
    this.noiseSteps = noiseSteps;
  }

  /** The round's grid for DP's C and z; a {@link SecAggException} if it cannot carry them. */
  public static DpGrid of(RoundSetup setup, double clipNorm, double noiseMultiplier) {
    double share = noiseMultiplier * clipNorm / Math.sqrt(setup.threshold);
    double wanted = clipNorm + QUANTIZATION_SIGMAS * share;
    if (!(setup.clipRange >= wanted * (1 - 1e-12))) {
      throw new SecAggException(REFUSED + "the clip range " + setup.clipRange + " is below C + "
          + "16 noise share stds = " + wanted + ": the noise would be clipped");
    }
    double step = Quantizer.step(setup.clipRange, setup.roster.length);
    DpGrid grid = new DpGrid(clipNorm, setup.clipRange, step, setup.dimension, share / step);
    if (!(grid.noiseSteps >= MIN_NOISE_STEPS)) {
      throw new SecAggException(REFUSED + "a noise share is " + grid.noiseSteps + " grid steps, "
          + "under 4: raise dp_noise_multiplier or use fewer devices per round");
    }
    if (grid.roundingRoom() > MAX_ROUNDING_SHARE * clipNorm) {
      throw new SecAggException(REFUSED + "rounding " + setup.dimension + " coordinates can add "
          + grid.roundingRoom() + " to a norm, over 0.5 of dp_clip_norm: use fewer devices per "
          + "round or a lower dp_noise_multiplier");
    }
    return grid;
  }

  /** The most rounding can add to a change's norm (1e-5 over: float64's own error). */
  public double roundingRoom() {
    return Math.sqrt(dimension) * step / 2 * (1 + 1e-5);
  }

  /** In place: the change clipped to {@code C - room}, as grid levels (whole numbers). */
  public void round(double[] change) {
    double squared = 0;
    for (double v : change) {
      squared += v * v;
    }
    double norm = Math.sqrt(squared);
    double fits = clipNorm - roundingRoom();
    double scale = norm > fits ? fits / norm : 1;
    for (int i = 0; i < change.length; i++) {
      change[i] = Math.rint((change[i] * scale + offset) / step);
    }
  }

  /**
   * In place: the rounded change plus a discrete Gaussian share, as values on the grid. The
   * draws must come from randomness the server cannot know (the device passes SecureRandom).
   */
  public void privatize(double[] change, Random random) {
    round(change);
    for (int i = 0; i < change.length; i++) {
      change[i] = (change[i] + discreteGaussian(noiseSteps, random)) * step - offset;
    }
  }

  /**
   * An integer y with P(y) proportional to exp(-y^2 / (2 sigma^2)): Canonne, Kamath and
   * Steinke 2020 (Algorithm 3), as Python's {@code discrete_gaussian}: a discrete Laplace of
   * scale floor(sigma) + 1 (a difference of two geometrics), kept with probability
   * exp(-(|y| - sigma^2 / scale)^2 / (2 sigma^2)).
   */
  public static long discreteGaussian(double sigma, Random random) {
    double scale = Math.floor(sigma) + 1;
    while (true) {
      long y = geometric(scale, random) - geometric(scale, random);
      double gap = Math.abs((double) y) - sigma * sigma / scale;
      if (random.nextDouble() < Math.exp(-gap * gap / (2 * sigma * sigma))) {
        return y;
      }
    }
  }

  /** k >= 0 with P(k) proportional to exp(-k / scale). */
  private static long geometric(double scale, Random random) {
    return (long) Math.floor(-scale * Math.log(1 - random.nextDouble()));  // U in (0, 1]
  }
}
