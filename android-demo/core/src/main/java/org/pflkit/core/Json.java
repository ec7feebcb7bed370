package org.pflkit.core;

import java.util.ArrayList;
import java.util.Collections;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

/**
 * A small strict JSON parser (RFC 8259) so the core needs no third-party library on the host
 * or on the device.
 *
 * <p>Values map to Java as: object to {@code Map<String, Object>} (insertion order kept), array
 * to {@code List<Object>}, string to {@link String}, a number written as an integer (no
 * fraction, no exponent) that a long holds to {@link Long}, any other number to {@link Double},
 * true/false to {@link Boolean}, null to {@link #NULL}. So {@code 1} and {@code 1.0} differ as
 * in Python's json: a field that must be an integer takes a {@link Long} only ({@link
 * #integer}), the Python SDK's rule for every integer a server sends. Strict means: no trailing commas, no comments, no
 * NaN/Infinity, no leading zeros, no duplicate object keys, no unescaped control characters, no
 * text after the value. Every error names the line and column, and shows at most one
 * character of the text (a server's answer may be megabytes, or quote a secret).
 */
public final class Json {
  /** The JSON {@code null} literal (a sentinel, so a missing key and null differ). */
  public static final Object NULL =
      new Object() {
        @Override
        public String toString() {
          return "null";
        }
      };

  /** Nesting deeper than this is refused (guards the recursive descent against hostile input). */
  private static final int MAX_DEPTH = 64;

  private final String text;
  private int pos;

  private Json(String text) {
    this.text = text;
  }

  /** Thrown for text that is not exactly one JSON value. */
  public static final class SyntaxException extends IllegalArgumentException {
    private static final long serialVersionUID = 1L;

    SyntaxException(String message) {
      super(message);
    }
  }

  /** Whether a parsed value is a JSON number (a {@link Long} or a {@link Double}). */
  public static boolean isNumber(Object value) {
    return value instanceof Long || value instanceof Double;
  }

  /**
   * A parsed value that is a JSON integer in [{@code min}, {@code max}], else null: a number
   * with a fraction or an exponent ({@code 1.0}, {@code 1e0}), one past a long, a boolean or
   * anything else is none, as Python's json reads them ({@code type(v) is int}).
   */
  public static Long integer(Object value, long min, long max) {
    if (!(value instanceof Long)) {
      return null;
    }
    long n = (Long) value;
    return n >= min && n <= max ? (Long) value : null;
  }

  /**
   * What a parsed value is ({@code "a string"}, {@code "an object"}, ...; {@code "nothing"} for
   * null), never what it holds: for errors about a server's answer, which may be megabytes
   * long, hold escape sequences or quote the device's secret.
   */
  public static String kind(Object value) {
    if (value == null) {
      return "nothing";
    }
    if (value == NULL) {
      return "null";
    }
    if (value instanceof Map) {
      return "an object";
    }
    if (value instanceof List) {
      return "an array";
    }
    if (value instanceof String) {
      return "a string";
    }
    return value instanceof Boolean ? "a boolean" : "a number";
  }

  /** Parse a complete JSON text; throws {@link SyntaxException} naming where it went wrong. */
  public static Object parse(String text) {
    if (text == null) {
      throw new SyntaxException("no JSON text (null)");
    }
    Json parser = new Json(text);
    if (parser.text.startsWith("\uFEFF")) {
      parser.pos = 1; // a UTF-8 byte order mark is tolerated, as RFC 8259 allows parsers to
    }
    parser.skipWhitespace();
    Object value = parser.readValue(0);
    parser.skipWhitespace();
    if (parser.pos != parser.text.length()) {
      throw parser.error("unexpected text after the JSON value");
    }
    return value;
  }

  private SyntaxException error(String message) {
    int line = 1;
    int column = 1;
    for (int i = 0; i < pos && i < text.length(); i++) {
      if (text.charAt(i) == '\n') {
        line++;
        column = 1;
      } else {
        column++;
      }
    }
    return new SyntaxException("line " + line + " column " + column + ": " + message);
  }

  private void skipWhitespace() {
    while (pos < text.length()) {
      char c = text.charAt(pos);
      if (c != ' ' && c != '\t' && c != '\n' && c != '\r') {
        return;
      }
      pos++;
    }
  }

  private Object readValue(int depth) {
    if (depth > MAX_DEPTH) {
      throw error("nesting deeper than " + MAX_DEPTH + " levels");
    }
    if (pos >= text.length()) {
      throw error("unexpected end of text, expected a value");
    }
    char c = text.charAt(pos);
    switch (c) {
      case '{':
        return readObject(depth);
      case '[':
        return readArray(depth);
      case '"':
        return readString();
      case 't':
        return readLiteral("true", Boolean.TRUE);
      case 'f':
        return readLiteral("false", Boolean.FALSE);
      case 'n':
        return readLiteral("null", NULL);
      default:
        if (c == '-' || (c >= '0' && c <= '9')) {
          return readNumber();
        }
        throw error("unexpected character " + shown(c) + ", expected a value");
    }
  }

  private Object readLiteral(String word, Object value) {
    if (!text.startsWith(word, pos)) {
      throw error("invalid literal, expected '" + word + "' (NaN and Infinity are not JSON)");
    }
    pos += word.length();
    return value;
  }

