package org.pflkit.core.secagg;

import java.math.BigInteger;
import java.security.SecureRandom;
import java.util.Map;

/**
 * Shamir t-of-K sharing over GF(2^521 - 1), shares at x = 1..K as 66-byte big-endian field
 * elements: Python's {@code pflkit.sdk.secagg.shamir}, so the server recovers what Java shared.
 */
public final class Shamir {
  public static final BigInteger PRIME = BigInteger.ONE.shiftLeft(521).subtract(BigInteger.ONE);
  public static final int SHARE_BYTES = 66;
  private static final SecureRandom RANDOM = new SecureRandom();

  private Shamir() {}

  /** {@code count} shares of {@code secret}; any {@code threshold} of them recover it. */
  public static byte[][] split(byte[] secret, int threshold, int count) {
    if (threshold < 1 || threshold > count || secret.length >= SHARE_BYTES) {
      throw new IllegalArgumentException("need 1 <= threshold <= count and a secret under "
          + SHARE_BYTES + " bytes");
    }
    BigInteger[] coeffs = new BigInteger[threshold];
    coeffs[0] = new BigInteger(1, secret);
    for (int i = 1; i < threshold; i++) {
      BigInteger c;
      do {
        c = new BigInteger(521, RANDOM);
      } while (c.compareTo(PRIME) >= 0);
      coeffs[i] = c;
    }
    byte[][] shares = new byte[count][];
    for (int x = 1; x <= count; x++) {
      BigInteger y = BigInteger.ZERO;
      BigInteger bx = BigInteger.valueOf(x);
      for (int i = threshold - 1; i >= 0; i--) { // Horner
        y = y.multiply(bx).add(coeffs[i]).mod(PRIME);
      }
      shares[x - 1] = fixed(y, SHARE_BYTES);
    }
    return shares;
  }

  /** The {@code length}-byte secret through {@code {x: share}} at x = 0. */
  public static byte[] combine(Map<Integer, byte[]> points, int length) {
    BigInteger secret = BigInteger.ZERO;
    for (Map.Entry<Integer, byte[]> i : points.entrySet()) {
      BigInteger xi = BigInteger.valueOf(i.getKey());
      BigInteger num = BigInteger.ONE;
      BigInteger den = BigInteger.ONE;
      for (Integer j : points.keySet()) {
        if (!j.equals(i.getKey())) {
          num = num.multiply(BigInteger.valueOf(j)).mod(PRIME);
          den = den.multiply(BigInteger.valueOf(j).subtract(xi)).mod(PRIME);
        }
      }
      BigInteger yi = new BigInteger(1, i.getValue());
      if (i.getValue().length != SHARE_BYTES || yi.compareTo(PRIME) >= 0 || i.getKey() < 1) {
        throw new IllegalArgumentException("a share is a " + SHARE_BYTES
            + "-byte field element at x >= 1");
      }
      secret = secret.add(yi.multiply(num).multiply(den.modInverse(PRIME))).mod(PRIME);
    }
    return fixed(secret, length);
  }

  /** {@code value} as exactly {@code length} big-endian bytes. */
  private static byte[] fixed(BigInteger value, int length) {
    byte[] raw = value.toByteArray();
    int start = raw.length > 1 && raw[0] == 0 ? 1 : 0;
    int size = raw.length - start;
    if (size > length) {
      throw new IllegalArgumentException("the shares do not recover a " + length
          + "-byte secret");
    }
    byte[] out = new byte[length];
    System.arraycopy(raw, start, out, length - size, size);
    return out;
  }
}
