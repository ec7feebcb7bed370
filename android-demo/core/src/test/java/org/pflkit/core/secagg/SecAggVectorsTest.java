package org.pflkit.core.secagg;

import static org.junit.Assert.assertArrayEquals;
import static org.junit.Assert.assertEquals;
import static org.junit.Assert.assertThrows;

import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.util.Arrays;
import java.util.Base64;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import org.junit.BeforeClass;
import org.junit.Test;
import org.pflkit.core.Json;
import org.pflkit.core.JsonWriter;
import org.pflkit.core.PythonTool;

/**
 * The Java SecAgg device against Python's {@code pflkit.sdk.secagg}, byte for byte: values
 * android-demo/tools/secagg_vectors.py computes from fixed inputs, and what it derives, opens
 * and recovers from values Java made (keys, an envelope, Shamir shares).
 */
public class SecAggVectorsTest {
  private static final long ROUND = 7;
  private static final long PY_ID = 5;
  private static final long JAVA_ID = 3;
  private static Map<String, Object> py;

  @BeforeClass
  public static void pythonVectors() throws Exception {
    py = python("vectors", "");
  }

  @Test
  public void hkdfMatchesPython() {
    assertArrayEquals(b64(py, "hkdf_48"),
        SecAggCrypto.hkdf(b64(py, "hkdf_secret"), b64(py, "hkdf_info"), 48));
  }

  @Test
  public void maskPrgMatchesPython() {
    List<?> expected = (List<?>) py.get("prg_10");
    int[] words = SecAggCrypto.prg(b64(py, "prg_seed"), expected.size());
    for (int i = 0; i < words.length; i++) {
      assertEquals(((Number) expected.get(i)).longValue(), words[i] & 0xffffffffL);
    }
  }

  @Test
  public void javaRecoversPythonsShamirShares() {
    List<?> shares = (List<?>) py.get("shares_3_of_5");
    Map<Integer, byte[]> points = new HashMap<>();
    for (int x : new int[] {1, 4, 5}) {
      points.put(x, Base64.getDecoder().decode((String) shares.get(x - 1)));
    }
    assertArrayEquals(b64(py, "secret"), Shamir.combine(points, 32));
  }

  @Test
  public void quantizedLevelsMatchPython() {
    List<?> update = (List<?>) py.get("update");
    double[] x = new double[update.size()];
    for (int i = 0; i < x.length; i++) {
      x[i] = ((Number) update.get(i)).doubleValue();
    }
    List<?> expected = (List<?>) py.get("levels");
    int[] levels = Quantizer.quantize(x, 0.5, 7);
    for (int i = 0; i < x.length; i++) {
      assertEquals("coordinate " + i, ((Number) expected.get(i)).longValue(),
          levels[i] & 0xffffffffL);
    }
  }

  @Test
  @SuppressWarnings("unchecked")
  public void neighbourGraphMatchesPython() {
    RoundSetup setup = RoundSetup.fromTask((Map<String, Object>) py.get("setup"));
    Map<String, Object> expected = (Map<String, Object>) py.get("neighbours");
    assertEquals(setup.roster.length, expected.size());
    for (long id : setup.roster) {
      List<?> want = (List<?>) expected.get(Long.toString(id));
      long[] got = NeighbourGraph.neighbours(setup, id);
      assertEquals(want.size(), got.length);
      for (int i = 0; i < got.length; i++) {
        assertEquals(((Number) want.get(i)).longValue(), got[i]);
      }
    }
  }

  /** Keys, envelopes and shares made in Java open and recover in Python, and back. */
  @Test
  public void keysEnvelopesAndSharesCrossOver() throws Exception {
    X25519 cipher = X25519.generate();
    byte[] pyPub = b64(py, "py_cipher_pub");
    byte[] key = SecAggCrypto.agree(cipher, pyPub, "share", ROUND, 32);
    byte[] plain = "a seed share and a key share".getBytes(StandardCharsets.UTF_8);
    byte[] secret = b64(py, "secret");
    Map<String, Object> java = new LinkedHashMap<>();
    java.put("cipher_pub", enc(cipher.publicBytes()));
    java.put("cipher_priv", enc(cipher.privateBytes()));
    java.put("sealed", enc(SecAggCrypto.seal(key, ROUND, JAVA_ID, PY_ID, plain)));
    Object[] shares = new Object[5];
    byte[][] split = Shamir.split(secret, 3, 5);
    for (int i = 0; i < 5; i++) {
      shares[i] = enc(split[i]);
    }
    java.put("shares_3_of_5", Arrays.asList(shares));
    Map<String, Object> answer = python("check", JsonWriter.write(java));
    // the server recovers a dropped device's mask key from its shares: same key in Python
    assertArrayEquals(cipher.publicBytes(), b64(answer, "public_of_private"));
    assertArrayEquals(key, b64(answer, "agree_share"));
    assertArrayEquals(plain, b64(answer, "opened"));
    assertArrayEquals(secret, b64(answer, "combined_135"));
    assertArrayEquals(secret, b64(answer, "combined_234"));
    byte[] fromPython = b64(answer, "sealed_for_java");
    assertArrayEquals(secret, SecAggCrypto.open(key, ROUND, PY_ID, JAVA_ID, fromPython));
    // bound to (round, sender, receiver): re-addressed or replayed, it fails authentication
    assertThrows(SecAggException.class, () -> SecAggCrypto.open(key, ROUND, PY_ID, 8,
        fromPython));
    assertThrows(SecAggException.class, () -> SecAggCrypto.open(key, ROUND + 1, PY_ID,
        JAVA_ID, fromPython));
  }

  private static byte[] b64(Map<String, Object> data, String key) {
    return Base64.getDecoder().decode((String) data.get(key));
  }

  private static String enc(byte[] raw) {
    return Base64.getEncoder().encodeToString(raw);
  }

  @SuppressWarnings("unchecked")
  private static Map<String, Object> python(String mode, String input)
      throws IOException, InterruptedException {
    return (Map<String, Object>) PythonTool.run("secagg_vectors.py", input, mode);
  }
}