  private Map<String, Object> readObject(int depth) {
    pos++; // '{'
    Map<String, Object> map = new LinkedHashMap<String, Object>();
    skipWhitespace();
    if (peek() == '}') {
      pos++;
      return Collections.unmodifiableMap(map);
    }
    while (true) {
      skipWhitespace();
      if (peek() != '"') {
        throw error("expected a string key in object");
      }
      int keyPos = pos;
      String key = readString();
      if (map.containsKey(key)) {
        pos = keyPos;
        throw error("duplicate key: an object names a key twice");  // it may be any text
      }
      skipWhitespace();
      expect(':');
      skipWhitespace();
      map.put(key, readValue(depth + 1));
      skipWhitespace();
      char c = peek();
      pos++;
      if (c == '}') {
        return Collections.unmodifiableMap(map);
      }
      if (c != ',') {
        pos--;
        throw error("expected ',' or '}' in object");
      }
    }
  }

  private List<Object> readArray(int depth) {
    pos++; // '['
    List<Object> list = new ArrayList<Object>();
    skipWhitespace();
    if (peek() == ']') {
      pos++;
      return Collections.unmodifiableList(list);
    }
    while (true) {
      skipWhitespace();
      list.add(readValue(depth + 1));
      skipWhitespace();
      char c = peek();
      pos++;
      if (c == ']') {
        return Collections.unmodifiableList(list);
      }
      if (c != ',') {
        pos--;
        throw error("expected ',' or ']' in array");
      }
    }
  }

  private char peek() {
    if (pos >= text.length()) {
      throw error("unexpected end of text");
    }
    return text.charAt(pos);
  }

  private void expect(char c) {
    if (peek() != c) {
      throw error("expected '" + c + "'");
    }
    pos++;
  }

  private String readString() {
    pos++; // opening quote
    StringBuilder out = new StringBuilder();
    while (true) {
      char c = peek();
      if (c == '"') {
        pos++;
        return out.toString();
      }
      if (c < 0x20) {
        throw error("unescaped control character in string");
      }
      if (c != '\\') {
        out.append(c);
        pos++;
        continue;
      }
      pos++;
      char e = peek();
      pos++;
      switch (e) {
        case '"':
        case '\\':
        case '/':
          out.append(e);
          break;
        case 'b':
          out.append('\b');
          break;
        case 'f':
          out.append('\f');
          break;
        case 'n':
          out.append('\n');
          break;
        case 'r':
          out.append('\r');
          break;
        case 't':
          out.append('\t');
          break;
        case 'u':
          out.append(readHex4());
          break;
        default:
          pos--;
          throw error("invalid escape: a backslash before " + shown(e));
      }
    }
  }

  private char readHex4() {
    if (pos + 4 > text.length()) {
      throw error("truncated \\u escape");
    }
    int value = 0;
    for (int i = 0; i < 4; i++) {
      int digit = Character.digit(text.charAt(pos), 16);
      if (digit < 0) {
        throw error("invalid hex digit in \\u escape");
      }
      value = value * 16 + digit;
      pos++;
    }
    return (char) value;
  }

  private Object readNumber() {
    int start = pos;
    if (peek() == '-') {
      pos++;
    }
    if (pos >= text.length() || !isDigit(text.charAt(pos))) {
      throw error("expected a digit");
    }
    if (text.charAt(pos) == '0') {
      pos++;
      if (pos < text.length() && isDigit(text.charAt(pos))) {
        throw error("leading zeros are not allowed in numbers");
      }
    } else {
      skipDigits();
    }
    boolean whole = pos >= text.length() || (text.charAt(pos) != '.'
        && text.charAt(pos) != 'e' && text.charAt(pos) != 'E');
    if (whole && pos - start <= 20) {  // a long has at most 19 digits and a sign
      try {
        return Long.valueOf(Long.parseLong(text.substring(start, pos)));
      } catch (NumberFormatException pastLong) {
        // 2^63 and beyond: read as a double below, which no integer field takes
      }
    }
    if (pos < text.length() && text.charAt(pos) == '.') {
      pos++;
      requireDigit("fraction");
      skipDigits();
    }
    if (pos < text.length() && (text.charAt(pos) == 'e' || text.charAt(pos) == 'E')) {
      pos++;
      if (pos < text.length() && (text.charAt(pos) == '+' || text.charAt(pos) == '-')) {
        pos++;
      }
      requireDigit("exponent");
      skipDigits();
    }
    double value = Double.parseDouble(text.substring(start, pos));
    if (Double.isInfinite(value)) {
      pos = start;
      throw error("number out of range");
    }
    return value;
  }

  private void requireDigit(String part) {
    if (pos >= text.length() || !isDigit(text.charAt(pos))) {
      throw error("expected a digit in the " + part + " of a number");
    }
  }

  private void skipDigits() {
    while (pos < text.length() && isDigit(text.charAt(pos))) {
      pos++;
    }
  }

  /**
   * One character of the text as an error shows it: printable ASCII quoted, anything else
   * (an escape sequence's ESC, a newline) as its code, so a message stays one printable line.
   */
  private static String shown(char c) {
    return c >= ' ' && c <= '~' ? "'" + c + "'" : String.format("U+%04X", (int) c);
  }

  private static boolean isDigit(char c) {
    return c >= '0' && c <= '9';
  }
}
