package org.pflkit.core;

import java.util.List;
import java.util.Map;

/**
 * Writes the values {@link Json#parse} returns (and Java integers) back as compact JSON: request
 * bodies, safetensors headers and small state files, so the core needs no JSON library.
 */
public final class JsonWriter {
  private JsonWriter() {}

  /** Maps, lists, strings, numbers, booleans, {@link Json#NULL} or Java null. */
  public static String write(Object value) {
    StringBuilder out = new StringBuilder();
    append(out, value);
    return out.toString();
  }

  private static void append(StringBuilder out, Object value) {
    if (value instanceof Map) {
      out.append('{');
      boolean first = true;
      for (Map.Entry<?, ?> e : ((Map<?, ?>) value).entrySet()) {
        if (!(e.getKey() instanceof String)) {
          throw new IllegalArgumentException("JSON object keys must be strings, found "
              + e.getKey());
        }
        out.append(first ? "" : ",");
        first = false;
        string(out, (String) e.getKey());
        out.append(':');
        append(out, e.getValue());
      }
      out.append('}');
    } else if (value instanceof List) {
      out.append('[');
      boolean first = true;
      for (Object v : (List<?>) value) {
        out.append(first ? "" : ",");
        first = false;
        append(out, v);
      }
      out.append(']');
    } else if (value instanceof String) {
      string(out, (String) value);
    } else if (value instanceof Double || value instanceof Float) {
      double d = ((Number) value).doubleValue();
      if (Double.isNaN(d) || Double.isInfinite(d)) {
        throw new IllegalArgumentException("JSON has no " + d);
      }
      // integral values print without ".0" so ids and sizes stay integers for Python readers
      if (d == Math.rint(d) && Math.abs(d) < 1e15) {
        out.append((long) d);
      } else {
        out.append(value instanceof Float ? Float.toString((Float) value) : Double.toString(d));
      }
    } else if (value instanceof Long || value instanceof Integer || value instanceof Short
        || value instanceof Byte) {
      out.append(((Number) value).longValue());
    } else if (value instanceof Boolean) {
      out.append(value);
    } else if (value == null || value == Json.NULL) {
      out.append("null");
    } else {
      throw new IllegalArgumentException("cannot write " + value.getClass() + " as JSON");
    }
  }

  private static void string(StringBuilder out, String s) {
    out.append('"');
    for (int i = 0; i < s.length(); i++) {
      char c = s.charAt(i);
      if (c == '"' || c == '\\') {
        out.append('\\').append(c);
      } else if (c < 0x20) {
        out.append(String.format("\\u%04x", (int) c));
      } else {
        out.append(c);
      }
    }
    out.append('"');
  }
}
