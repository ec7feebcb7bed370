package org.pflkit.core.fl;

import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.util.LinkedHashMap;
import java.util.Map;
import org.pflkit.core.TensorData;

/**
 * Clipping on the device, for a run whose devices clip ({@code [aggregation]
 * dp_clip_on_device}: its tasks carry {@code clip_norm}). The Python SDK's rule
 * ({@code pflkit.sdk.aggregation_rules.clip_update}): the update's change to the round's global
 * state, over all its floating tensors at once, is scaled to L2 norm at most C in float64, and
 * each value is cast back to its tensor's dtype; integer tensors pass unchanged. The server
 * refuses (422) an upload whose change is over C. F32 and F64 are clipped; other floating
 * dtypes (F16, BF16, F8) are refused here: this client's updates are float32, and Java 8 has no
 * cast to them that rounds as PyTorch does.
 */
final class UpdateClipping {
  private UpdateClipping() {}

  /** The update with its floating change to {@code global} scaled to L2 norm <= maxNorm. */
  static Map<String, TensorData> clip(Map<String, TensorData> global,
      Map<String, TensorData> update, double maxNorm) {
    Map<String, double[]> deltas = new LinkedHashMap<String, double[]>();
    double squared = 0;
    for (Map.Entry<String, TensorData> e : update.entrySet()) {
      String dtype = e.getValue().dtype;
      if (dtype.equals("F32") || dtype.equals("F64")) {
        TensorData base = global.get(e.getKey());
        if (base == null || !base.dtype.equals(dtype) || base.numel() != e.getValue().numel()) {
          throw new IllegalArgumentException("cannot clip " + e.getKey()
              + ": the global state has no " + dtype + " tensor of its size");
        }
        double[] g = values(base);
        double[] d = values(e.getValue());
        for (int i = 0; i < d.length; i++) {
          d[i] -= g[i];
          squared += d[i] * d[i];
        }
        deltas.put(e.getKey(), d);
      } else if (dtype.startsWith("F") || dtype.equals("BF16")) {
        throw new IllegalArgumentException("cannot clip " + e.getKey() + ": " + dtype
            + " updates are not supported (F32, F64)");
      }
    }
    double norm = Math.sqrt(squared);
    if (norm <= maxNorm) {
      return update;
    }
    double scale = maxNorm / norm;
    Map<String, TensorData> out = new LinkedHashMap<String, TensorData>(update);
    for (Map.Entry<String, double[]> e : deltas.entrySet()) {
      TensorData base = global.get(e.getKey());
      double[] g = values(base);
      double[] d = e.getValue();
      for (int i = 0; i < d.length; i++) {
        d[i] = g[i] + d[i] * scale;
      }
      out.put(e.getKey(), tensor(base.dtype, base.shape(), d));
    }
    return out;
  }

  private static double[] values(TensorData t) {
    ByteBuffer buf = ByteBuffer.wrap(t.bytes()).order(ByteOrder.LITTLE_ENDIAN);
    double[] out = new double[(int) t.numel()];
    for (int i = 0; i < out.length; i++) {
      out[i] = t.dtype.equals("F64") ? buf.getDouble() : buf.getFloat();
    }
    return out;
  }

  /** Each value cast to the dtype (round to nearest, as PyTorch's {@code .to}). */
  private static TensorData tensor(String dtype, long[] shape, double[] values) {
    boolean f64 = dtype.equals("F64");
    ByteBuffer buf = ByteBuffer.allocate(values.length * (f64 ? 8 : 4))
        .order(ByteOrder.LITTLE_ENDIAN);
    for (double v : values) {
      if (f64) {
        buf.putDouble(v);
      } else {
        buf.putFloat((float) v);
      }
    }
    return new TensorData(dtype, shape, buf.array());
  }
}
