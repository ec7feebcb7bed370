package org.pflkit.core.fl;

import java.util.Locale;

/**
 * The HTTP protocol between a device and {@code pfl-server}, as the Python SDK speaks it: paths,
 * JSON keys, task statuses and the upload's metadata key. Written once here for Java; the
 * Python side's names live in {@code pflkit.sdk.protocol} and the server's schemas.
 */
public final class Wire {
  private Wire() {}

  public static final String PREFIX = "/v1";
  public static final String ENROLL = PREFIX + "/clients/enroll";
  public static final String TASK = PREFIX + "/task";
  public static final String HEALTH = PREFIX + "/health";

  /** {@code GET}: the global state with this SHA-256 (safetensors). */
  public static String global(String digest) {
    return PREFIX + "/globals/" + digest;
  }

  /** {@code PUT}: one update (safetensors body) for a round, weighted by {@code numSamples}. */
  public static String update(long runId, long round, long numSamples) {
    return String.format(Locale.ROOT, "%s/runs/%d/rounds/%d/update?%s=%d", PREFIX, runId, round,
        NUM_SAMPLES, numSamples);
  }

  /** The secure-aggregation steps of a round: {@code <this>/keys}, {@code /shares}, ... */
  public static String secagg(long runId, long round) {
    return String.format(Locale.ROOT, "%s/runs/%d/rounds/%d/secagg", PREFIX, runId, round);
  }

  // JSON keys (EnrollIn, CredentialsPublic, TaskPublic, ReceiptPublic; errors carry "detail")
  public static final String TOKEN = "token";
  public static final String CLIENT_ID = "client_id";
  public static final String SECRET = "secret";
  public static final String STATUS = "status";
  public static final String RETRY_AFTER = "retry_after";
  public static final String RUN_ID = "run_id";
  public static final String ROUND = "round";
  public static final String DEADLINE = "deadline";
  public static final String GLOBAL_HASH = "global_hash";
  public static final String CONFIG = "config";
  public static final String SHA256 = "sha256";
  public static final String DUPLICATE = "duplicate";
  public static final String DETAIL = "detail";
  public static final String NUM_SAMPLES = "num_samples";
  /**
   * The largest {@value #NUM_SAMPLES} the server's upload route takes (422 above it; a server's
   * own {@code max_num_samples} may be lower), the server's settings.MAX_NUM_SAMPLES.
   */
  public static final long MAX_NUM_SAMPLES = 1_000_000_000L;
  /**
   * A train task's {@code max_num_samples}: the most an update may weigh on this server, in [1,
   * {@link #MAX_NUM_SAMPLES}]. A round trained on more examples reports this many.
   */
  public static final String MAX_NUM_SAMPLES_KEY = "max_num_samples";
  /** A task of a run whose devices clip: the L2 norm the upload's change must stay within. */
  public static final String CLIP_NORM = "clip_norm";
  /** A task of a secure-aggregation round: the round's public setup. */
  public static final String SECAGG = "secagg";

  /** Upload metadata key: JSON object of metric name to finite number. */
  public static final String METRICS = "metrics";
  /** At most this many metrics per upload, names at most this long (else 400). */
  public static final int MAX_METRICS = 64;
  public static final int MAX_METRIC_NAME = 64;

  /** Seconds to wait before repeating a refused request; its presence makes any refusal
   * worth repeating. */
  public static final String RETRY_AFTER_HEADER = "retry-after";

  // task statuses
  public static final String TRAIN = "train";
  public static final String UPLOADED = "uploaded";
  public static final String WAIT = "wait";
  public static final String PAUSED = "paused";
  public static final String STOPPED = "stopped";
  public static final String FINISHED = "finished";

  /**
   * The longest JSON answer a device reads (a task, an upload's receipt, a SecAgg step's
   * answer: well under 2 MiB), the Python SDK's MAX_JSON_ANSWER; a global state is bounded by
   * the transport's own {@code maxBodyBytes}.
   */
  public static final int MAX_JSON_ANSWER = 16 << 20;

  public static final String OCTET_STREAM = "application/octet-stream";
  public static final String JSON = "application/json";
}
