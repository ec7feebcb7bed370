package org.pflkit.core;

import java.io.IOException;
import java.io.InputStream;
import java.security.MessageDigest;
import java.security.NoSuchAlgorithmException;

/** SHA-256 as lowercase hex: model files against their card, global states against their hash. */
public final class Sha256 {
  /** Digest and length of what was hashed. */
  public final String hex;
  public final long bytes;

  private Sha256(String hex, long bytes) {
    this.hex = hex;
    this.bytes = bytes;
  }

  /** Hash a stream to its end. */
  public static Sha256 of(InputStream in) throws IOException {
    MessageDigest sha = newDigest();
    byte[] buffer = new byte[1 << 16];
    long size = 0;
    for (int n = in.read(buffer); n >= 0; n = in.read(buffer)) {
      sha.update(buffer, 0, n);
      size += n;
    }
    return new Sha256(toHex(sha.digest()), size);
  }

  /** The hex digest of {@code data}. */
  public static String hex(byte[] data) {
    return toHex(newDigest().digest(data));
  }

  private static MessageDigest newDigest() {
    try {
      return MessageDigest.getInstance("SHA-256");
    } catch (NoSuchAlgorithmException e) {
      throw new IllegalStateException("this Java runtime has no SHA-256", e);
    }
  }

  private static String toHex(byte[] digest) {
    StringBuilder hex = new StringBuilder(64);
    for (byte b : digest) {
      hex.append(Character.forDigit((b >> 4) & 0xF, 16)).append(Character.forDigit(b & 0xF, 16));
    }
    return hex.toString();
  }
}
