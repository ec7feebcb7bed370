package org.pflkit.core.fl;

import static org.junit.Assert.assertArrayEquals;
import static org.junit.Assert.assertEquals;
import static org.junit.Assert.assertSame;
import static org.junit.Assert.assertTrue;
import static org.junit.Assert.fail;

import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.charset.StandardCharsets;
import java.util.LinkedHashMap;
import java.util.Map;
import org.junit.Test;
import org.pflkit.core.TensorData;

/** The device's clipping: one L2 norm over the floating tensors' change, as the Python SDK. */
public class UpdateClippingTest {
  private static final long[] TWO = {2};

  private static Map<String, TensorData> state(float a0, float a1, double b, long n) {
    Map<String, TensorData> s = new LinkedHashMap<>();
    s.put("a", TensorData.ofFloats(TWO, new float[] {a0, a1}));
    s.put("b", new TensorData("F64", new long[] {1}, ByteBuffer.allocate(8)
        .order(ByteOrder.LITTLE_ENDIAN).putDouble(b).array()));
    s.put("n", TensorData.ofLongs(new long[] {1}, new long[] {n}));
    return s;
  }

  @Test
  public void aChangeOverTheNormIsScaledToItAcrossTensorsAndIntegersPass() {
    Map<String, TensorData> global = state(1f, -1f, 2.0, 7);
    Map<String, TensorData> update = state(4f, -1f, 6.0, 9);  // change (3, 0 | 4): norm 5
    Map<String, TensorData> clipped = UpdateClipping.clip(global, update, 1.0);
    assertArrayEquals(new float[] {1.6f, -1f}, clipped.get("a").floats(), 0f);
    assertEquals(2.8, ByteBuffer.wrap(clipped.get("b").bytes()).order(ByteOrder.LITTLE_ENDIAN)
        .getDouble(), 1e-15);
    assertArrayEquals(new long[] {9}, clipped.get("n").longs());
    assertSame("within the norm: the update as it is", update,
        UpdateClipping.clip(global, update, 5.0));
  }

  @Test
  public void aHalfPrecisionUpdateIsRefused() {
    Map<String, TensorData> global = new LinkedHashMap<>();
    global.put("h", new TensorData("F16", TWO, new byte[4]));
    try {
      UpdateClipping.clip(global, global, 1.0);
      fail("F16 was clipped");
    } catch (IllegalArgumentException e) {
      assertTrue(e.getMessage(), e.getMessage().contains("F16"));
    }
  }

  @Test
  public void aTaskCarriesItsClipNormAndRefusesABadOne() {
    String train = "{\"status\": \"train\", \"retry_after\": 1, \"run_id\": 1, \"round\": 0, "
        + "\"global_hash\": \"" + "ab".repeat(32) + "\", \"config\": {}";
    assertEquals(0.5, Task.parse((train + ", \"clip_norm\": 0.5}").getBytes(
        StandardCharsets.UTF_8)).clipNorm, 0.0);
    assertEquals(null, Task.parse((train + "}").getBytes(StandardCharsets.UTF_8)).clipNorm);
    try {
      Task.parse((train + ", \"clip_norm\": -1}").getBytes(StandardCharsets.UTF_8));
      fail("a negative clip norm was taken");
    } catch (IllegalArgumentException e) {
      assertTrue(e.getMessage(), e.getMessage().contains("clip_norm"));
    }
  }
}
