package org.pflkit.core.fl;

/** What one {@link FederatedClient#step} did. */
public final class StepResult {
  /** Uploaded this call (possibly a resumed upload). */
  public static final String TRAINED = "trained";
  /** Trained, but the round closed before the upload arrived (the state is kept). */
  public static final String LATE = "late";
  /** Training gave NaN or Inf: nothing was uploaded and the private state was kept. */
  public static final String DIVERGED = "diverged";

  /**
   * {@link #TRAINED}, {@link #LATE}, {@link #DIVERGED}, or the task's status when nothing was
   * uploaded.
   */
  public final String status;
  public final double retryAfterSeconds;
  /** The round concerned, or null. */
  public final Long round;
  /** True when the server already had these exact bytes (a resumed upload, counted once). */
  public final boolean duplicate;

  StepResult(String status, double retryAfterSeconds, Long round, boolean duplicate) {
    this.status = status;
    this.retryAfterSeconds = retryAfterSeconds;
    this.round = round;
    this.duplicate = duplicate;
  }

  /** The run is over: stop polling. */
  public boolean runEnded() {
    return Wire.FINISHED.equals(status) || Wire.STOPPED.equals(status);
  }

  @Override
  public String toString() {
    return status + (round == null ? "" : " round " + round) + (duplicate ? " (duplicate)" : "");
  }
}
