package org.pflkit.core.fl;

import java.util.Random;

/**
 * When to try again: capped exponential backoff with jitter, {@code delay_k = min(cap, base 2^k)
 * * U(0.5, 1.5)} (the Python SDK's rule), except that a server's {@code Retry-After} of seconds
 * in [0, 3600] is honoured as given. The whole request gives up after {@code maxElapsed}.
 */
public final class RetryPolicy {
  public final long baseMillis;
  public final long capMillis;
  public final long maxElapsedMillis;

  public RetryPolicy(long baseMillis, long capMillis, long maxElapsedMillis) {
    if (baseMillis <= 0 || capMillis < baseMillis || maxElapsedMillis < 0) {
      throw new IllegalArgumentException("need 0 < base <= cap and maxElapsed >= 0");
    }
    this.baseMillis = baseMillis;
    this.capMillis = capMillis;
    this.maxElapsedMillis = maxElapsedMillis;
  }

  /** The Python SDK's defaults: 0.2 s base, 10 s cap, give up after 10 minutes. */
  public static RetryPolicy defaults() {
    return new RetryPolicy(200, 10_000, 600_000);
  }

  /** Backoff before retry number {@code attempt} (0 = the first retry). */
  public long backoffMillis(int attempt, Random jitter) {
    double exp = baseMillis * Math.pow(2, Math.min(attempt, 62));
    return Math.round(Math.min(capMillis, exp) * (0.5 + jitter.nextDouble()));
  }

  /**
   * The wait a {@code Retry-After} value asks for: seconds in [0, {@link Task#MAX_RETRY_AFTER}]
   * (pfl-server may send a fraction); -1 when absent, out of that range or an HTTP date (then
   * the backoff applies), the Python SDK's rule. A date is not honoured: on a phone whose
   * clock is off it would ask for a wait of hours, or none.
   */
  public static long retryAfterMillis(String value) {
    if (value == null || !value.trim().matches("\\+?(\\d+\\.?\\d*|\\.\\d+)([eE][+-]?\\d+)?")) {
      return -1;
    }
    double seconds = Double.parseDouble(value.trim());
    return seconds <= Task.MAX_RETRY_AFTER ? Math.round(seconds * 1000) : -1;
  }
}
