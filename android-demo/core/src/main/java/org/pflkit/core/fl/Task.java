package org.pflkit.core.fl;

import java.nio.charset.Charset;
import java.util.Arrays;
import java.util.Collections;
import java.util.List;
import java.util.Map;
import org.pflkit.core.Json;
import org.pflkit.core.JsonWriter;
import org.pflkit.core.Sha256;

/**
 * What the server wants now ({@code GET /v1/task}): {@code train} (with the round, the global
 * state's hash and the run's algorithm config), {@code uploaded}, {@code wait}, {@code paused},
 * {@code stopped} or {@code finished}. Fields the status does not carry are null.
 */
public final class Task {
  public final String status;
  /** Seconds until polling again is useful. */
  public final double retryAfterSeconds;
  /**
   * The longest poll interval a task may ask for, in seconds: pfl-server sends twice its tick
   * (at most 120 s); anything longer, or negative, is not a server's answer.
   */
  public static final double MAX_RETRY_AFTER = 3600;
  /** What a task's status may be (the Python SDK's protocol.TASK_STATUSES). */
  public static final List<String> STATUSES = Collections.unmodifiableList(Arrays.asList(
      Wire.TRAIN, Wire.UPLOADED, Wire.WAIT, Wire.PAUSED, Wire.STOPPED, Wire.FINISHED));
  /** The largest learning rate a run config has (the Python SDK's config_types). */
  public static final double MAX_LR = 10;
  /** The most rounds a run has (the Python SDK's config_types.MAX_ROUNDS). */
  public static final long MAX_ROUNDS = 100_000;
  /** The most axes one input has (the Python SDK's data.spec.MAX_AXES). */
  public static final int MAX_AXES = 8;
  public final Long runId;
  public final Long round;
  /** Unix seconds. */
  public final Double deadline;
  public final String globalHash;
  /**
   * The L2 norm the upload's change to the global state must stay within (the run's devices
   * clip: {@code dp_clip_on_device}; the client clips before uploading), or null.
   */
  public final Double clipNorm;
  /**
   * The most an update may weigh on this server ({@code max_num_samples}, in [1, {@link
   * Wire#MAX_NUM_SAMPLES}]; the upload reports at most this many examples), or null (an older
   * server, which does not say).
   */
  public final Long maxNumSamples;
  /** A secure-aggregation round's public setup (the update leaves masked), or null. */
  public final Map<String, Object> secagg;
  /**
   * The run's config (algorithm, params, model, input_shape, lr_schedule, local, ...) or empty;
   * the same for every round of a run.
   */
  public final Map<String, Object> config;

  private Task(Map<String, Object> json) {
    status = string(json.get(Wire.STATUS), Wire.STATUS);
    if (!STATUSES.contains(status)) {  // never echoed: it is the server's text
      throw new IllegalArgumentException("task: status must be one of "
          + String.join(", ", STATUSES));
    }
    retryAfterSeconds = number(json.get(Wire.RETRY_AFTER), Wire.RETRY_AFTER);
    if (!(retryAfterSeconds >= 0 && retryAfterSeconds <= MAX_RETRY_AFTER)) {  // NaN too
      throw new IllegalArgumentException("task: retry_after must be a number in [0, "
          + (int) MAX_RETRY_AFTER + "] (seconds), found " + retryAfterSeconds);
    }
    runId = optionalInteger(json.get(Wire.RUN_ID), Wire.RUN_ID);
    round = optionalInteger(json.get(Wire.ROUND), Wire.ROUND);
    Object d = json.get(Wire.DEADLINE);
    deadline = d == null || d == Json.NULL ? null : number(d, Wire.DEADLINE);
    Object h = json.get(Wire.GLOBAL_HASH);
    globalHash = h == null || h == Json.NULL ? null : string(h, Wire.GLOBAL_HASH);
    Object clip = json.get(Wire.CLIP_NORM);
    clipNorm = clip == null || clip == Json.NULL ? null : number(clip, Wire.CLIP_NORM);
    if (clipNorm != null && !(clipNorm > 0 && clipNorm < Double.POSITIVE_INFINITY)) {
      throw new IllegalArgumentException("task: clip_norm must be a positive number, found "
          + clipNorm);
    }
    Object limit = json.get(Wire.MAX_NUM_SAMPLES_KEY);
    maxNumSamples = limit == null || limit == Json.NULL ? null
        : Json.integer(limit, 1, Wire.MAX_NUM_SAMPLES);
    if (limit != null && limit != Json.NULL && maxNumSamples == null) {
      throw new IllegalArgumentException("task: " + Wire.MAX_NUM_SAMPLES_KEY + " must be an "
          + "integer in [1, " + Wire.MAX_NUM_SAMPLES + "]");
    }
    Object sa = json.get(Wire.SECAGG);
    if (sa != null && sa != Json.NULL && !(sa instanceof Map)) {  // never read as "no SecAgg"
      throw new IllegalArgumentException("secagg: the round's setup must be an object");
    }
    secagg = sa instanceof Map ? Collections.unmodifiableMap(cast(sa)) : null;
    Object c = json.get(Wire.CONFIG);
    config = c instanceof Map ? Collections.unmodifiableMap(cast(c)) : Collections.<String,
        Object>emptyMap();
    if (Wire.TRAIN.equals(status)) {  // it trains: everything that takes must be there
      if (runId == null || round == null) {
        throw new IllegalArgumentException("task: run_id and round are required");
      }
      if (!(c instanceof Map)) {
        throw new IllegalArgumentException("task: config must be an object");
      }
      if (globalHash == null || !globalHash.matches("[0-9a-f]{64}")) {  // in the download's URL
        throw new IllegalArgumentException("task: global_hash must be 64 lowercase hex digits "
            + "(a SHA-256)");
      }
    }
  }

