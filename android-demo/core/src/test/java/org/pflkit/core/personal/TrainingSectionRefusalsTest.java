package org.pflkit.core.personal;

import static org.junit.Assert.assertTrue;
import static org.junit.Assert.fail;

import java.io.File;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import org.junit.Test;
import org.pflkit.core.InvalidModelCardException;
import org.pflkit.core.Json;

/**
 * Hand edits of a real trainer card's training section ({@code fixtures/trainer/refusals.json})
 * are refused naming the edited field. Python's trainer (export/training_section.py) runs the
 * same cases, so a card one trainer refuses the other refuses too.
 */
public class TrainingSectionRefusalsTest {
  @SuppressWarnings("unchecked")
  static List<Object> cases() throws Exception {
    Map<String, Object> doc = (Map<String, Object>) Json.parse(read(new File(
        TrainerCardTest.dir("superfed_mm").getParentFile(), "refusals.json")));
    return (List<Object>) doc.get("cases");
  }

  @Test
  public void theUneditedSectionsParse() throws Exception {
    for (String card : List.of("superfed_mm", "fedrod_linear", "pflmoe_mfe")) {
      PersonalizationTest.parse(training(card));
    }
  }

  @Test
  @SuppressWarnings("unchecked")
  public void everyEditIsRefusedNamingItsField() throws Exception {
    List<Object> cases = cases();
    assertTrue("the shared cases are there", cases.size() >= 40);
    for (Object node : cases) {
      Map<String, Object> c = (Map<String, Object>) node;
      Map<String, Object> section = training((String) c.get("card"));
      edit(section, (List<Object>) c.get("path"), c.containsKey("value"), c.get("value"));
      String field = (String) c.get("field");
      try {
        PersonalizationTest.parse(section);
        fail(c.get("case") + ": accepted");
      } catch (InvalidModelCardException e) {
        assertTrue(c.get("case") + ": " + e.getMessage(),
            e.getMessage().startsWith("invalid model card: " + field + ": "));
      }
    }
  }

  @SuppressWarnings("unchecked")
  static Map<String, Object> training(String card) throws Exception {
    Map<String, Object> whole = (Map<String, Object>) Json.parse(read(new File(
        TrainerCardTest.dir(card), "model_card.json")));
    return (Map<String, Object>) mutable(whole.get("training"));
  }

  /** Put {@code value} at {@code path} (keys and indices), or remove what is there. */
  @SuppressWarnings("unchecked")
  static void edit(Object root, List<Object> path, boolean put, Object value) {
    Object parent = root;
    for (Object step : path.subList(0, path.size() - 1)) {
      parent = parent instanceof Map ? ((Map<String, Object>) parent).get(step)
          : ((List<Object>) parent).get(((Number) step).intValue());
    }
    Object last = path.get(path.size() - 1);
    if (parent instanceof Map) {
      Map<String, Object> map = (Map<String, Object>) parent;
      if (put) {
        map.put((String) last, mutable(value));
      } else {
        map.remove(last);
      }
    } else {
      List<Object> list = (List<Object>) parent;
      int index = ((Number) last).intValue();
      if (put) {
        list.set(index, mutable(value));
      } else {
        list.remove(index);
      }
    }
  }

  /** A changeable deep copy of parsed JSON (the parser's maps and lists are read-only). */
  @SuppressWarnings("unchecked")
  static Object mutable(Object node) {
    if (node instanceof Map) {
      Map<String, Object> copy = new LinkedHashMap<String, Object>();
      for (Map.Entry<String, Object> e : ((Map<String, Object>) node).entrySet()) {
        copy.put(e.getKey(), mutable(e.getValue()));
      }
      return copy;
    }
    if (node instanceof List) {
      List<Object> copy = new ArrayList<Object>();
      for (Object item : (List<Object>) node) {
        copy.add(mutable(item));
      }
      return copy;
    }
    return node;
  }

  static String read(File file) throws Exception {
    return new String(Files.readAllBytes(file.toPath()), StandardCharsets.UTF_8);
  }
}
