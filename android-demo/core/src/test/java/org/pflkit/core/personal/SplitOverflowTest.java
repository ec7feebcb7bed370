package org.pflkit.core.personal;

import static org.junit.Assert.assertEquals;

import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Random;
import java.util.Set;
import org.junit.Test;
import org.pflkit.core.TrainingSection;

/**
 * Splits whose fractions add up past 1 (each one valid on its own) take rows as pflkit's
 * Python {@code Recipe.split_rows} slices them: the later split gets what is left, the train
 * rows none, and every row is in exactly one set (no crash, no row taken twice).
 */
public class SplitOverflowTest {
  @Test
  public void laterSplitsGetWhatIsLeft() {
    Map<String, Object> section = PersonalizationTest.section(null, null);
    section.put("splits", List.of(
        Map.of("name", "a", "fraction", 0.6, "if_empty", "skip"),
        Map.of("name", "b", "fraction", 0.6, "if_empty", "skip")));
    TrainingSection recipe = PersonalizationTest.parse(section);
    Map<String, int[]> rows = new RecipeRunner(recipe, null,
        new long[] {PersonalizationTest.FEATURES}).splitRows(10, new Random(0));
    assertEquals(6, rows.get("a").length);
    assertEquals(4, rows.get("b").length);
    assertEquals(0, rows.get(TrainingSection.TRAIN_ROWS).length);
    Set<Integer> seen = new HashSet<>();
    for (int[] set : rows.values()) {
      for (int row : set) {
        assertEquals("row " + row + " in two sets", true, seen.add(row));
      }
    }
    assertEquals(10, seen.size());
  }
}
