package org.pflkit.core;

import java.io.File;
import java.io.IOException;
import java.io.OutputStream;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.util.concurrent.TimeUnit;

/**
 * Runs one of android-demo/tools' scripts with the repository's virtualenv (the system
 * properties {@code pflkit.venv} and {@code pflkit.root} run-tests.sh sets) and parses the one
 * JSON value it prints: Python's side of a cross-language test.
 */
public final class PythonTool {
  private PythonTool() {}

  /** {@code android-demo/tools/<script> <args>} with {@code input} on stdin; its JSON. */
  public static Object run(String script, String input, String... args)
      throws IOException, InterruptedException {
    String venv = System.getProperty("pflkit.venv");
    String root = System.getProperty("pflkit.root", ".");
    File out = File.createTempFile("pytool", ".json");
    File err = File.createTempFile("pytool", ".log");
    try {
      String[] cmd = new String[args.length + 2];
      cmd[0] = new File(venv, "bin/python").getPath();
      cmd[1] = new File(root, "android-demo/tools/" + script).getPath();
      System.arraycopy(args, 0, cmd, 2, args.length);
      Process p = new ProcessBuilder(cmd).redirectOutput(out).redirectError(err).start();
      try (OutputStream stdin = p.getOutputStream()) {
        stdin.write(input.getBytes(StandardCharsets.UTF_8));
      }
      // a safety guard against hanging only; a run takes seconds
      if (!p.waitFor(300, TimeUnit.SECONDS) || p.exitValue() != 0) {
        p.destroyForcibly();
        throw new IllegalStateException(script + " failed: "
            + new String(Files.readAllBytes(err.toPath()), StandardCharsets.UTF_8));
      }
      return Json.parse(new String(Files.readAllBytes(out.toPath()), StandardCharsets.UTF_8));
    } finally {
      Files.deleteIfExists(out.toPath());
      Files.deleteIfExists(err.toPath());
    }
  }
}
