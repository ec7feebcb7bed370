package org.pflkit.core.fl;

import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.util.Map;
import java.util.TreeMap;
import org.pflkit.core.TensorData;

/**
 * Whether a round's training diverged: NaN or Inf in a float tensor the device would upload or
 * keep. The server refuses such an update (422), so the client does not send it and keeps its
 * state (the Python SDK's sdk/divergence.py does the same).
 */
final class Divergence {
  private Divergence() {}

  /** True when the update or the new private state holds a NaN or an infinity. */
  static boolean diverged(RoundTrainer.Result result) {
    return !finite(result.update) || (result.state != null && !finite(result.state.tensors));
  }

  /** Every F32 and F64 element of {@code tensors} is finite (other dtypes are not checked). */
  static boolean finite(Map<String, TensorData> tensors) {
    return nonFiniteTensor(tensors) == null;
  }

  /** The first tensor, in name order, with a NaN or an infinity (F32 and F64); else null. */
  static String nonFiniteTensor(Map<String, TensorData> tensors) {
    for (Map.Entry<String, TensorData> e : new TreeMap<String, TensorData>(tensors).entrySet()) {
      TensorData t = e.getValue();
      if (TensorData.F32.equals(t.dtype)) {
        for (float v : t.floats()) {
          if (!Float.isFinite(v)) {
            return e.getKey();
          }
        }
      } else if ("F64".equals(t.dtype)) {
        ByteBuffer values = ByteBuffer.wrap(t.bytes()).order(ByteOrder.LITTLE_ENDIAN);
        while (values.hasRemaining()) {
          if (!Double.isFinite(values.getDouble())) {
            return e.getKey();
          }
        }
      }
    }
    return null;
  }
}
