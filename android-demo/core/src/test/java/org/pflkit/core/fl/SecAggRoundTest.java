package org.pflkit.core.fl;

import static org.junit.Assert.assertArrayEquals;
import static org.junit.Assert.assertEquals;
import static org.junit.Assert.assertThrows;
import static org.junit.Assert.assertTrue;

import java.util.LinkedHashMap;
import java.util.Map;
import java.util.Random;
import org.junit.Test;
import org.pflkit.core.TensorData;
import org.pflkit.core.secagg.DpGrid;
import org.pflkit.core.secagg.RoundSetup;
import org.pflkit.core.secagg.SecAggException;

/** What a SecAgg device masks: its change in name order, and with DP its gridded, noised one. */
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

  /** A setup of n devices, t = n, whose clip range leaves C + 16 noise share stds. */
  static RoundSetup setup(int n, int d, double clip, double z) {
    long[] roster = new long[n];
    for (int i = 0; i < n; i++) {
      roster[i] = i + 1;
    }
    double range = clip + DpGrid.QUANTIZATION_SIGMAS * z * clip / Math.sqrt(n);
    return new RoundSetup(1, roster, n, n - 1, d, range, new byte[32], clip, z);
  }

  /** Python's DpGrid: rounded inside C first, then a discrete Gaussian share in grid steps. */
  @Test
  public void withDpTheChangeIsRoundedInsideCAndCarriesItsNoiseShareOnTheGrid() {
    int d = 200_000;
    double clip = 0.5;
    double z = 1.0;
    int t = 4;
    DpGrid grid = DpGrid.of(setup(t, d, clip, z), clip, z);
    // norm <= C, every coordinate just past a midpoint between levels, away from zero
    double c = grid.offset;
    double step = grid.step;
    double level = Math.floor((clip / Math.sqrt(d) + c) / step - 0.501);
    double size = (level + 0.501) * step - c;
    long bigger = (long) ((clip * clip - d * size * size)
        / ((size + step) * (size + step) - size * size));
    double[] outward = new double[d];
    double naive = 0;
    for (int i = 0; i < d; i++) {
      outward[i] = (i % 2 == 0 ? 1 : -1) * (i < bigger ? size + step : size);
      double x = Math.rint((outward[i] + c) / step) * step - c;  // rounded without room
      naive += x * x;
    }
    assertTrue("rounding alone goes past C", Math.sqrt(naive) > clip);
    double[] rounded = outward.clone();
    grid.round(rounded);
    double squared = 0;
    for (double r : rounded) {
      assertEquals(Math.rint(r), r, 0.0);
      double x = r * step - c;
      squared += x * x;
    }
    assertTrue("rounded norm " + Math.sqrt(squared) + " within C", Math.sqrt(squared) <= clip);

    double[] change = new double[d];
    change[0] = 30;  // norm 30: clipped to C - room
    double[] levels = change.clone();
    grid.round(levels);
    grid.privatize(change, new Random(0));
    double sum = 0;
    double sumSquared = 0;
    for (int i = 0; i < d; i++) {
      double steps = (change[i] + grid.offset) / grid.step;
      assertEquals("on the grid", Math.rint(steps), steps, 1e-6);
      double noise = (Math.rint(steps) - levels[i]) * grid.step;
      sum += noise;
      sumSquared += noise * noise;
    }
    double std = Math.sqrt(sumSquared / d - Math.pow(sum / d, 2));
    assertEquals(z * clip / Math.sqrt(t), std, 0.01 * z * clip / Math.sqrt(t));
  }

  @Test
  public void aGridThatCannotCarryTheNoiseIsRefusedBeforeAnythingIsSent() {
    RoundSetup honest = setup(5, 8, 1.0, 1.0);
    RoundSetup lying = new RoundSetup(1, honest.roster, 5, 4, 8, 1.0, new byte[32], 1.0, 1.0);
    assertThrows(SecAggException.class, () -> DpGrid.of(lying, 1.0, 1.0));  // c = C
    int many = RoundSetup.MAX_CLIENTS;
    RoundSetup coarse = setup(many, 8, 1.0, 1e-4);
    SecAggException small = assertThrows(SecAggException.class,
        () -> DpGrid.of(coarse, 1.0, 1e-4));
    assertTrue(small.getMessage(), small.getMessage().startsWith(
        "secagg: the round's grid cannot carry DP: a noise share is "));
    RoundSetup wide = setup(many, 2_000_000, 1.0, 1e3);
    SecAggException room = assertThrows(SecAggException.class, () -> DpGrid.of(wide, 1.0, 1e3));
    assertTrue(room.getMessage(), room.getMessage().contains("coordinates can add"));
  }

  @Test
  public void discreteGaussianDrawsHaveTheNamedSpread() {
    Random random = new Random(1);
    for (double sigma : new double[] {DpGrid.MIN_NOISE_STEPS, 1e7}) {
      int n = 200_000;
      double sum = 0;
      double squared = 0;
      for (int i = 0; i < n; i++) {
        double y = DpGrid.discreteGaussian(sigma, random);
        sum += y;
        squared += y * y;
      }
      assertEquals(0, sum / n, 0.02 * sigma);
      assertEquals(sigma, Math.sqrt(squared / n), 0.01 * sigma);
    }
  }
}
