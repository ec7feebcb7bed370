package org.pflkit.core.fl;

import java.io.File;
import java.io.IOException;
import java.net.URI;
import java.net.URISyntaxException;
import java.nio.charset.Charset;
import java.util.Arrays;
import java.util.Collections;
import java.util.LinkedHashMap;
import java.util.Locale;
import java.util.Map;
import java.util.Random;
import org.pflkit.core.AtomicFiles;
import org.pflkit.core.Json;
import org.pflkit.core.JsonWriter;
import org.pflkit.core.Safetensors;
import org.pflkit.core.Sha256;
import org.pflkit.core.TensorData;

/**
 * A phone (or any JVM) as a federated client of {@code pfl-server}, speaking the Python SDK's
 * protocol: enroll once, then {@link #step} per round (poll, download the global state unless
 * cached by hash, train through a {@link RoundTrainer}, upload). Everything it keeps lives in one
 * folder, in the Python SDK's layout, and survives the app being killed:
 *
 * <pre>
 *   credentials.json            server URL, client id, secret (owner-only)
 *   cache.json                  cached global state's hash, client state's run and config,
 *                               SecAgg round begun
 *   global.safetensors          the newest downloaded global state
 *   client_state.safetensors    the private state (never uploaded)
 *   pending.safetensors         a trained, unacknowledged round: the exact upload bytes
 * </pre>
 *
 * <p>A round is committed on the device only once the server is done with it (it answered the
 * upload, or the run moved on), so an app killed at any point, or a run paused between training
 * and upload, re-sends the same bytes (counted once by the server) instead of training twice.
 * Requests are retried as {@link ServerConnection} says (network errors, 429, 5xx, and any answer
 * carrying {@code Retry-After} in seconds, at most an hour: the server's mark of a refusal
 * worth repeating, e.g. a 409 for an enrollment that lost a race); other 4xx answers raise
 * {@link ServerRefused}. Not thread-safe: one client object per folder, used from one thread.
 */
public final class FederatedClient {
  static final String CREDENTIALS = "credentials.json";
  static final String CACHE = "cache.json";
  static final String GLOBAL = "global.safetensors";
  static final String CLIENT_STATE = "client_state.safetensors";
  /** cache.json: [run, round] of the last SecAgg round this device began (Python's name). */
  static final String SECAGG_ROUND = "secagg_round";
  /** cache.json: the run whose private state client_state.safetensors holds. */
  static final String STATE_RUN = "state_run";
  /**
   * cache.json: that state's run config, {@link Task#configDigest}. The Python SDK's
   * {@code state_config} is its own digest, which this client cannot compute: it is dropped
   * when this client replaces the state, as it no longer describes it.
   */
  static final String STATE_CONFIG = "state_config_java";
  private static final String PYTHON_STATE_CONFIG = "state_config";
  private static final Charset UTF8 = Charset.forName("UTF-8");

  /** Waits between retries (a seam so tests can record the waits). */
  public interface Sleeper {
    void sleep(long millis) throws InterruptedException;
  }

  public static final Sleeper THREAD_SLEEP = new Sleeper() {
    @Override
    public void sleep(long millis) throws InterruptedException {
      Thread.sleep(millis);
    }
  };

  private final String server;
  private final File dir;
  private final ServerConnection connection;
  private final Sleeper sleeper;
  /** Null until enrolled. */
  private Credentials credentials;

  /**
   * A client keeping its files in {@code stateDir}; refuses a folder enrolled with another
   * server.
   */
  public FederatedClient(String server, File stateDir, HttpTransport http, RetryPolicy retry,
      Sleeper sleeper) throws IOException {
    checkServer(server);
    this.server = server.endsWith("/") ? server.substring(0, server.length() - 1) : server;
    this.dir = stateDir;
    if (!dir.isDirectory() && !dir.mkdirs()) {
      throw new IOException("cannot create " + dir);
    }
    this.connection = new ServerConnection(this.server, http, retry, sleeper,
        new Random(dir.getAbsolutePath().hashCode()));
    this.sleeper = sleeper;
    this.credentials = Credentials.fromJson(readJson(CREDENTIALS),
        new File(dir, CREDENTIALS).getPath());
    if (credentials != null && !credentials.server.equals(this.server)) {
      throw new IllegalArgumentException(dir + " is enrolled with " + credentials.server
          + ", not " + this.server);
    }
  }

