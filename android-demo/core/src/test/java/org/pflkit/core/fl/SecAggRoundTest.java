package org.pflkit.core.fl;

import static org.junit.Assert.assertArrayEquals;
import static org.junit.Assert.assertEquals;
import static org.junit.Assert.assertThrows;

import java.util.LinkedHashMap;
import java.util.Map;
import java.util.Random;
import org.junit.Test;
import org.pflkit.core.TensorData;

/** What a SecAgg device masks: its change in name order, and with DP its clipped, noised one. */
public class SecAggRoundTest {
  @Test
  public void theChangeIsFlattenedInNameOrderWithoutIntegerTensors() {
    Map<String, TensorData> global = new LinkedHashMap<>();
    Map<String, TensorData> update = new LinkedHashMap<>();
    global.put("z.weight", TensorData.ofFloats(new long[] {2}, new float[] {1, 2}));
    update.put("z.weight", TensorData.ofFloats(new long[] {2}, new float[] {1.5f, 1}));
    global.put("a.bias", TensorData.ofFloats(new long[] {1}, new float[] {0.25f}));
    update.put("a.bias", TensorData.ofFloats(new long[] {1}, new float[] {0}));
    update.put("steps", TensorData.ofLongs(new long[] {1}, new long[] {7}));
    assertArrayEquals(new double[] {-0.25, 0.5, -1},
        SecAggRound.change(global, update), 0.0);
    update.put("h", new TensorData("F16", new long[] {1}, new byte[2]));
    global.put("h", new TensorData("F16", new long[] {1}, new byte[2]));
    assertThrows(IllegalArgumentException.class, () -> SecAggRound.change(global, update));
  }

  /** Python's dp.privatize: clipped to C, plus noise of std z C / sqrt(t) per coordinate. */
  @Test
  public void withDpTheChangeIsClippedAndCarriesItsNoiseShare() {
    int n = 200_000;
    double clip = 0.5;
    double z = 1.0;
    int t = 4;
    double[] change = new double[n];
    change[0] = 30;  // norm 30: clipped to 0.5
    SecAggRound.privatize(change, clip, z, t, new Random(0));
    double sum = 0;
    double squared = 0;
    for (int i = 1; i < n; i++) {
      sum += change[i];
      squared += change[i] * change[i];
    }
    double std = Math.sqrt(squared / (n - 1) - Math.pow(sum / (n - 1), 2));
    assertEquals(z * clip / Math.sqrt(t), std, 0.01 * z * clip / Math.sqrt(t));
    assertEquals(clip, change[0], 5 * std);
    double[] noiseless = {3, 4};
    SecAggRound.privatize(noiseless, clip, 0, t, new Random(0));
    assertArrayEquals("norm 5 scaled to 0.5", new double[] {0.3, 0.4}, noiseless, 1e-15);
    double[] within = {0.3, 0.1};
    SecAggRound.privatize(within, clip, 0, t, new Random(0));
    assertArrayEquals("under C: unchanged", new double[] {0.3, 0.1}, within, 0.0);
  }
}
