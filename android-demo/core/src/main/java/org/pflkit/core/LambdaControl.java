package org.pflkit.core;

/**
 * Runtime lambda for SuPerFed models exported with {@code --lambda runtime}: maps a slider
 * position to a lambda in the card's range and back, and builds the {@code lam} input.
 *
 * <p>Lambda is the mixing weight of the personalized model
 * {@code (1 - lambda) * w_federated + lambda * w_local}: 0 is the federated model, 1 the purely
 * local one. Values outside the card's range are refused rather than clamped, so a bug in the
 * caller is not silently turned into a different model.
 */
public final class LambdaControl {
  private final float min;
  private final float max;
  private final float initial;

  /** The control for a card; throws when the card has no runtime lambda input. */
  public LambdaControl(ModelCard card) {
    float[] range = card.lambdaRange();
    this.min = range[0];
    this.max = range[1];
    float verified = card.verifiedLambda;
    this.initial = verified >= min && verified <= max ? verified : (min + max) / 2f;
  }

  public float min() {
    return min;
  }

  public float max() {
    return max;
  }

  /**
   * Where the slider starts: the lambda the export was verified with (the client's chosen
   * one), else the middle of the range.
   */
  public float initial() {
    return initial;
  }

  /**
   * Slider position {@code 0..steps} to lambda; the ends are the range's ends exactly (float
   * rounding of {@code min + (max - min)} can land past {@code max}, which {@link #input}
   * would refuse).
   */
  public float fromSlider(int position, int steps) {
    if (steps < 1 || position < 0 || position > steps) {
      throw new IllegalArgumentException("slider position " + position + " outside 0.." + steps);
    }
    return position == steps ? max : Math.min(max, min + (max - min) * position / steps);
  }

  /** Lambda to the nearest slider position {@code 0..steps}. */
  public int toSlider(float lambda, int steps) {
    check(lambda);
    return max == min ? 0 : Math.round((lambda - min) / (max - min) * steps);
  }

  /** The {@code lam} input tensor's data (shape [1]). */
  public float[] input(float lambda) {
    check(lambda);
    return new float[] {lambda};
  }

  private void check(float lambda) {
    if (!(lambda >= min && lambda <= max)) {
      throw new IllegalArgumentException("lambda " + lambda + " outside the model's range ["
          + min + ", " + max + "]");
    }
  }
}