  /**
   * IllegalArgumentException unless {@code server} is an http(s) URL naming a host, without
   * user:password@ (they would be stored and shown in messages). A typo such as a missing
   * "https://" would otherwise fail every request as a network error, retried for minutes.
   * The message never quotes the URL, which could hold a password.
   */
  private static void checkServer(String server) {
    URI uri;
    try {
      uri = new URI(server);
    } catch (URISyntaxException e) {
      throw new IllegalArgumentException("the server URL is not a URL (" + e.getReason() + ")");
    }
    String scheme = uri.getScheme() == null ? "" : uri.getScheme().toLowerCase(Locale.ROOT);
    if (!(scheme.equals("http") || scheme.equals("https")) || uri.getHost() == null) {
      throw new IllegalArgumentException("the server URL must be http:// or https:// and name "
          + "a host, e.g. https://fl.example.org");
    }
    if (uri.getRawUserInfo() != null) {
      throw new IllegalArgumentException("the server URL holds a user name or password "
          + "(user:password@): the device sends its own credentials (Bearer); remove them");
    }
  }

  /** HttpURLConnection (10 s connect, 120 s read), default retries, real sleeping. */
  public static FederatedClient open(String server, File stateDir) throws IOException {
    return new FederatedClient(server, stateDir, new UrlConnectionTransport(10_000, 120_000),
        RetryPolicy.defaults(), THREAD_SLEEP);
  }

  public boolean isEnrolled() {
    return credentials != null;
  }

  /** The id the server gave this device. */
  public long clientId() {
    if (!isEnrolled()) {
      throw new IllegalStateException("not enrolled: call enroll(token) first");
    }
    return credentials.clientId;
  }

  /** Trade a one-time enrollment token for credentials (stored owner-only); returns the id. */
  public long enroll(String token) throws IOException {
    if (!Credentials.sendable(token)) {  // a pasted token's stray newline, named, not sent
      throw new IllegalArgumentException("the token or secret holds a space, a control "
          + "character (a stray newline or carriage return?) or a non-ASCII character; it was "
          + "not sent");
    }
    byte[] body = JsonWriter.write(Collections.singletonMap(Wire.TOKEN, token)).getBytes(UTF8);
    Credentials creds = Credentials.fromAnswer(server, ServerConnection.json(
        connection.send("POST", Wire.ENROLL, body, Wire.JSON, null, token,
            Wire.MAX_JSON_ANSWER)));
    AtomicFiles.writePrivate(new File(dir, CREDENTIALS),
        JsonWriter.write(creds.toJson()).getBytes(UTF8));
    credentials = creds;
    return clientId();
  }

  /** Ask the server what to do now. */
  public Task poll() throws IOException {
    try {
      return Task.parse(request("GET", Wire.TASK, null, null).body);
    } catch (IllegalArgumentException e) {
      throw new IOException("unreadable task: " + e.getMessage(), e);
    }
  }

  /** The global state with this SHA-256: the cached copy, else downloaded and verified. */
  public Safetensors globalState(String digest) throws IOException {
    File file = new File(dir, GLOBAL);
    Map<String, Object> cache = readJson(CACHE);
    if (digest.equals(cache.get(Wire.GLOBAL_HASH))) {
      byte[] cached = AtomicFiles.readOrNull(file);
      if (cached != null && Sha256.hex(cached).equals(digest)) {
        return Safetensors.parse(cached, file.getPath());
      }
    }
    byte[] data = connection.send("GET", Wire.global(digest), null, null, secret(), null,
        Integer.MAX_VALUE).body;  // not JSON: bounded by the transport's maxBodyBytes
    String actual = Sha256.hex(data);
    if (!actual.equals(digest)) {
      throw new IOException("downloaded global state hashes to " + actual + ", not " + digest);
    }
    Safetensors parsed = Safetensors.parse(data, "global " + digest);
    AtomicFiles.write(file, data);
    cache.put(Wire.GLOBAL_HASH, digest);
    writeJson(CACHE, cache);
    return parsed;
  }

  /** The private state of the current run, or null before the device's first round in it. */
  public ClientState clientState(long runId) throws IOException {
    Object run = readJson(CACHE).get(STATE_RUN);
    byte[] bytes = AtomicFiles.readOrNull(new File(dir, CLIENT_STATE));
    if (bytes == null || !Long.valueOf(runId).equals(run)) {
      return null;
    }
    return ClientState.fromBytes(bytes, CLIENT_STATE);
  }

