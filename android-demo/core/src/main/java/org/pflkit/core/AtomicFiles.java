package org.pflkit.core;

import java.io.ByteArrayInputStream;
import java.io.File;
import java.io.FileInputStream;
import java.io.FileOutputStream;
import java.io.IOException;
import java.io.InputStream;
import java.nio.channels.FileChannel;
import java.nio.file.StandardOpenOption;

/**
 * Durable file replacement (temp file in the same folder, fsync, rename, fsync the folder): a
 * crash or an app kill leaves the old file or the new one, never a torn one. Used for every
 * file the app and the federated client keep (java.nio.file needs Android API 26, the app's
 * minSdk).
 */
public final class AtomicFiles {
  private AtomicFiles() {}

  /** Replace {@code target} with {@code data}. */
  public static void write(File target, byte[] data) throws IOException {
    copy(new ByteArrayInputStream(data), target, false);
  }

  /** Like {@link #write}, readable and writable by the owner only from the first byte on. */
  public static void writePrivate(File target, byte[] data) throws IOException {
    copy(new ByteArrayInputStream(data), target, true);
  }

  /** Copy a stream into {@code target} atomically; returns the number of bytes. */
  public static long copy(InputStream in, File target) throws IOException {
    return copy(in, target, false);
  }

  private static long copy(InputStream in, File target, boolean ownerOnly) throws IOException {
    File dir = parentOf(target);
    File tmp = File.createTempFile("." + target.getName() + ".", ".tmp", dir);
    long total = 0;
    try {
      if (ownerOnly && !(tmp.setReadable(false, false) && tmp.setReadable(true, true)
          && tmp.setWritable(false, false) && tmp.setWritable(true, true))) {
        throw new IOException("cannot make " + tmp + " private");
      }
      FileOutputStream out = new FileOutputStream(tmp);
      try {
        byte[] buffer = new byte[1 << 16];
        for (int n = in.read(buffer); n >= 0; n = in.read(buffer)) {
          out.write(buffer, 0, n);
          total += n;
        }
        out.flush();
        out.getFD().sync();
      } finally {
        out.close();
      }
      rename(tmp, target);
    } finally {
      if (tmp.exists() && !tmp.delete()) {
        tmp.deleteOnExit();
      }
    }
    return total;
  }

  /** Rename within one folder (atomic on POSIX file systems), then fsync the folder. */
  public static void rename(File from, File to) throws IOException {
    if (!from.renameTo(to)) {
      throw new IOException("could not rename " + from + " to " + to);
    }
    syncDirectory(parentOf(to));
  }

  /** The whole file, or null when it does not exist. */
  public static byte[] readOrNull(File file) throws IOException {
    if (!file.isFile()) {
      return null;
    }
    return Streams.readAll(new FileInputStream(file));
  }

  /** Delete a file durably (no-op when it is absent). */
  public static void delete(File file) throws IOException {
    if (file.exists() && !file.delete()) {
      throw new IOException("could not delete " + file);
    }
    syncDirectory(parentOf(file));
  }

  /** Make a rename or delete in {@code dir} durable; best effort where folders cannot sync. */
  static void syncDirectory(File dir) {
    try {
      FileChannel channel = FileChannel.open(dir.toPath(), StandardOpenOption.READ);
      try {
        channel.force(true);
      } finally {
        channel.close();
      }
    } catch (IOException e) {
      // some file systems refuse fsync on a directory; the rename itself is still atomic
    }
  }

  private static File parentOf(File file) throws IOException {
    File dir = file.getAbsoluteFile().getParentFile();
    if (dir == null || (!dir.isDirectory() && !dir.mkdirs())) {
      throw new IOException("cannot create the folder of " + file);
    }
    return dir;
  }
}
