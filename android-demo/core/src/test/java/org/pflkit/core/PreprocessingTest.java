package org.pflkit.core;

import static org.junit.Assert.assertArrayEquals;
import static org.junit.Assert.assertEquals;
import static org.junit.Assert.assertTrue;

import java.io.File;
import java.util.List;
import java.util.Map;
import org.junit.Test;

/** Preprocessing and pixel conversion against cases Python computed (preprocess_cases.json). */
public class PreprocessingTest {
  private static Map<String, Object> cases() {
    return Fixtures.json(new File(Fixtures.root(), "preprocess_cases.json"));
  }

  @Test
  public void matchesPytorchForEveryShapeAndChannelCount() {
    List<Map<String, Object>> cases = Fixtures.objects(cases().get("cases"));
    assertTrue(cases.size() >= 4);
    for (Map<String, Object> c : cases) {
      Preprocessing pre = Preprocessing.fromJson(c.get("preprocessing"), "preprocessing");
      int[] shape = Fixtures.ints(c.get("raw_shape"));
      float[] got = pre.apply(Fixtures.floats(c.get("raw")), shape[0], shape[1]);
      double diff = Fixtures.maxAbsDiff(Fixtures.floats(c.get("input")), got);
      assertTrue(pre + " from " + shape[0] + "x" + shape[1] + " differs by " + diff,
          diff <= 1e-6);
    }
  }

  @Test
  public void lumaEqualsPillowConvertL() {
    for (Object row : Fields.array(cases().get("luma"), "luma")) {
      int[] v = Fixtures.ints(row);
      assertEquals("rgb " + v[0] + "," + v[1] + "," + v[2], v[3], Pixels.luma(v[0], v[1], v[2]));
    }
  }

  @Test
  public void pixelsFromArgbMapToTheCardsPixelScale() {
    int[] argb = {0xFF000000, 0xFFFFFFFF, 0xFF102030};
    Preprocessing rgb16 = new Preprocessing(3, 1, 3, 16f, new float[3], new float[] {1, 1, 1});
    float[] raw = Pixels.fromArgb(argb, 3, 1, rgb16);
    assertArrayEquals(new float[] {0, 0, 0, 16, 16, 16, 16 * 16 / 255f, 32 * 16 / 255f,
        48 * 16 / 255f}, raw, 1e-6f);
    Preprocessing gray = new Preprocessing(1, 1, 3, 255f, new float[1], new float[] {1});
    assertArrayEquals(new float[] {0, 255, Pixels.luma(16, 32, 48)},
        Pixels.fromArgb(argb, 3, 1, gray), 0f);
  }

  @Test
  public void sameSizeImageIsOnlyNormalized() {
    Preprocessing pre = new Preprocessing(1, 2, 2, 255f, new float[] {0.5f}, new float[] {0.5f});
    assertArrayEquals(new float[] {-1f, 1f, 0f, (51 / 255f - 0.5f) / 0.5f},
        pre.apply(new float[] {0, 255, 127.5f, 51}, 2, 2), 1e-7f);
  }

  @Test
  public void rejectsAWrongNumberOfPixels() {
    Preprocessing pre = new Preprocessing(3, 2, 2, 255f, new float[3], new float[] {1, 1, 1});
    try {
      pre.apply(new float[12], 2, 3);
      throw new AssertionError("accepted 12 values for 2x3x3");
    } catch (IllegalArgumentException e) {
      assertTrue(e.getMessage(), e.getMessage().contains("expected 2x3x3 = 18 raw values"));
    }
    try {  // 65536 * 65536 wraps to 0 in int arithmetic
      pre.apply(new float[0], 65536, 65536);
      throw new AssertionError("accepted 0 values for 65536x65536x3");
    } catch (IllegalArgumentException e) {
      assertTrue(e.getMessage(), e.getMessage().contains("= 12884901888 raw values, got 0"));
    }
    try {
      Pixels.fromArgb(new int[0], 65536, 65536, pre);
      throw new AssertionError("accepted 0 pixels for 65536x65536");
    } catch (IllegalArgumentException e) {
      assertTrue(e.getMessage(), e.getMessage().contains("expected 65536x65536 pixels, got 0"));
    }
  }
}