  /**
   * Poll once; when sampled, train (or resume the persisted round) and upload. One call per
   * round; sleep {@code retryAfterSeconds} between calls that uploaded nothing.
   */
  public StepResult step(RoundTrainer trainer) throws Exception {
    Task task = poll();
    PendingRound pending = readPending();
    if (pending != null && pending.superseded(task) != null) {
      discardPending();  // of a history the server lost (a restored backup): never sent there
      pending = null;
    }
    if (pending != null && pending.isOver(task)) {
      commit(pending);  // counted, or late: keep the trained state
      pending = null;
    }
    if (!task.isTrain()) {
      return new StepResult(task.status, task.retryAfterSeconds, task.round, false);
    }
    if (pending == null) {
      pending = train(task, trainer);
      if (pending == null) {  // diverged: nothing goes up this round and the state stays
        return new StepResult(StepResult.DIVERGED, task.retryAfterSeconds, task.round, false);
      }
    }
    String path = Wire.update(pending.runId, pending.round, pending.weight(task));
    boolean duplicate;
    String status = StepResult.TRAINED;
    try {
      if (task.secagg != null) {  // secure aggregation: the update leaves masked, once a round
        Map<String, TensorData> global = globalState(task.globalHash).tensors;
        Map<String, TensorData> update = Safetensors.parse(pending.upload, PendingRound.FILE)
            .tensors;
        if (!SecAggRound.takePart(this, task, global, update)) {  // began this round before
          return new StepResult(Wire.WAIT, task.retryAfterSeconds, pending.round, false);
        }
        duplicate = false;
      } else {
        duplicate = Boolean.TRUE.equals(ServerConnection.json(request("PUT", path,
            pending.upload, Wire.OCTET_STREAM)).get(Wire.DUPLICATE));
      }
    } catch (ServerRefused refused) {
      if (refused.status == 409) {  // e.g. paused meanwhile: keep the round, poll again
        return new StepResult(Wire.WAIT, task.retryAfterSeconds, pending.round, false);
      }
      if (refused.status != 410) {  // kept, as the Python SDK does: re-sent until the
        throw refused;                // round is over, then its private state is committed
      }
      status = StepResult.LATE;
      duplicate = false;
    }
    commit(pending);
    return new StepResult(status, task.retryAfterSeconds, pending.round, duplicate);
  }

  /**
   * Forget the persisted round and the private state it would have committed, e.g. to train a
   * round again after its update was refused (otherwise re-sent until the round is over).
   */
  public void discardPending() throws IOException {
    AtomicFiles.delete(new File(dir, PendingRound.FILE));
  }

  /** Step until the run ends or {@code maxRounds} uploads were made; returns the uploads. */
  public int run(RoundTrainer trainer, int maxRounds) throws Exception {
    int rounds = 0;
    while (rounds < maxRounds) {
      StepResult result = step(trainer);
      if (result.runEnded()) {
        break;
      }
      if (StepResult.TRAINED.equals(result.status) || StepResult.LATE.equals(result.status)) {
        rounds++;
      } else {
        sleeper.sleep((long) (result.retryAfterSeconds * 1000));
      }
    }
    return rounds;
  }

  /** The round trained and persisted; null when it diverged, now or at an earlier poll. */
  private PendingRound train(Task task, RoundTrainer trainer) throws Exception {
    String thisRound = task.runId + "/" + task.round + "/" + task.globalHash;
    if (thisRound.equals(readJson(CACHE).get("diverged"))) {
      return null;  // training the same round again would diverge again
    }
    Safetensors global = globalState(task.globalHash);
    String broken = Divergence.nonFiniteTensor(global.tensors);
    if (broken != null) {  // the server's fault, not a divergence of this device's training
      throw new IOException("global state " + task.globalHash + ": the server's global state "
          + "holds NaN or Inf (tensor " + broken + "); nothing is trained on it or uploaded "
          + "and the device keeps its state: the run's operator must act");
    }
    String config = task.configDigest();
    RoundTrainer.Result result = trainer.train(task, global, runState(task, config));
    if (Divergence.diverged(result)) {
      Map<String, Object> cache = readJson(CACHE);
      cache.put("diverged", thisRound);
      writeJson(CACHE, cache);
      return null;
    }
    Map<String, Object> metrics = new LinkedHashMap<String, Object>();
    for (Map.Entry<String, Double> m : result.metrics.entrySet()) {
      if (!m.getValue().isNaN() && !m.getValue().isInfinite()) {  // the Python SDK's rule: a
        metrics.put(m.getKey(), m.getValue());  // NaN loss is a fit that took no step
      }
    }
    byte[] upload = Safetensors.write(task.clipNorm == null ? result.update  // devices clip
        : UpdateClipping.clip(global.tensors, result.update, task.clipNorm),
        Collections.singletonMap(Wire.METRICS, JsonWriter.write(metrics)));
    PendingRound pending = new PendingRound(task.runId, task.round, result.numSamples,
        task.globalHash, config, upload, result.state);
    AtomicFiles.write(new File(dir, PendingRound.FILE), pending.toBytes());
    return pending;
  }

