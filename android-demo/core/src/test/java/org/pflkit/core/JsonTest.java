package org.pflkit.core;

import static org.junit.Assert.assertEquals;
import static org.junit.Assert.assertNotEquals;
import static org.junit.Assert.assertSame;
import static org.junit.Assert.assertTrue;
import static org.junit.Assert.fail;

import java.util.Arrays;
import java.util.List;
import java.util.Map;
import org.junit.Test;

public class JsonTest {
  @Test
  public void parsesEveryKindOfValue() {
    Object v = Json.parse(" {\"a\": [1, -2.5e2, 0, 0.125], \"b\": {\"c\": true, \"d\": false},"
        + " \"e\": null, \"s\": \"q\\\"\\\\\\/\\b\\f\\n\\r\\t\\u00e9\\u20AC\"} ");
    Map<?, ?> map = (Map<?, ?>) v;
    assertEquals(Arrays.asList(1L, -250.0, 0L, 0.125), map.get("a"));  // integers are Long
    assertEquals(Boolean.TRUE, ((Map<?, ?>) map.get("b")).get("c"));
    assertSame(Json.NULL, map.get("e"));
    assertEquals("q\"\\/\b\f\n\r\t\u00e9\u20ac", map.get("s"));
    assertEquals(Arrays.asList("a", "b", "e", "s"), Arrays.asList(map.keySet().toArray()));
  }

  @Test
  public void parsesTopLevelScalarsAndEmptyContainers() {
    assertEquals("x", Json.parse("\"x\""));
    assertEquals(3L, Json.parse("3"));
    assertEquals(3.0, Json.parse("3.0"));
    assertEquals(Long.MIN_VALUE, Json.parse("-9223372036854775808"));
    assertEquals(9.223372036854775808e18, Json.parse("9223372036854775808"));  // past a long
    assertTrue(((List<?>) Json.parse("[]")).isEmpty());
    assertTrue(((Map<?, ?>) Json.parse("{ }")).isEmpty());
  }

  @Test
  public void rejectsNonStrictJsonWithThePosition() {
    String[][] cases = {
        {"{\"a\": 1,}", "line 1 column 9: expected a string key"},
        {"[1, 2,]", "expected a value"},
        {"[01]", "leading zeros"},
        {"[NaN]", "expected a value"},
        {"[1.]", "fraction"},
        {"[1e]", "exponent"},
        {"{\"a\": 1, \"a\": 2}", "line 1 column 10: duplicate key"},
        {"{\"a\": 1} x", "unexpected text after"},
        {"[\"tab\there\"]", "unescaped control character"},
        {"[\"\\x\"]", "invalid escape"},
        {"[\"\\u12G4\"]", "invalid hex digit"},
        {"{\"a\" 1}", "expected ':'"},
        {"[1 2]", "expected ',' or ']'"},
        {"\n\n  [tru]", "line 3 column 4: invalid literal"},
        {"[\"open", "unexpected end"},
        {"", "unexpected end"},
        {"// c\n{}", "unexpected character '/'"},
        {"[1e999]", "out of range"},
    };
    for (String[] c : cases) {
      String message = refusal(c[0]);
      assertTrue(c[0] + " -> " + message, message.contains(c[1]));
    }
  }

  /**
   * A message shows at most one character of the text, and that one printable: the text may
   * be a server's answer of megabytes, with escape sequences, quoting a device's secret.
   */
  @Test
  public void anErrorQuotesNoneOfAHostileText() {
    String key = "s3cret\\u001b[2J" + "k".repeat(100_000);
    String[][] cases = {
        {"{\"" + key + "\": 1, \"" + key + "\": 2}",
            "duplicate key: an object names a key twice"},
        {"[\"\\\u001b\"]", "invalid escape: a backslash before U+001B"},
        {"\u001b[2J", "unexpected character U+001B, expected a value"},
        {"[\"\\q\"]", "invalid escape: a backslash before 'q'"},
    };
    for (String[] c : cases) {
      String message = refusal(c[0]);
      assertTrue(message, message.endsWith(": " + c[1]));
      assertTrue(message, message.matches("line \\d+ column \\d+: [ -~]+"));
    }
  }

  /** The message of the SyntaxException {@code text} raises. */
  private static String refusal(String text) {
    try {
      Json.parse(text);
    } catch (Json.SyntaxException e) {
      return e.getMessage();
    }
    fail("accepted " + text);
    return null;
  }

  @Test
  public void refusesHostileNesting() {
    StringBuilder deep = new StringBuilder();
    for (int i = 0; i < 100; i++) {
      deep.append('[');
    }
    try {
      Json.parse(deep.toString());
      fail("accepted 100 nested arrays");
    } catch (Json.SyntaxException e) {
      assertTrue(e.getMessage(), e.getMessage().contains("nesting deeper"));
    }
  }

  /** Vectors of the canonical text a run config's digest hashes (FederatedClient keeps it). */
  @Test
  public void canonicalTextSortsKeysAndWritesNumbersExactly() {
    String[][] vectors = {
        {"{\"b\": 1, \"a\": [true, null, \"x\\n\"]}", "{\"a\":[true,null,\"x\\u000a\"],\"b\":1}"},
        {"{\"lr\": 1.0, \"n\": 1, \"big\": 100.0, \"tiny\": 9.5367431640625e-7, \"z\": -0.0}",
            "{\"big\":1E+2,\"lr\":1.0,\"n\":1,\"tiny\":9.5367431640625E-7,\"z\":0.0}"},
        {"{\"lr\": 0.1}", "{\"lr\":0.1000000000000000055511151231257827021181583404541015625}"},
        {"{\"\u00e9\": {\"b\": 2.5, \"a\": {}}}", "{\"\u00e9\":{\"a\":{},\"b\":2.5}}"},
    };
    for (String[] v : vectors) {
      assertEquals(v[0], v[1], JsonWriter.canonical(Json.parse(v[0])));
    }
    assertNotEquals("1 and 1.0 are other configs, as in Python's digest",
        JsonWriter.canonical(Json.parse("{\"lr\": 1}")),
        JsonWriter.canonical(Json.parse("{\"lr\": 1.0}")));
  }
}
