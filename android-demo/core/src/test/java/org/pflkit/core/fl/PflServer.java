package org.pflkit.core.fl;

import java.io.File;
import java.io.IOException;
import java.net.ServerSocket;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Collections;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import java.util.concurrent.TimeUnit;
import org.junit.rules.ExternalResource;
import org.junit.rules.TemporaryFolder;
import org.pflkit.core.Json;
import org.pflkit.core.JsonWriter;
import org.pflkit.core.Safetensors;
import org.pflkit.core.TensorData;

/**
 * A real {@code pfl-server} on loopback for the host tests, plus the Python goldens its run
 * needs. The virtualenv comes from {@code -Dpflkit.venv} (run-tests.sh passes the repository's
 * {@code .venv}); without it the tests fail and say so ({@code make test} always has one).
 */
final class PflServer extends ExternalResource {
  static final String ADMIN = "admin-token-for-java-tests-0123456789";

  private final TemporaryFolder tmp = new TemporaryFolder();
  private final String[] flags;
  private Process process;
  private int port;
  File root;
  File goldens;

  /**
   * The tests' one time limit (as tests/waiting.py's GUARD): it stops a hung test, and is no
   * pass criterion; a loaded 2-core machine took 59 min for make test.
   */
  static final long GUARD_SECONDS = 1800;

  PflServer(String... flags) {
    this.flags = flags;
  }

  static File venv() {
    String path = System.getProperty("pflkit.venv");
    File bin = path == null ? null : new File(path, "bin/pfl-server");
    if (bin == null || !bin.canExecute()) {
      throw new IllegalStateException("no pfl-server at " + bin + ": run `make setup` (or pass "
          + "-Dpflkit.venv=DIR of a virtualenv with pflkit installed)");
    }
    return new File(path);
  }

  static File repository() {
    return new File(System.getProperty("pflkit.root", "."));
  }

  String url() {
    return "http://127.0.0.1:" + port;
  }

  @Override
  protected void before() throws Throwable {
    tmp.create();
    root = tmp.getRoot();
    File venv = venv();
    goldens = new File(root, "goldens");
    run(new File(root, "goldens.log"), new File(venv, "bin/python").getPath(),
        new File(repository(), "android-demo/tools/java_client_goldens.py").getPath(),
        "--out", goldens.getPath());
    File admin = new File(root, "admin");
    Files.write(admin.toPath(), ADMIN.getBytes(StandardCharsets.UTF_8));
    try (ServerSocket socket = new ServerSocket(0)) {
      port = socket.getLocalPort();
    }
    List<String> cmd = new ArrayList<>(Arrays.asList(new File(venv, "bin/pfl-server").getPath(),
        "serve", "--data-dir", new File(root, "data").getPath(), "--run-config",
        new File(goldens, "run.toml").getPath(), "--admin-token-file", admin.getPath(),
        "--port", String.valueOf(port), "--log-level", "warning",
        // rounds close at quorum, not at a deadline a busy machine could reach first
        "--round-deadline", String.valueOf(2 * GUARD_SECONDS)));
    cmd.addAll(Arrays.asList(flags));
    process = builder(cmd, new File(root, "server.log")).start();
    long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(GUARD_SECONDS);
    while (true) {
      if (!process.isAlive()) {
        throw new IllegalStateException("pfl-server exited: " + log("server.log"));
      }
      try {
        if (admin("GET", Wire.HEALTH, null).status == 200) {
          return;
        }
      } catch (IOException notYet) {
        // not listening yet
      }
      if (System.nanoTime() > deadline) {
        throw new IllegalStateException("pfl-server did not become healthy: "
            + log("server.log"));
      }
      Thread.sleep(200); // poll
    }
  }

  @Override
  protected void after() {
    if (process != null) {
      process.destroy();
      try {
        if (!process.waitFor(10, TimeUnit.SECONDS)) {
          process.destroyForcibly().waitFor();
        }
      } catch (InterruptedException e) {
        Thread.currentThread().interrupt();
      }
    }
    tmp.delete();
  }

  /** One request with the admin token. */
  HttpTransport.Response admin(String method, String path, Object jsonBody) throws IOException {
    Map<String, String> headers = new LinkedHashMap<>();
    headers.put("Authorization", "Bearer " + ADMIN);
    byte[] body = null;
    if (jsonBody != null) {
      headers.put("Content-Type", Wire.JSON);
      body = JsonWriter.write(jsonBody).getBytes(StandardCharsets.UTF_8);
    }
    return new UrlConnectionTransport(5_000, 30_000).send(method, url() + path, headers, body);
  }

  /** A one-time enrollment token reserving {@code clientId}. */
  String token(long clientId) throws IOException {
    HttpTransport.Response r = admin("POST", "/v1/enrollment-tokens",
        Collections.singletonMap(Wire.CLIENT_ID, clientId));
    if (r.status != 201) {
      throw new IOException("token: HTTP " + r.status + " " + text(r.body));
    }
    return (String) json(r.body).get(Wire.TOKEN);
  }

