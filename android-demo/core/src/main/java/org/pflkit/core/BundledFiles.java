package org.pflkit.core;

import java.io.File;
import java.io.IOException;
import java.io.InputStream;
import java.nio.charset.Charset;
import java.util.List;

/**
 * Installs files bundled with the app (its {@code assets/model/}) into a folder once, atomically:
 * everything is copied into a fresh temporary folder, a stamp naming what was installed is
 * written last, and the folder is renamed into place. A later start with the same bundle finds
 * the stamp and copies nothing; a start interrupted mid-copy (a kill, a rotation) leaves no
 * half-installed folder, so a model file is never checked against its card while still being
 * written.
 */
public final class BundledFiles {
  static final String STAMP = ".installed";
  private static final Object LOCK = new Object();

  private BundledFiles() {}

  /** Where the bundled files come from (the APK's assets on Android). */
  public interface Source {
    /** The bundled file names. */
    List<String> names() throws IOException;

    InputStream open(String name) throws IOException;

    /** Identifies this bundle (e.g. the app's version code): another value reinstalls. */
    String version();
  }

  /**
   * Make {@code target} hold exactly the bundle; returns true when it copied, false when the
   * same bundle was already installed. Safe to call from several threads.
   */
  public static boolean install(Source source, File target) throws IOException {
    synchronized (LOCK) {
      String stamp = stamp(source);
      byte[] installed = AtomicFiles.readOrNull(new File(target, STAMP));
      if (installed != null && new String(installed, utf8()).equals(stamp)) {
        return false;
      }
      File parent = target.getAbsoluteFile().getParentFile();
      File fresh = new File(parent, target.getName() + ".installing");
      File old = new File(parent, target.getName() + ".old");
      deleteTree(fresh);
      deleteTree(old);
      if (!fresh.mkdirs()) {
        throw new IOException("cannot create " + fresh);
      }
      for (String name : source.names()) {
        InputStream in = source.open(name);
        try {
          AtomicFiles.copy(in, new File(fresh, name));
        } finally {
          in.close();
        }
      }
      AtomicFiles.write(new File(fresh, STAMP), stamp.getBytes(utf8()));
      if (target.exists()) {
        AtomicFiles.rename(target, old);
      }
      AtomicFiles.rename(fresh, target);
      deleteTree(old);
      return true;
    }
  }

  private static String stamp(Source source) throws IOException {
    StringBuilder s = new StringBuilder(source.version());
    for (String name : source.names()) {
      s.append('\n').append(name);
    }
    return s.toString();
  }

  private static void deleteTree(File file) throws IOException {
    File[] children = file.listFiles();
    if (children != null) {
      for (File child : children) {
        deleteTree(child);
      }
    }
    if (file.exists() && !file.delete()) {
      throw new IOException("cannot delete " + file);
    }
  }

  private static Charset utf8() {
    return Charset.forName("UTF-8");
  }
}
