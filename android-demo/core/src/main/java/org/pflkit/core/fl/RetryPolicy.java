package org.pflkit.core.fl;

import java.text.ParseException;
import java.text.SimpleDateFormat;
import java.util.Locale;
import java.util.Random;
import java.util.TimeZone;

/**
 * When to try again: capped exponential backoff with jitter, {@code delay_k = min(cap, base 2^k)
 * * U(0.5, 1.5)} (the Python SDK's rule), except that a server's {@code Retry-After} is honoured
 * as given. The whole request gives up after {@code maxElapsed}.
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
   * The wait a {@code Retry-After} value asks for: seconds (pfl-server may send a fraction) or
   * an HTTP date (RFC 9110); -1 when absent or unreadable (then the backoff applies).
   */
  public static long retryAfterMillis(String value, long nowMillis) {
    if (value == null) {
      return -1;
    }
    String v = value.trim();
    if (v.matches("\\d{1,9}(\\.\\d*)?")) {
      return Math.round(Double.parseDouble(v) * 1000);
    }
    SimpleDateFormat http = new SimpleDateFormat("EEE, dd MMM yyyy HH:mm:ss zzz", Locale.US);
    http.setTimeZone(TimeZone.getTimeZone("GMT"));
    try {
      return Math.max(0, http.parse(v).getTime() - nowMillis);
    } catch (ParseException e) {
      return -1;
    }
  }
}