  /** Stop the current run and start one from this TOML (the admin's {@code POST /v1/runs}). */
  void replaceRun(String configToml) throws IOException {
    Object id = status().get("id");
    String stop = "/v1/runs/" + ((Number) id).longValue() + "/stop";
    HttpTransport.Response r = admin("POST", stop, null);
    if (r.status != 200) {
      throw new IOException(stop + ": HTTP " + r.status + " " + text(r.body));
    }
    r = admin("POST", "/v1/runs", Collections.singletonMap("config_toml", configToml));
    if (r.status != 201 && r.status != 200) {
      throw new IOException("POST /v1/runs: HTTP " + r.status + " " + text(r.body));
    }
  }

  /**
   * Start a run from this TOML and write client 1's training rows where a {@code pfl-client}
   * process reads them (the folder returned): the Java tests' Python device.
   */
  File replaceRunWithPythonDevice(String name, String configToml)
      throws IOException, InterruptedException {
    File toml = new File(root, name + ".toml");
    Files.write(toml.toPath(), configToml.getBytes(StandardCharsets.UTF_8));
    replaceRun(configToml);
    File data = new File(root, "python-device");
    python("import tomllib\n"
        + "from pflkit.sdk.builder import build_run\n"
        + "from pflkit.sdk.client import save_client_data\n"
        + "from pflkit.sdk.run_config import SimConfig\n"
        + "fed, _ = build_run(SimConfig.from_mapping(tomllib.load(open('" + toml + "', 'rb'))))\n"
        + "save_client_data('" + data + "/data.safetensors', fed.clients[1].train)\n");
    return data;
  }

  /** The golden round of a client: the downloaded global plus Python's delta. */
  RoundTrainer.Result goldenResult(long id, Safetensors global) throws IOException {
    Safetensors golden = golden(id);
    Map<String, TensorData> update = new LinkedHashMap<>();
    Map<String, TensorData> personal = new LinkedHashMap<>();
    double norm = 0;
    for (Map.Entry<String, TensorData> e : golden.tensors.entrySet()) {
      if (e.getKey().startsWith("delta/")) {
        String name = e.getKey().substring("delta/".length());
        float[] g = global.tensors.get(name).floats();
        float[] d = e.getValue().floats();
        for (int i = 0; i < g.length; i++) {
          norm += (double) d[i] * d[i];
          g[i] += d[i];
        }
        update.put(name, TensorData.ofFloats(e.getValue().shape(), g));
      } else {
        personal.put(e.getKey().substring("state/".length()), e.getValue());
      }
    }
    Map<String, Double> metrics = new LinkedHashMap<>();
    metrics.put("delta_norm", Math.sqrt(norm));
    return new RoundTrainer.Result(update, Long.parseLong(golden.metadata.get("num_samples")),
        metrics, new ClientState(personal, new TreeMap<>()));
  }

  /** Client {@code id}'s golden round-0 file (java_client_goldens.py). */
  Safetensors golden(long id) throws IOException {
    return Safetensors.parse(Files.readAllBytes(
        new File(goldens, "client" + id + ".safetensors").toPath()), "golden " + id);
  }

  /** {@code GET /v1/runs/current}. */
  Map<String, Object> status() throws IOException {
    return json(admin("GET", "/v1/runs/current", null).body);
  }

  @SuppressWarnings("unchecked")
  static Map<String, Object> json(byte[] body) {
    return (Map<String, Object>) Json.parse(text(body));
  }

  static String text(byte[] body) {
    return new String(body, StandardCharsets.UTF_8);
  }

  private static ProcessBuilder builder(List<String> cmd, File log) {
    ProcessBuilder pb = new ProcessBuilder(cmd).redirectErrorStream(true)
        .redirectOutput(ProcessBuilder.Redirect.appendTo(log));
    pb.environment().keySet().removeIf(k -> k.startsWith("PFL_SERVER_"));
    pb.environment().put("OMP_NUM_THREADS", "1");  // 2 shared cores: no oversubscription
    pb.environment().put("PFLKIT_THREADS", "1");
    return pb;
  }

  /** Run the venv's Python on {@code code}; returns what it printed. */
  String python(String code) throws IOException, InterruptedException {
    File log = new File(root, "python.log");
    Files.deleteIfExists(log.toPath());
    run(log, new File(venv(), "bin/python").getPath(), "-c", code);
    return log("python.log").trim();
  }

  /** Start the venv's {@code bin/<command>} with these arguments, output to {@code log}. */
  Process start(File log, String command, String... args) throws IOException {
    List<String> cmd = new ArrayList<>();
    cmd.add(new File(venv(), "bin/" + command).getPath());
    cmd.addAll(Arrays.asList(args));
    return builder(cmd, log).start();
  }

  private void run(File log, String... cmd) throws IOException, InterruptedException {
    Process p = builder(Arrays.asList(cmd), log).start();
    if (!p.waitFor(300, TimeUnit.SECONDS) || p.exitValue() != 0) {
      p.destroyForcibly();
      throw new IllegalStateException(String.join(" ", cmd) + " failed: " + log(log.getName()));
    }
  }

  private String log(String name) throws IOException {
    File f = new File(root, name);
    return f.isFile() ? new String(Files.readAllBytes(f.toPath()), StandardCharsets.UTF_8) : "";
  }
}
