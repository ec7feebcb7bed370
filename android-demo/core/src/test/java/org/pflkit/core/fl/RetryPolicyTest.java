package org.pflkit.core.fl;

import static org.junit.Assert.assertEquals;
import static org.junit.Assert.assertTrue;
import static org.junit.Assert.fail;

import org.junit.Test;

/**
 * The waits' own inputs: a server's {@code Retry-After}, an app's retry policy and transport
 * timeouts, each in its documented range.
 */
public class RetryPolicyTest {
  /** The Python SDK's transport.retry_after grammar: the same values honoured, the same not. */
  @Test
  public void retryAfterReadsThePythonSdksGrammar() {
    String[][] honoured = {{"10", "10000"}, {"+10", "10000"}, {"1.", "1000"}, {".5", "500"},
        {"1e2", "100000"}, {"1.5E+1", "15000"}, {" 3600 ", "3600000"}, {"1e-400", "0"},
        {"0".repeat(60) + "1.5", "1500"}};
    for (String[] pair : honoured) {
      assertEquals(pair[0], Long.parseLong(pair[1]), RetryPolicy.retryAfterMillis(pair[0]));
    }
    for (String refused : new String[] {"-0", "1_0", "nan", "Infinity", ".", "", "1e", "0x10",
        "++1", "1.2.3", "3601", "1e300", "\u0661", "Wed, 21 Oct 2015 07:28:00 GMT"}) {
      assertEquals(refused, -1, RetryPolicy.retryAfterMillis(refused));
    }
  }

  /**
   * A hostile 64 KiB header of digits is refused unread: the old pattern's {@code \d+\.?\d*}
   * tried every split of the digits (about 3 s at 16 KiB, quadratic in the length, so about
   * 50 s here). The timeout is a hang guard far above the microseconds this takes.
   */
  @Test(timeout = 10_000)
  public void aLongRetryAfterIsRefusedUnread() {
    String digits = "1".repeat(64 * 1024);
    assertEquals(-1, RetryPolicy.retryAfterMillis(digits + "x"));
    assertEquals(-1, RetryPolicy.retryAfterMillis(digits));  // not read: over 64 characters
    assertEquals(5000, RetryPolicy.retryAfterMillis("0".repeat(63) + "5"));  // 64: read
  }

  /** The Python SDK's RetryPolicy ranges: base and cap (0, 1 h], max_elapsed [0, 1 week]. */
  @Test
  public void aPolicyOutsideItsRangesIsRefusedInOneLine() {
    long[][] bad = {{0, 1, 0}, {-1, 1, 0}, {3_600_001, 3_600_001, 0}, {10, 5, 0},
        {1, Long.MAX_VALUE, 0}, {1, 3_600_001, 0}, {1, 1, -1}, {1, 1, 604_800_001}};
    for (long[] args : bad) {
      try {
        new RetryPolicy(args[0], args[1], args[2]);
        fail("accepted " + java.util.Arrays.toString(args));
      } catch (IllegalArgumentException e) {
        assertTrue(e.getMessage(), e.getMessage().matches("RetryPolicy: \\w+Millis must be in "
            + "[\\[(][0a-zA-Z]+, \\d+\\], found -?\\d+"));
      }
    }
    RetryPolicy widest = new RetryPolicy(3_600_000, 3_600_000, 604_800_000);
    assertEquals(3_600_000, widest.capMillis);
    assertEquals(0, new RetryPolicy(1, 1, 0).maxElapsedMillis);
  }

  /**
   * A timeout outside 1..3600000 ms is refused when the transport is made, in one line naming
   * it (a negative one failed each request later; 0 made HttpURLConnection wait for ever).
   */
  @Test
  public void aTransportTimeoutOutsideItsRangeIsRefusedAtOnce() {
    int[][] bad = {{-1, 1000}, {0, 1000}, {1000, 0}, {1000, -5}, {3_600_001, 1000},
        {1000, Integer.MAX_VALUE}};
    for (int[] args : bad) {
      try {
        new UrlConnectionTransport(args[0], args[1]);
        fail("accepted " + java.util.Arrays.toString(args));
      } catch (IllegalArgumentException e) {
        assertTrue(e.getMessage(), e.getMessage().matches(
            "(connect|read)TimeoutMillis must be in 1\\.\\.3600000, found -?\\d+"));
      }
    }
    assertEquals(3_600_000 + 1000, new UrlConnectionTransport(1, 3_600_000, 65_536, 0)
        .deadlineMillis(0));
  }
}
