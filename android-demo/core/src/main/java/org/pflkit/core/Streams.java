package org.pflkit.core;

import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.io.InputStream;

/** Reading a whole stream (files, HTTP bodies) without a Java 9 {@code readAllBytes}. */
public final class Streams {
  private Streams() {}

  /** Everything left in {@code in}; closes it. */
  public static byte[] readAll(InputStream in) throws IOException {
    return readAtMost(in, Integer.MAX_VALUE);  // a byte[] holds no more anyway
  }

  /** Everything left in {@code in} if it is at most {@code limit} bytes, else null; closes it. */
  public static byte[] readAtMost(InputStream in, int limit) throws IOException {
    try {
      ByteArrayOutputStream out = new ByteArrayOutputStream();
      byte[] buffer = new byte[1 << 16];
      long total = 0;
      for (int n = in.read(buffer); n >= 0; n = in.read(buffer)) {
        total += n;
        if (total > limit) {
          return null;
        }
        out.write(buffer, 0, n);
      }
      return out.toByteArray();
    } finally {
      in.close();
    }
  }
}
