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
    /** The aggregation weight (the number of training examples used). */
    public final long numSamples;
    /** Finite numbers the server averages into the round's metrics (may be empty). */
    public final Map<String, Double> metrics;
    /** The new private state, or null to keep the current one. */
    public final ClientState state;

    public Result(Map<String, TensorData> update, long numSamples, Map<String, Double> metrics,
        ClientState state) {
      if (numSamples < 0) {
        throw new IllegalArgumentException("numSamples must be >= 0, found " + numSamples);
      }
      if (metrics.size() > Wire.MAX_METRICS) {
        throw new IllegalArgumentException(metrics.size() + " metrics: the server takes at most "
            + Wire.MAX_METRICS);
      }
      for (Map.Entry<String, Double> m : metrics.entrySet()) {
        if (m.getKey().length() > Wire.MAX_METRIC_NAME) {
          throw new IllegalArgumentException("metric name longer than " + Wire.MAX_METRIC_NAME
              + " characters: " + m.getKey());
        }
        if (m.getValue() == null || m.getValue().isNaN() || m.getValue().isInfinite()) {
          throw new IllegalArgumentException("metric " + m.getKey() + " is not finite");
        }
      }
      this.update = Collections.unmodifiableMap(new LinkedHashMap<String, TensorData>(update));
      this.numSamples = numSamples;
      this.metrics = Collections.unmodifiableMap(new LinkedHashMap<String, Double>(metrics));
      this.state = state;
    }
  }
}
