package org.pflkit.core.fl;

import java.util.Random;
import java.util.regex.Pattern;

/**
 * When to try again: capped exponential backoff with jitter, {@code delay_k = min(cap, base 2^k)
 * * U(0.5, 1.5)} (the Python SDK's rule), except that a server's {@code Retry-After} of seconds
 * in [0, 3600] is honoured as given. The whole request gives up after {@code maxElapsed}.
 */
public final class RetryPolicy {
  /** The longest single wait, {@code baseMillis} and {@code capMillis}'s upper end: an hour. */
  public static final long MAX_WAIT_MILLIS = (long) Task.MAX_RETRY_AFTER * 1000;
  /** {@code maxElapsedMillis}'s upper end: a week (the Python SDK's RetryPolicy ranges). */
  public static final long MAX_ELAPSED_MILLIS = 604_800_000L;
  /**
   * The longest {@code Retry-After} value read: a wait in [0, 3600] seconds needs far fewer
   * characters, and a hostile header of megabytes is not scanned.
   */
  static final int MAX_RETRY_AFTER_CHARS = 64;
  /** Seconds as the Python SDK reads them: 10, +10, 1., .5, 1e2; each digit read once. */
  private static final Pattern SECONDS =
      Pattern.compile("\\+?(\\d+(\\.\\d*)?|\\.\\d+)([eE][+-]?\\d+)?");

  public final long baseMillis;
  public final long capMillis;
  public final long maxElapsedMillis;

  /**
   * {@code baseMillis} in (0, 3600000], {@code capMillis} in [baseMillis, 3600000] and
   * {@code maxElapsedMillis} in [0, 604800000] (a week); anything else is refused in one line.
   */
  public RetryPolicy(long baseMillis, long capMillis, long maxElapsedMillis) {
    if (baseMillis <= 0 || baseMillis > MAX_WAIT_MILLIS) {
      throw new IllegalArgumentException("RetryPolicy: baseMillis must be in (0, "
          + MAX_WAIT_MILLIS + "], found " + baseMillis);
    }
    if (capMillis < baseMillis || capMillis > MAX_WAIT_MILLIS) {
      throw new IllegalArgumentException("RetryPolicy: capMillis must be in [baseMillis, "
          + MAX_WAIT_MILLIS + "], found " + capMillis);
    }
    if (maxElapsedMillis < 0 || maxElapsedMillis > MAX_ELAPSED_MILLIS) {
      throw new IllegalArgumentException("RetryPolicy: maxElapsedMillis must be in [0, "
          + MAX_ELAPSED_MILLIS + "], found " + maxElapsedMillis);
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
   * clock is off it would ask for a wait of hours, or none. A value over 64 characters is not
   * read (its time to check stays bounded whatever a server sends).
   */
  public static long retryAfterMillis(String value) {
    if (value == null || value.length() > MAX_RETRY_AFTER_CHARS
        || !SECONDS.matcher(value.trim()).matches()) {
      return -1;
    }
    double seconds = Double.parseDouble(value.trim());
    return seconds <= Task.MAX_RETRY_AFTER ? Math.round(seconds * 1000) : -1;
  }
}
