package org.pflkit.core.fl;

import java.util.Collections;
import java.util.LinkedHashMap;
import java.util.Map;
import org.pflkit.core.Json;
import org.pflkit.core.JsonWriter;
import org.pflkit.core.Safetensors;
import org.pflkit.core.TensorData;

/**
 * A trained round not yet acknowledged: the exact upload bytes and the private state the round
 * produced, in one file written before the upload (the Python SDK's
 * {@code pending.safetensors} layout: a U8 tensor {@value #UPLOAD}, the state's tensors under
 * {@value #STATE_PREFIX}, and metadata {@value #META_KEY}). Re-sending the same bytes after a
 * kill is an idempotent retry on the server.
 */
final class PendingRound {
  static final String FILE = "pending.safetensors";
  static final String UPLOAD = "upload";
  static final String STATE_PREFIX = "state/";
  static final String META_KEY = "pflkit.pending";
  /** Metadata: the run config's {@link Task#configDigest} (the Python SDK keeps its own). */
  static final String CONFIG = "config_java";

  final long runId;
  final long round;
  final long numSamples;
  /** The global state it was trained on (null: a file of an older release). */
  final String globalHash;
  /** The {@link Task#configDigest} of the run it was trained in (null: an older file). */
  final String configDigest;
  final byte[] upload;
  /** The state to keep once the server has answered, or null to keep the current one. */
  final ClientState state;

  PendingRound(long runId, long round, long numSamples, String globalHash, String configDigest,
      byte[] upload, ClientState state) {
    this.runId = runId;
    this.round = round;
    this.numSamples = numSamples;
    this.globalHash = globalHash;
    this.configDigest = configDigest;
    this.upload = upload;
    this.state = state;
  }

  byte[] toBytes() {
    Map<String, TensorData> tensors = new LinkedHashMap<String, TensorData>();
    tensors.put(UPLOAD, new TensorData(TensorData.U8, new long[] {upload.length}, upload));
    Map<String, Object> meta = new LinkedHashMap<String, Object>();
    meta.put(Wire.RUN_ID, runId);
    meta.put(Wire.ROUND, round);
    meta.put(Wire.NUM_SAMPLES, numSamples);
    meta.put(Wire.GLOBAL_HASH, globalHash);
    meta.put(CONFIG, configDigest);
    meta.put("has_state", state != null);
    if (state != null) {
      for (Map.Entry<String, TensorData> e : state.tensors.entrySet()) {
        tensors.put(STATE_PREFIX + e.getKey(), e.getValue());
      }
      meta.put("client_meta", state.meta);
    }
    return Safetensors.write(tensors, Collections.singletonMap(META_KEY,
        JsonWriter.write(meta)));
  }

  static PendingRound fromBytes(byte[] bytes, String source) throws Safetensors.FormatException {
    Safetensors file = Safetensors.parse(bytes, source);
    TensorData upload = file.tensors.get(UPLOAD);
    String json = file.metadata.get(META_KEY);
    if (upload == null || !TensorData.U8.equals(upload.dtype) || json == null) {
      throw new Safetensors.FormatException(source + ": not a pending round");
    }
    Map<?, ?> meta;
    try {
      meta = (Map<?, ?>) Json.parse(json);
    } catch (RuntimeException e) {
      throw new Safetensors.FormatException(source + ": " + META_KEY + " is not a JSON object");
    }
    ClientState state = null;
    if (Boolean.TRUE.equals(meta.get("has_state"))) {
      Map<String, TensorData> tensors = new LinkedHashMap<String, TensorData>();
      for (Map.Entry<String, TensorData> e : file.tensors.entrySet()) {
        if (e.getKey().startsWith(STATE_PREFIX)) {
          tensors.put(e.getKey().substring(STATE_PREFIX.length()), e.getValue());
        }
      }
      @SuppressWarnings("unchecked")
      Map<String, Object> clientMeta = meta.get("client_meta") instanceof Map
          ? (Map<String, Object>) meta.get("client_meta") : Collections.<String, Object>emptyMap();
      state = new ClientState(tensors, clientMeta);
    }
    return new PendingRound(integer(meta, Wire.RUN_ID, source), integer(meta, Wire.ROUND, source),
        integer(meta, Wire.NUM_SAMPLES, source), string(meta, Wire.GLOBAL_HASH),
        string(meta, CONFIG), upload.bytes(), state);
  }

  /**
   * Whether the task shows the server is done with the pending round (the Python SDK's rule):
   * the run ended or changed, it moved past the round, or it has this client's upload. Until
   * then (a pause, a wait while the round closes) the pending bytes are kept and re-sent, so a
   * round is never trained twice.
   */
  boolean isOver(Task task) {
    if (Wire.FINISHED.equals(task.status) || Wire.STOPPED.equals(task.status)
        || task.runId == null || task.runId != runId) {
      return true;
    }
    return task.round != null && (task.round > round
        || (task.round == round && Wire.UPLOADED.equals(task.status)));
  }

  /**
   * The upload's {@code num_samples}: the examples it trained on, at most the task's {@link
   * Task#maxNumSamples} (the Python SDK's {@code PendingRound.weight}). Capped when sent, not
   * when trained: a round trained before the server's limit was lowered (or under an older
   * server) is still accepted, not refused (422) at every re-send until the round closes.
   */
  long weight(Task task) {
    return task.maxNumSamples == null ? numSamples : Math.min(numSamples, task.maxNumSamples);
  }

  /**
   * Why this round belongs to a history the server no longer has, or null (the Python SDK's
   * {@code superseded}). A run's round numbers only grow, so a task of the same run at an
   * earlier round, or at this round on another global state, comes from a server restored
   * from a backup: uploaded there, the update would be averaged into a round it was not
   * trained for. A task of the same run under another config comes from a run recreated under
   * its id.
   */
  String superseded(Task task) {
    if (task.runId == null || task.runId != runId) {
      return null;
    }
    if (configDigest != null && !task.config.isEmpty()  // tasks but train ones may carry none
        && !configDigest.equals(task.configDigest())) {
      return "run " + runId + " runs under another config";
    }
    if (task.round == null || task.round > round) {
      return null;
    }
    if (task.round < round) {
      return "run " + runId + " is back at round " + task.round;
    }
    if (globalHash != null && task.globalHash != null && !task.globalHash.equals(globalHash)) {
      return "run " + runId + " started round " + task.round + " again, from another global "
          + "state";
    }
    return null;
  }

  private static String string(Map<?, ?> meta, String key) {
    return meta.get(key) instanceof String ? (String) meta.get(key) : null;
  }

  private static long integer(Map<?, ?> meta, String key, String source)
      throws Safetensors.FormatException {
    Long n = Json.integer(meta.get(key), 0, Long.MAX_VALUE);
    if (n == null) {
      throw new Safetensors.FormatException(source + ": pending metadata lacks " + key);
    }
    return n;
  }
}
