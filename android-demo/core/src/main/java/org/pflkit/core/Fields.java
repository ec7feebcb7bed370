package org.pflkit.core;

import java.util.List;
import java.util.Map;

/**
 * Typed, path-aware reads from parsed JSON: every failure names the field, the expected type and
 * what was found, so a malformed card is rejected with a message a developer can act on.
 */
final class Fields {
  private Fields() {}

  static InvalidModelCardException fail(String path, String problem) {
    return new InvalidModelCardException(path, problem);
  }

  static String describe(Object value) {
    if (value == null) {
      return "nothing (missing)";
    }
    if (value == Json.NULL) {
      return "null";
    }
    if (value instanceof String) {
      return "the string \"" + value + "\"";
    }
    if (Json.isNumber(value)) {
      return "the number " + value;
    }
    if (value instanceof Boolean) {
      return "the boolean " + value;
    }
    if (value instanceof List) {
      return "an array";
    }
    return "an object";
  }

  static String child(String path, String key) {
    return path.isEmpty() ? key : path + "." + key;
  }

  @SuppressWarnings("unchecked")
  static Map<String, Object> object(Object value, String path) {
    if (!(value instanceof Map)) {
      throw fail(path, "expected an object, found " + describe(value));
    }
    return (Map<String, Object>) value;
  }

  @SuppressWarnings("unchecked")
  static List<Object> array(Object value, String path) {
    if (!(value instanceof List)) {
      throw fail(path, "expected an array, found " + describe(value));
    }
    return (List<Object>) value;
  }

  static String string(Object value, String path) {
    if (!(value instanceof String) || ((String) value).isEmpty()) {
      throw fail(path, "expected a non-empty string, found " + describe(value));
    }
    return (String) value;
  }

  static double number(Object value, String path) {
    if (!Json.isNumber(value)) {
      throw fail(path, "expected a number, found " + describe(value));
    }
    return ((Number) value).doubleValue();
  }

  /** A whole number up to 2^53 (a card's integral {@code 3.0} too: it is no server's). */
  static long integer(Object value, String path) {
    double d = number(value, path);
    if (d != Math.rint(d) || Math.abs(d) > (1L << 53)) {
      throw fail(path, "expected an integer, found " + describe(value));
    }
    return value instanceof Long ? (Long) value : (long) d;
  }

  static boolean bool(Object value, String path) {
    if (!(value instanceof Boolean)) {
      throw fail(path, "expected true or false, found " + describe(value));
    }
    return (Boolean) value;
  }

  static Object required(Map<String, Object> map, String key, String path) {
    Object value = map.get(key);
    if (value == null) {
      throw fail(child(path, key), "required field is missing");
    }
    return value;
  }

  /** The value of an optional key, or Java null when it is absent or JSON null. */
  static Object optional(Map<String, Object> map, String key) {
    Object value = map.get(key);
    return value == Json.NULL ? null : value;
  }

  static String oneOf(Object value, String path, String... allowed) {
    String s = string(value, path);
    for (String a : allowed) {
      if (a.equals(s)) {
        return s;
      }
    }
    StringBuilder list = new StringBuilder();
    for (String a : allowed) {
      list.append(list.length() == 0 ? "" : ", ").append('"').append(a).append('"');
    }
    throw fail(path, "expected one of " + list + ", found " + describe(value));
  }

  static double[] numbers(Object value, String path) {
    List<Object> list = array(value, path);
    double[] out = new double[list.size()];
    for (int i = 0; i < out.length; i++) {
      out[i] = number(list.get(i), path + "[" + i + "]");
    }
    return out;
  }
}
