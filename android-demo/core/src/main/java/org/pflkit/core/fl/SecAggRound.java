package org.pflkit.core.fl;

import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.charset.Charset;
import java.security.SecureRandom;
import java.util.Arrays;
import java.util.Base64;
import java.util.Collections;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import org.pflkit.core.Json;
import org.pflkit.core.JsonWriter;
import org.pflkit.core.TensorData;
import org.pflkit.core.secagg.DpGrid;
import org.pflkit.core.secagg.RoundSetup;
import org.pflkit.core.secagg.SecAggDevice;
import org.pflkit.core.secagg.SecAggException;

/**
 * A device's part in a secure-aggregation round over HTTP, as the Python SDK's
 * {@code secagg_device.take_part}: instead of its update the device sends its change to the
 * round's global state (the floating tensors, flattened in name order) masked, in the four
 * steps of {@link SecAggDevice}; with DP it first puts the change on the round's grid within C
 * and adds its noise share there ({@link DpGrid}). A step's answer not ready yet is a 409
 * with {@code Retry-After}, which {@link FederatedClient#request} waits out. The keys live in
 * memory only: a device restarted mid-round has dropped out of it, and the others recover the
 * round without it.
 */
final class SecAggRound {
  private static final Charset UTF8 = Charset.forName("UTF-8");
  private static final SecureRandom RANDOM = new SecureRandom();

  private SecAggRound() {}

  /**
   * Run the four steps for this device's change {@code update - global}; false, with nothing
   * sent, if it began this round's before. The round is marked begun only after the setup,
   * the change's size and the roster passed their checks, as in the Python SDK: a task the
   * device refuses is no attempt, so the server's corrected task is still taken part in.
   */
  static boolean takePart(FederatedClient client, Task task, Map<String, TensorData> global,
      Map<String, TensorData> update) throws IOException {
    RoundSetup setup = RoundSetup.fromTask(task.secagg);
    double[] change = change(global, update);
    if (change.length != setup.dimension) {
      throw new IllegalArgumentException("secagg: the update has " + change.length
          + " floating values, the round masks " + setup.dimension);
    }
    if (setup.dpClipNorm != null) {  // RoundSetup: both DP numbers or neither
      DpGrid.of(setup, setup.dpClipNorm, setup.dpNoiseMultiplier).privatize(change, RANDOM);
    }
    SecAggDevice device = new SecAggDevice(client.clientId(), setup);
    if (!client.firstSecAggAttempt(task)) {  // it never masks the same change twice
      return false;
    }
    String base = Wire.secagg(task.runId, task.round);
    byte[][] keys = device.advertiseKeys();
    Map<String, Object> advertised = new LinkedHashMap<String, Object>();
    advertised.put("cipher_key", b64(keys[0]));
    advertised.put("mask_key", b64(keys[1]));
    post(client, base + "/keys", advertised);
    Map<Long, byte[][]> directory = new TreeMap<Long, byte[][]>();
    for (Map.Entry<Long, Object> e : byId(get(client, base + "/keys"), "keys").entrySet()) {
      List<?> pair = e.getValue() instanceof List ? (List<?>) e.getValue() : null;
      if (pair == null || pair.size() != 2) {
        throw new SecAggException("keys must map client ids to two public keys");
      }
      directory.put(e.getKey(), new byte[][] {bytes(pair.get(0)), bytes(pair.get(1))});
    }
    post(client, base + "/shares", Collections.<String, Object>singletonMap("shares",
        encode(device.shareKeys(directory))));
    Map<Long, byte[]> shares = new TreeMap<Long, byte[]>();
    for (Map.Entry<Long, Object> e : byId(get(client, base + "/shares"), "shares").entrySet()) {
      shares.put(e.getKey(), bytes(e.getValue()));
    }
    client.request("PUT", base + "/masked", device.maskedInput(shares, change),
        Wire.OCTET_STREAM);
    Map<String, Object> ask = get(client, base + "/unmask");
    Map<String, Map<Long, byte[]>> answer = device.unmask(ids(ask.get("survivors")),
        ids(ask.get("dropped")));
    Map<String, Object> body = new LinkedHashMap<String, Object>();
    for (Map.Entry<String, Map<Long, byte[]>> e : answer.entrySet()) {
      body.put(e.getKey(), encode(e.getValue()));
    }
    post(client, base + "/unmask", body);
    return true;
  }

