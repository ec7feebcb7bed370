package org.pflkit.core;

import java.io.File;
import java.io.IOException;
import java.net.URISyntaxException;
import java.net.URL;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Map;

/** Test helpers: the fixture folders on the test classpath and JSON-to-array conversions. */
final class Fixtures {
  private Fixtures() {}

  static File root() {
    URL url = Fixtures.class.getResource("/fixtures");
    if (url == null) {
      throw new IllegalStateException("test resources not on the classpath: /fixtures");
    }
    try {
      return new File(url.toURI());
    } catch (URISyntaxException e) {
      throw new IllegalStateException(e);
    }
  }

  /** Every fixture folder that holds a model card, sorted by name. */
  static List<File> cardDirs() {
    File[] dirs = root().listFiles(f -> new File(f, "model_card.json").isFile());
    if (dirs == null || dirs.length == 0) {
      throw new IllegalStateException("no fixture folders with model_card.json in " + root());
    }
    Arrays.sort(dirs);
    return Arrays.asList(dirs);
  }

  static String read(File file) {
    try {
      return new String(Files.readAllBytes(file.toPath()), StandardCharsets.UTF_8);
    } catch (IOException e) {
      throw new IllegalStateException(e);
    }
  }

  static Map<String, Object> json(File file) {
    return Fields.object(Json.parse(read(file)), file.getName());
  }

  static float[] floats(Object node) {
    double[] d = Fields.numbers(node, "fixture");
    float[] out = new float[d.length];
    for (int i = 0; i < d.length; i++) {
      out[i] = (float) d[i];
    }
    return out;
  }

  static int[] ints(Object node) {
    double[] d = Fields.numbers(node, "fixture");
    int[] out = new int[d.length];
    for (int i = 0; i < d.length; i++) {
      out[i] = (int) d[i];
    }
    return out;
  }

  static List<Map<String, Object>> objects(Object node) {
    List<Map<String, Object>> out = new ArrayList<>();
    for (Object o : Fields.array(node, "fixture")) {
      out.add(Fields.object(o, "fixture"));
    }
    return out;
  }

  /** Largest |a[i] - b[i]|; fails on a length mismatch. */
  static double maxAbsDiff(float[] a, float[] b) {
    if (a.length != b.length) {
      throw new AssertionError("length " + a.length + " != " + b.length);
    }
    double worst = 0;
    for (int i = 0; i < a.length; i++) {
      worst = Math.max(worst, Math.abs((double) a[i] - b[i]));
    }
    return worst;
  }
}
