package org.pflkit.core;

import java.util.List;
import java.util.Map;

/** Test-only serializer, so malformed-card cases can mutate a parsed card and write it back. */
final class JsonWriter {
  private JsonWriter() {}

  static String write(Object value) {
    StringBuilder out = new StringBuilder();
    append(out, value);
    return out.toString();
  }

  private static void append(StringBuilder out, Object value) {
    if (value instanceof Map) {
      out.append('{');
      boolean first = true;
      for (Map.Entry<?, ?> e : ((Map<?, ?>) value).entrySet()) {
        out.append(first ? "" : ",");
        first = false;
        append(out, e.getKey());
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
      out.append('"').append(((String) value).replace("\\", "\\\\").replace("\"", "\\\""))
          .append('"');
    } else {
      out.append(value); // Double, Boolean, Json.NULL
    }
  }
}
