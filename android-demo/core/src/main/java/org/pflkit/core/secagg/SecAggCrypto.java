package org.pflkit.core.secagg;

import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.charset.StandardCharsets;
import java.security.GeneralSecurityException;
import java.security.SecureRandom;
import javax.crypto.Cipher;
import javax.crypto.Mac;
import javax.crypto.spec.GCMParameterSpec;
import javax.crypto.spec.IvParameterSpec;
import javax.crypto.spec.SecretKeySpec;

/**
 * Key agreement (HKDF-SHA256 of the X25519 secret), share envelopes (AES-GCM bound to round,
 * sender and receiver) and the mask PRG (AES-128-CTR): byte for byte Python's
 * {@code pflkit.sdk.secagg.crypto}.
 */
public final class SecAggCrypto {
  public static final int SEED_BYTES = 16;
  public static final int NONCE_BYTES = 12;
  public static final int TAG_BYTES = 16;
  private static final SecureRandom RANDOM = new SecureRandom();

  private SecAggCrypto() {}

  /** A {@code length}-byte key both ends derive alike, for {@code purpose} in this round. */
  public static byte[] agree(X25519 key, byte[] peer, String purpose, long roundId, int length) {
    byte[] info = ByteBuffer.allocate(14 + purpose.length() + 8)
        .put(ascii("pflkit-secagg/")).put(ascii(purpose)).putLong(roundId).array();
    return hkdf(key.exchange(peer), info, length);
  }

  /** HKDF-SHA256 (RFC 5869) with no salt, as {@code HKDF(salt=None)}: a zero salt. */
  static byte[] hkdf(byte[] secret, byte[] info, int length) {
    byte[] prk = hmac(new byte[32], secret);
    byte[] out = new byte[length];
    byte[] block = new byte[0];
    for (int done = 0, i = 1; done < length; i++) {
      byte[] input = X25519.concat(X25519.concat(block, info), new byte[] {(byte) i});
      block = hmac(prk, input);
      int n = Math.min(block.length, length - done);
      System.arraycopy(block, 0, out, done, n);
      done += n;
    }
    return out;
  }

  /** {@code nonce || AES-GCM(plaintext)} bound to (round, sender, receiver). */
  public static byte[] seal(byte[] key, long roundId, long sender, long receiver,
      byte[] plaintext) {
    byte[] nonce = random(NONCE_BYTES);
    return X25519.concat(nonce, gcm(Cipher.ENCRYPT_MODE, key, nonce,
        associated(roundId, sender, receiver), plaintext));
  }

  /** The plaintext of {@link #seal}; SecAggException unless sealed for exactly this. */
  public static byte[] open(byte[] key, long roundId, long sender, long receiver, byte[] blob) {
    try {
      if (blob.length < NONCE_BYTES + TAG_BYTES) {
        throw new GeneralSecurityException("too short");
      }
      Cipher cipher = Cipher.getInstance("AES/GCM/NoPadding");
      cipher.init(Cipher.DECRYPT_MODE, new SecretKeySpec(key, "AES"),
          new GCMParameterSpec(8 * TAG_BYTES, blob, 0, NONCE_BYTES));
      cipher.updateAAD(associated(roundId, sender, receiver));
      return cipher.doFinal(blob, NONCE_BYTES, blob.length - NONCE_BYTES);
    } catch (GeneralSecurityException e) {
      throw new SecAggException("round " + roundId + ": the share from client " + sender
          + " fails authentication (wrong peer, another round, or altered)");
    }
  }

  /** {@code count} pseudorandom uint32s (as ints): AES-128-CTR keyed by {@code seed} over zeros. */
  public static int[] prg(byte[] seed, int count) {
    try {
      Cipher cipher = Cipher.getInstance("AES/CTR/NoPadding");
      cipher.init(Cipher.ENCRYPT_MODE, new SecretKeySpec(seed, "AES"),
          new IvParameterSpec(new byte[16]));
      byte[] stream = cipher.doFinal(new byte[4 * count]);
      int[] out = new int[count];
      ByteBuffer.wrap(stream).order(ByteOrder.LITTLE_ENDIAN).asIntBuffer().get(out);
      return out;
    } catch (GeneralSecurityException e) {
      throw new IllegalStateException("AES-CTR is not available: " + e.getMessage(), e);
    }
  }

  /** {@code total += sign * prg(seed)} modulo 2^32, in place ({@code sign} is +1 or -1). */
  public static void addMask(int[] total, byte[] seed, int sign) {
    int[] mask = prg(seed, total.length);
    for (int i = 0; i < total.length; i++) {
      total[i] += sign > 0 ? mask[i] : -mask[i];
    }
  }

  static byte[] random(int length) {
    byte[] out = new byte[length];
    RANDOM.nextBytes(out);
    return out;
  }

  private static byte[] associated(long roundId, long sender, long receiver) {
    return ByteBuffer.allocate(19 + 24).put(ascii("pflkit-secagg/share"))
        .putLong(roundId).putLong(sender).putLong(receiver).array();
  }

  private static byte[] gcm(int mode, byte[] key, byte[] nonce, byte[] aad, byte[] data) {
    try {
      Cipher cipher = Cipher.getInstance("AES/GCM/NoPadding");
      cipher.init(mode, new SecretKeySpec(key, "AES"), new GCMParameterSpec(8 * TAG_BYTES, nonce));
      cipher.updateAAD(aad);
      return cipher.doFinal(data);
    } catch (GeneralSecurityException e) {
      throw new IllegalStateException("AES-GCM is not available: " + e.getMessage(), e);
    }
  }

  private static byte[] hmac(byte[] key, byte[] data) {
    try {
      Mac mac = Mac.getInstance("HmacSHA256");
      mac.init(new SecretKeySpec(key, "HmacSHA256"));
      return mac.doFinal(data);
    } catch (GeneralSecurityException e) {
      throw new IllegalStateException("HMAC-SHA256 is not available: " + e.getMessage(), e);
    }
  }

  private static byte[] ascii(String text) {
    return text.getBytes(StandardCharsets.US_ASCII);
  }
}