  /** Parse the server's JSON answer; throws IllegalArgumentException naming the bad field. */
  public static Task parse(byte[] body) {
    Object root = Json.parse(new String(body, Charset.forName("UTF-8")));
    if (!(root instanceof Map)) {
      throw new IllegalArgumentException("task: expected a JSON object");
    }
    return new Task(cast(root));
  }

  public boolean isTrain() {
    return Wire.TRAIN.equals(status);
  }

  /** A number from the run config, e.g. {@code "num_classes"}; throws when absent. */
  public double configNumber(String key) {
    return number(config.get(key), "config." + key);
  }

  /** A string from the run config, e.g. {@code "algorithm"}; throws when absent. */
  public String configString(String key) {
    return string(config.get(key), "config." + key);
  }

  /**
   * This task's round's learning rate from {@code config.lr_schedule}: {@code lr * decay^round},
   * the formula of the Python SDK's {@code LearningRateSchedule.at} (Math.pow may differ from
   * Python's pow in the last bit). A finished run's round is its number of rounds: the rate of
   * the post-federation stage. Checked as the Python SDK checks a task's config: {@code lr} in
   * (0, 10], {@code decay} in (0, 1], {@code config.total_rounds} an integer in [1, 100000],
   * and the last round's rate at least float32's smallest normal (a rate of -1 trained uphill).
   */
  public double learningRate() {
    Object node = config.get("lr_schedule");
    if (!(node instanceof Map) || round == null) {
      throw new IllegalArgumentException("task: needs round and config.lr_schedule");
    }
    Map<String, Object> schedule = cast(node);
    double lr = number(schedule.get("lr"), "config.lr_schedule.lr");
    double decay = number(schedule.get("decay"), "config.lr_schedule.decay");
    long rounds = integer(config.get("total_rounds"), "config.total_rounds", MAX_ROUNDS);
    if (!(lr > 0 && lr <= MAX_LR && decay > 0 && decay <= 1
        && lr * Math.pow(decay, rounds) >= Float.MIN_NORMAL)) {
      throw new IllegalArgumentException("task: config.lr_schedule must have lr in (0, "
          + (int) MAX_LR + "], decay in (0, 1] and lr * decay^total_rounds >= "
          + Float.MIN_NORMAL);
    }
    return lr * Math.pow(decay, round);
  }

  /**
   * {@code config.input_shape}, e.g. C, H, W: 1 to {@link #MAX_AXES} integers in [1, 2^31 - 1]
   * (the Python SDK's TaskConfig; 1.5 was read as 1).
   */
  public long[] inputShape() {
    Object node = config.get("input_shape");
    if (!(node instanceof List) || ((List<?>) node).isEmpty()
        || ((List<?>) node).size() > MAX_AXES) {
      throw new IllegalArgumentException("task: config.input_shape must be a list of 1 to "
          + MAX_AXES + " integers");
    }
    List<?> list = (List<?>) node;
    long[] out = new long[list.size()];
    for (int i = 0; i < out.length; i++) {
      out[i] = integer(list.get(i), "config.input_shape[" + i + "]", Integer.MAX_VALUE);
    }
    return out;
  }

  /**
   * What identifies the run's config: SHA-256 of its canonical JSON ({@link
   * JsonWriter#canonical}).
   * The same every round of a run; another value under the same run id means the run was
   * recreated or changed on the server (e.g. another model). Not the Python SDK's
   * {@code config_digest} (Python's {@code json.dumps} bytes, its float repr included, are not
   * reproducible here), so the client keeps it under its own key.
   */
  public String configDigest() {
    return Sha256.hex(JsonWriter.canonical(config).getBytes(Charset.forName("UTF-8")));
  }

  @SuppressWarnings("unchecked")
  private static Map<String, Object> cast(Object map) {
    return (Map<String, Object>) map;
  }

  private static String string(Object v, String key) {
    if (!(v instanceof String)) {
      throw new IllegalArgumentException("task: " + key + " must be a string, found "
          + Json.kind(v));
    }
    return (String) v;
  }

  private static double number(Object v, String key) {
    if (!Json.isNumber(v)) {
      throw new IllegalArgumentException("task: " + key + " must be a number, found "
          + Json.kind(v));
    }
    return ((Number) v).doubleValue();
  }

  /** A JSON integer in [1, max]: 1.0, 1.5 and 1e0 are refused, as the Python SDK does. */
  private static long integer(Object v, String key, long max) {
    Long n = Json.integer(v, 1, max);
    if (n == null) {
      throw new IllegalArgumentException("task: " + key + " must be an integer in [1, " + max
          + "]");
    }
    return n;
  }

  private static Long optionalInteger(Object v, String key) {
    if (v == null || v == Json.NULL) {
      return null;
    }
    Long n = Json.integer(v, 0, Credentials.MAX_ID);  // the server's 32-bit ids
    if (n == null) {
      throw new IllegalArgumentException("task: " + key + " must be an integer in [0, "
          + Credentials.MAX_ID + "]");
    }
    return n;
  }
}