  /** The change of every F32/F64 tensor, float64, flattened in name order. */
  static double[] change(Map<String, TensorData> global, Map<String, TensorData> update) {
    double[] out = new double[0];
    for (Map.Entry<String, TensorData> e : new TreeMap<String, TensorData>(update).entrySet()) {
      String dtype = e.getValue().dtype;
      if (!dtype.startsWith("F") && !dtype.equals("BF16")) {
        continue; // integer tensors are not masked
      }
      TensorData base = global.get(e.getKey());
      if (!(dtype.equals("F32") || dtype.equals("F64")) || base == null
          || !base.dtype.equals(dtype) || base.numel() != e.getValue().numel()) {
        throw new IllegalArgumentException("secagg: cannot mask " + e.getKey() + " (" + dtype
            + "): F32 or F64 tensors of the global state's size only");
      }
      double[] u = doubles(e.getValue());
      double[] g = doubles(base);
      int start = out.length;
      out = Arrays.copyOf(out, start + u.length);
      for (int i = 0; i < u.length; i++) {
        out[start + i] = u[i] - g[i];
      }
    }
    return out;
  }

  private static double[] doubles(TensorData t) {
    ByteBuffer buf = ByteBuffer.wrap(t.bytes()).order(ByteOrder.LITTLE_ENDIAN);
    double[] out = new double[(int) t.numel()];
    for (int i = 0; i < out.length; i++) {
      out[i] = t.dtype.equals("F64") ? buf.getDouble() : buf.getFloat();
    }
    return out;
  }

  private static void post(FederatedClient client, String path, Map<String, Object> body)
      throws IOException {
    client.request("POST", path, JsonWriter.write(body).getBytes(UTF8), Wire.JSON);
  }

  private static Map<String, Object> get(FederatedClient client, String path)
      throws IOException {
    return ServerConnection.json(client.request("GET", path, null, null));
  }

  private static Map<Long, Object> byId(Map<String, Object> answer, String key) {
    Object node = answer.get(key);
    if (!(node instanceof Map)) {
      throw new SecAggException(key + " must be an object of client ids");
    }
    Map<Long, Object> out = new TreeMap<Long, Object>();
    for (Map.Entry<?, ?> e : ((Map<?, ?>) node).entrySet()) {
      String id = String.valueOf(e.getKey());
      if (!id.matches("[0-9]{1,10}")) {
        throw new SecAggException(key + ": " + id + " is not a client id");
      }
      out.put(Long.parseLong(id), e.getValue());
    }
    return out;
  }

  private static long[] ids(Object node) {
    if (!(node instanceof List)) {
      throw new SecAggException("the unmask request must list client ids");
    }
    List<?> list = (List<?>) node;
    long[] out = new long[list.size()];
    for (int i = 0; i < out.length; i++) {
      out[i] = RoundSetup.whole(list.get(i));
    }
    return out;
  }

  private static Map<String, Object> encode(Map<Long, byte[]> byPeer) {
    Map<String, Object> out = new LinkedHashMap<String, Object>();
    for (Map.Entry<Long, byte[]> e : byPeer.entrySet()) {
      out.put(Long.toString(e.getKey()), b64(e.getValue()));
    }
    return out;
  }

  private static String b64(byte[] raw) {
    return Base64.getEncoder().encodeToString(raw);
  }

  private static byte[] bytes(Object text) {
    if (!(text instanceof String)) {
      throw new SecAggException("expected base64 text, found " + Json.kind(text));
    }
    try {
      return Base64.getDecoder().decode((String) text);
    } catch (IllegalArgumentException e) {
      throw new SecAggException("not base64: " + e.getMessage());
    }
  }
}
