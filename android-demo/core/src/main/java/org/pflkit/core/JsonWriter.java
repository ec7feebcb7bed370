package org.pflkit.core;

import java.math.BigDecimal;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;

/**
 * Writes the values {@link Json#parse} returns (and Java integers) back as compact JSON: request
 * bodies, safetensors headers and small state files, so the core needs no JSON library.
 */
public final class JsonWriter {
  private JsonWriter() {}

  /** Maps, lists, strings, numbers, booleans, {@link Json#NULL} or Java null. */
  public static String write(Object value) {
    StringBuilder out = new StringBuilder();
    append(out, value, false);
    return out.toString();
  }

  /**
   * A parsed JSON value as one text that depends on nothing but the value and is the same on
   * every Java runtime, for digests: as {@link #write}, but object keys sorted (by UTF-16 code
   * unit) and a {@link Double} written as its exact decimal value with a fraction or an exponent
   * (never {@code Double.toString}, which differs between Java releases), so {@code 1} and
   * {@code 1.0} differ.
   */
  public static String canonical(Object value) {
    StringBuilder out = new StringBuilder();
    append(out, value, true);
    return out.toString();
  }

  private static void append(StringBuilder out, Object value, boolean canonical) {
    if (value instanceof Map) {
      out.append('{');
      boolean first = true;
      Map<?, ?> map = (Map<?, ?>) value;
      for (Map.Entry<?, ?> e : (canonical ? new TreeMap<Object, Object>(map) : map).entrySet()) {
        if (!(e.getKey() instanceof String)) {
          throw new IllegalArgumentException("JSON object keys must be strings, found "
              + e.getKey());
        }
        out.append(first ? "" : ",");
        first = false;
        string(out, (String) e.getKey());
        out.append(':');
        append(out, e.getValue(), canonical);
      }
      out.append('}');
    } else if (value instanceof List) {
      out.append('[');
      boolean first = true;
      for (Object v : (List<?>) value) {
        out.append(first ? "" : ",");
        first = false;
        append(out, v, canonical);
      }
      out.append(']');
    } else if (value instanceof String) {
      string(out, (String) value);
    } else if (value instanceof Double || value instanceof Float) {
      double d = ((Number) value).doubleValue();
      if (Double.isNaN(d) || Double.isInfinite(d)) {
        throw new IllegalArgumentException("JSON has no " + d);
      }
      if (canonical) {
        String exact = new BigDecimal(d).stripTrailingZeros().toString();
        out.append(exact).append(exact.contains(".") || exact.contains("E") ? "" : ".0");
      } else if (d == Math.rint(d) && Math.abs(d) < 1e15) {
        // integral values print without ".0" so ids and sizes stay integers for Python readers
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
