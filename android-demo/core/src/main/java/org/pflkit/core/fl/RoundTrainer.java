package org.pflkit.core.fl;

import java.util.Collections;
import java.util.LinkedHashMap;
import java.util.Map;
import org.pflkit.core.Safetensors;
import org.pflkit.core.TensorData;

/**
 * The device's local training for one round: the app's part of a federated round (on a phone
 * an ExecuTorch training program; in the host tests a helper). Called once per round: the
 * client persists the result before uploading, so an app killed mid-upload never trains the
 * same round again.
 */
public interface RoundTrainer {
  /**
   * Train on the device's data from the round's global state. {@code state} is the private
   * state this run left on the device, or null on the device's first round of the run.
   */
  Result train(Task task, Safetensors global, ClientState state) throws Exception;

  /** What a round produced: the update to upload and the device's new private state. */
  final class Result {
    /** Tensors the server aggregates: exactly the run's update schema (names, shapes, dtypes). */
    public final Map<String, TensorData> update;
    /**
     * The aggregation weight (the number of training examples used), in [0,
     * {@link Wire#MAX_NUM_SAMPLES}]. The upload reports at most the task's {@link
     * Task#maxNumSamples} (the server's {@code max_num_samples}): more examples weigh that.
     */
    public final long numSamples;
    /**
     * Numbers the server averages into the round's metrics (may be empty); NaN and infinite
     * ones are not sent, as the Python SDK does (a round whose weights are finite is uploaded
     * whatever its loss; one with NaN or Inf weights is {@code diverged}).
     */
    public final Map<String, Double> metrics;
    /** The new private state, or null to keep the current one. */
    public final ClientState state;

    public Result(Map<String, TensorData> update, long numSamples, Map<String, Double> metrics,
        ClientState state) {
      if (numSamples < 0 || numSamples > Wire.MAX_NUM_SAMPLES) {  // else 422 at every re-send
        throw new IllegalArgumentException("numSamples must be in [0, " + Wire.MAX_NUM_SAMPLES
            + "] (the examples the round trained on), found " + numSamples);
      }
      if (metrics.size() > Wire.MAX_METRICS) {
        throw new IllegalArgumentException(metrics.size() + " metrics: the server takes at most "
            + Wire.MAX_METRICS);
      }
      for (Map.Entry<String, Double> m : metrics.entrySet()) {
        if (!printableName(m.getKey())) {  // the server refuses it (400), at every re-send
          throw new IllegalArgumentException("a metric name must be 1 to " + Wire.MAX_METRIC_NAME
              + " printable characters (no control character or line break)");
        }
        if (m.getValue() == null) {
          throw new IllegalArgumentException("metric " + m.getKey() + " has no value (null)");
        }
      }
      this.update = Collections.unmodifiableMap(new LinkedHashMap<String, TensorData>(update));
      this.numSamples = numSamples;
      this.metrics = Collections.unmodifiableMap(new LinkedHashMap<String, Double>(metrics));
      this.state = state;
    }

    /**
     * 1 to {@link Wire#MAX_METRIC_NAME} characters (code points, as Python counts them: an
     * emoji is one, not two UTF-16 units), each printable as Python's {@code str.isprintable}
     * (the server's rule): no control, format, private-use, unassigned or surrogate character,
     * and no separator but the space.
     */
    static boolean printableName(String name) {
      if (name == null || name.isEmpty()
          || name.codePointCount(0, name.length()) > Wire.MAX_METRIC_NAME) {
        return false;
      }
      for (int i = 0; i < name.length(); i += Character.charCount(name.codePointAt(i))) {
        int c = name.codePointAt(i);
        switch (Character.getType(c)) {
          case Character.CONTROL:
          case Character.FORMAT:
          case Character.PRIVATE_USE:
          case Character.SURROGATE:
          case Character.UNASSIGNED:
          case Character.LINE_SEPARATOR:
          case Character.PARAGRAPH_SEPARATOR:
            return false;
          case Character.SPACE_SEPARATOR:
            if (c != ' ') {
              return false;
            }
            break;
          default:
            break;
        }
      }
      return true;
    }
  }
}