  /**
   * The stored private state of the task's run (null: none yet), refused in one line, the file
   * kept, when it was trained under another config of that run id (the run was recreated or
   * changed on the server, e.g. another model): the Python SDK's rule. A cache.json without
   * {@value #STATE_CONFIG} (an older release) takes the state as before.
   */
  private ClientState runState(Task task, String config) throws IOException {
    ClientState state = clientState(task.runId);
    Object kept = readJson(CACHE).get(STATE_CONFIG);
    if (state != null && kept instanceof String && !kept.equals(config)) {
      throw new IOException(new File(dir, CLIENT_STATE) + ": this device's state of run "
          + task.runId + " was trained under another config of that run (run " + task.runId
          + " was recreated or changed on the server); the file is kept as it is: move it "
          + "away to take part in the run from a fresh state");
    }
    return state;
  }

  /**
   * Record, before its first message and after the task passed the device's checks
   * ({@link SecAggRound#takePart}), that this device starts the round's secure aggregation;
   * false if it began it before, in this process or an earlier one. Running the protocol again
   * over the same change (fresh masks, fresh DP noise) would give a server that asks it to
   * start over two sums that differ by this device, or noise to average away.
   */
  boolean firstSecAggAttempt(Task task) throws IOException {
    Map<String, Object> cache = readJson(CACHE);
    if (Arrays.asList(task.runId, task.round).equals(
        cache.get(SECAGG_ROUND))) {
      return false;
    }
    cache.put(SECAGG_ROUND, Arrays.asList(task.runId, task.round));
    writeJson(CACHE, cache);
    return true;
  }

  /** The server has answered for this round: its state becomes the device's state. */
  private void commit(PendingRound pending) throws IOException {
    if (pending.state != null) {
      AtomicFiles.write(new File(dir, CLIENT_STATE), pending.state.toBytes());
      Map<String, Object> cache = readJson(CACHE);
      cache.put(STATE_RUN, pending.runId);
      cache.remove(PYTHON_STATE_CONFIG);
      if (pending.configDigest == null) {  // trained by an older release: config unknown
        cache.remove(STATE_CONFIG);
      } else {
        cache.put(STATE_CONFIG, pending.configDigest);
      }
      writeJson(CACHE, cache);
    }
    AtomicFiles.delete(new File(dir, PendingRound.FILE));
  }

  /**
   * The persisted round, or null. One that cannot be read (written atomically, so damaged
   * outside this client) holds nothing that could be sent: it is deleted and the round trained
   * again, rather than failing every step.
   */
  private PendingRound readPending() throws IOException {
    File file = new File(dir, PendingRound.FILE);
    byte[] bytes = AtomicFiles.readOrNull(file);
    if (bytes == null) {
      return null;
    }
    try {
      return PendingRound.fromBytes(bytes, file.getPath());
    } catch (Safetensors.FormatException e) {
      AtomicFiles.delete(file);
      return null;
    }
  }

  /**
   * One request with retries, as this device, whose answer is JSON (at most
   * {@link Wire#MAX_JSON_ANSWER} bytes); a 2xx answer or throws.
   */
  HttpTransport.Response request(String method, String path, byte[] body, String contentType)
      throws IOException {
    return connection.send(method, path, body, contentType, secret(), null,
        Wire.MAX_JSON_ANSWER);
  }

  private String secret() {
    if (!isEnrolled()) {
      throw new IllegalStateException("not enrolled: call enroll(token) first");
    }
    return credentials.secret;
  }

  private Map<String, Object> readJson(String name) throws IOException {
    byte[] bytes = AtomicFiles.readOrNull(new File(dir, name));
    if (bytes == null) {
      return new LinkedHashMap<String, Object>();
    }
    try {
      Object parsed = Json.parse(new String(bytes, UTF8));
      if (parsed instanceof Map) {
        @SuppressWarnings("unchecked")
        Map<String, Object> map = (Map<String, Object>) parsed;
        return new LinkedHashMap<String, Object>(map);
      }
    } catch (Json.SyntaxException e) {
      throw new IOException(new File(dir, name) + " is not JSON: " + e.getMessage(), e);
    }
    throw new IOException(new File(dir, name) + " is not a JSON object");
  }

  private void writeJson(String name, Map<String, Object> value) throws IOException {
    AtomicFiles.write(new File(dir, name), JsonWriter.write(value).getBytes(UTF8));
  }
}
