package org.pflkit.core;

import java.io.File;
import java.io.IOException;
import java.net.URISyntaxException;
import java.net.URL;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.LinkedHashMap;
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

  /** Marks a key to delete in {@link #mutate}. */
  static final Object REMOVE = new Object();

  /** Card text with the value at a dotted path (list indices as numbers) set or removed. */
  @SuppressWarnings("unchecked")
  static String mutate(String text, String path, Object value) {
    Object root = mutableCopy(Json.parse(text));
    String[] keys = path.split("\\.");
    Object node = root;
    for (int i = 0; i < keys.length - 1; i++) {
      node = node instanceof List ? ((List<Object>) node).get(Integer.parseInt(keys[i]))
          : ((Map<String, Object>) node).get(keys[i]);
    }
    String last = keys[keys.length - 1];
    if (node instanceof List) {
      ((List<Object>) node).set(Integer.parseInt(last), value);
    } else if (value == REMOVE) {
      ((Map<String, Object>) node).remove(last);
    } else {
      ((Map<String, Object>) node).put(last, value);
    }
    return JsonWriter.write(root);
  }

  private static Object mutableCopy(Object node) {
    if (node instanceof Map) {
      Map<String, Object> copy = new LinkedHashMap<>();
      for (Map.Entry<?, ?> e : ((Map<?, ?>) node).entrySet()) {
        copy.put((String) e.getKey(), mutableCopy(e.getValue()));
      }
      return copy;
    }
    if (node instanceof List) {
      List<Object> copy = new ArrayList<>();
      for (Object o : (List<?>) node) {
        copy.add(mutableCopy(o));
      }
      return copy;
    }
    return node;
  }
}
