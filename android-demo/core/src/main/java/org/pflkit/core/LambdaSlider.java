package org.pflkit.core;

/**
 * The lambda a runtime-lambda model runs with, bound to a slider of {@code steps} positions.
 *
 * <p>The slider only has a 1/steps grid, but the value starts exactly at the verified lambda
 * (the client's chosen one, e.g. 0.137): placing the slider there must not round the model's
 * input to 0.14. Only a move by the user replaces the value.
 */
public final class LambdaSlider {
  private final LambdaControl control;
  private final int steps;
  private volatile float value;

  public LambdaSlider(LambdaControl control, int steps) {
    if (steps < 1) {
      throw new IllegalArgumentException("steps must be >= 1");
    }
    this.control = control;
    this.steps = steps;
    this.value = control.initial();
  }

  /** The lambda to run the model with. */
  public float value() {
    return value;
  }

  /** Where the slider shows the current value. */
  public int position() {
    return control.toSlider(value, steps);
  }

  public int steps() {
    return steps;
  }

  /**
   * The slider reports {@code position}; returns true when the value changed (run the model
   * again). Programmatic moves ({@code fromUser} false) never change it.
   */
  public boolean onProgress(int position, boolean fromUser) {
    if (!fromUser) {
      return false;
    }
    float next = control.fromSlider(position, steps);
    boolean changed = next != value;
    value = next;
    return changed;
  }
}
