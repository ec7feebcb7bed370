package org.pflkit.core.secagg;

import java.math.BigInteger;
import java.security.GeneralSecurityException;
import java.security.KeyFactory;
import java.security.KeyPair;
import java.security.KeyPairGenerator;
import java.security.PublicKey;
import java.security.spec.PKCS8EncodedKeySpec;
import java.security.spec.X509EncodedKeySpec;
import java.util.Arrays;
import javax.crypto.KeyAgreement;

/**
 * X25519 with raw 32-byte keys as Python's {@code cryptography} writes them. The JCA ("XDH",
 * Java 11+, Conscrypt on Android 12+) speaks X.509 / PKCS#8, so raw keys travel inside fixed
 * DER prefixes (RFC 8410); the main sources build against Java 8's API, hence no XECPublicKeySpec.
 */
public final class X25519 {
  public static final int KEY_BYTES = 32;
  /** Curve25519's field: a canonical u-coordinate is below it. */
  private static final BigInteger FIELD_PRIME = BigInteger.ONE.shiftLeft(255)
      .subtract(BigInteger.valueOf(19));
  private static final byte[] PUBLIC_PREFIX = hex("302a300506032b656e032100");
  private static final byte[] PRIVATE_PREFIX = hex("302e020100300506032b656e04220420");

  private final KeyPair pair;

  private X25519(KeyPair pair) {
    this.pair = pair;
  }

  /** A fresh key pair. */
  public static X25519 generate() {
    try {
      return new X25519(KeyPairGenerator.getInstance("X25519").generateKeyPair());
    } catch (GeneralSecurityException e) {
      throw new IllegalStateException("X25519 is not available: " + e.getMessage(), e);
    }
  }

  /** The raw 32-byte public key. */
  public byte[] publicBytes() {
    return tail(pair.getPublic().getEncoded(), PUBLIC_PREFIX.length);
  }

  /** The raw 32-byte private key (what this device's neighbours hold shares of). */
  public byte[] privateBytes() {
    return tail(pair.getPrivate().getEncoded(), PRIVATE_PREFIX.length);
  }

  /**
   * The X25519 shared secret with {@code peer}'s raw public key. SecAggException for a key that
   * is not in its canonical encoding or is low-order: the all-zero secret, which OpenJDK refuses
   * itself and which is checked here for providers that might not.
   */
  public byte[] exchange(byte[] peer) {
    try {
      KeyAgreement agreement = KeyAgreement.getInstance("X25519");
      agreement.init(pair.getPrivate());
      agreement.doPhase(publicKey(check(peer)), true);
      byte[] secret = agreement.generateSecret();
      if (Arrays.equals(secret, new byte[secret.length])) {
        throw new SecAggException("not a usable X25519 public key: a low-order point");
      }
      return secret;
    } catch (GeneralSecurityException e) {
      throw new SecAggException("not a usable X25519 public key: " + e.getMessage());
    }
  }

  private static PublicKey publicKey(byte[] raw) throws GeneralSecurityException {
    return KeyFactory.getInstance("X25519").generatePublic(
        new X509EncodedKeySpec(concat(PUBLIC_PREFIX, raw)));
  }

  /**
   * {@code raw} if it is 32 bytes in a point's one encoding. The JCA, as RFC 7748 says, ignores
   * the top bit and reduces values >= 2^255 - 19, so another spelling of a point would slip
   * past a check that compares bytes (a key reused, or one device's key handed out for two).
   */
  private static byte[] check(byte[] raw) {
    if (raw == null || raw.length != KEY_BYTES) {
      throw new SecAggException("an X25519 key is " + KEY_BYTES + " bytes");
    }
    byte[] bigEndian = new byte[KEY_BYTES];
    for (int i = 0; i < KEY_BYTES; i++) {
      bigEndian[i] = raw[KEY_BYTES - 1 - i];
    }
    if (new BigInteger(1, bigEndian).compareTo(FIELD_PRIME) >= 0) {
      throw new SecAggException("an X25519 public key must be a canonical encoding (below "
          + "2^255 - 19)");
    }
    return raw;
  }

  private static byte[] tail(byte[] der, int prefix) {
    if (der.length != prefix + KEY_BYTES) {
      throw new IllegalStateException("unexpected X25519 key encoding of " + der.length
          + " bytes");
    }
    return Arrays.copyOfRange(der, prefix, der.length);
  }

  static byte[] concat(byte[] a, byte[] b) {
    byte[] out = Arrays.copyOf(a, a.length + b.length);
    System.arraycopy(b, 0, out, a.length, b.length);
    return out;
  }

  static byte[] hex(String text) {
    byte[] out = new byte[text.length() / 2];
    for (int i = 0; i < out.length; i++) {
      out[i] = (byte) Integer.parseInt(text.substring(2 * i, 2 * i + 2), 16);
    }
    return out;
  }
}
