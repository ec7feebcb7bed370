package org.pflkit.core;

import static org.junit.Assert.assertEquals;
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
    assertEquals(Arrays.asList(1.0, -250.0, 0.0, 0.125), map.get("a"));
    assertEquals(Boolean.TRUE, ((Map<?, ?>) map.get("b")).get("c"));
    assertSame(Json.NULL, map.get("e"));
    assertEquals("q\"\\/\b\f\n\r\t\u00e9\u20ac", map.get("s"));
    assertEquals(Arrays.asList("a", "b", "e", "s"), Arrays.asList(map.keySet().toArray()));
  }

  @Test
  public void parsesTopLevelScalarsAndEmptyContainers() {
    assertEquals("x", Json.parse("\"x\""));
    assertEquals(3.0, Json.parse("3"));
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
        {"{\"a\": 1, \"a\": 2}", "duplicate key \"a\""},
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
      try {
        Json.parse(c[0]);
        fail("accepted " + c[0]);
      } catch (Json.SyntaxException e) {
        assertTrue(c[0] + " -> " + e.getMessage(), e.getMessage().contains(c[1]));
      }
    }
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
}
