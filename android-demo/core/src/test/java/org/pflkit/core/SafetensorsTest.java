package org.pflkit.core;

import static org.junit.Assert.assertArrayEquals;
import static org.junit.Assert.assertEquals;
import static org.junit.Assert.assertTrue;
import static org.junit.Assert.fail;

import java.io.InputStream;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.charset.StandardCharsets;
import java.util.LinkedHashMap;
import java.util.Map;
import org.junit.Test;

public class SafetensorsTest {
  static byte[] resource(String name) throws Exception {
    try (InputStream in = SafetensorsTest.class.getResourceAsStream("/fixtures/" + name)) {
      return in.readAllBytes();
    }
  }

  @Test
  public void readsWhatThePythonLibraryWrites() throws Exception {
    Safetensors file = Safetensors.parse(resource("safetensors/python.safetensors"), "fixture");
    assertEquals("{\"loss\": 0.25}", file.metadata.get("metrics"));
    assertEquals("café", file.metadata.get("note"));
    TensorData w = file.tensors.get("a.weight");
    assertArrayEquals(new long[] {2, 3}, w.shape());
    assertArrayEquals(new float[] {-1f, -0.5f, 0f, 0.5f, 1f, 1.5f}, w.floats(), 0f);
    assertArrayEquals(new long[] {1, -2, 1L << 40}, file.tensors.get("counts").longs());
    assertArrayEquals(new byte[] {0, 1, (byte) 255, 7}, file.tensors.get("mask").bytes());
    TensorData d = file.tensors.get("double");
    assertEquals("F64", d.dtype);
    ByteBuffer doubles = ByteBuffer.wrap(d.bytes()).order(ByteOrder.LITTLE_ENDIAN);
    assertEquals(0.1, doubles.getDouble(), 0);
    assertEquals(-1e300, doubles.getDouble(), 0);
    assertArrayEquals(new long[] {0, 4}, file.tensors.get("empty").shape());
    assertEquals(0, file.tensors.get("empty").floats().length);
    assertArrayEquals(new long[] {}, file.tensors.get("scalar").shape());
    assertArrayEquals(new float[] {3.25f}, file.tensors.get("scalar").floats(), 0f);
  }

  @Test
  public void writeThenParseRoundTripsWithAlignedData() throws Exception {
    Safetensors python = Safetensors.parse(resource("safetensors/python.safetensors"), "fixture");
    byte[] bytes = Safetensors.write(python.tensors, python.metadata);
    long header = ByteBuffer.wrap(bytes, 0, 8).order(ByteOrder.LITTLE_ENDIAN).getLong();
    assertEquals("header padded to 8 bytes", 0, header % 8);
    Safetensors again = Safetensors.parse(bytes, "round trip");
    assertEquals(python.tensors, again.tensors);
    assertEquals(python.metadata, again.metadata);
    assertArrayEquals("writing is deterministic", bytes,
        Safetensors.write(again.tensors, again.metadata));
  }

  /** A valid file with one F32 [2] tensor whose header JSON is {@code json}. */
  static byte[] withHeader(String json, int dataBytes) {
    byte[] h = json.getBytes(StandardCharsets.UTF_8);
    ByteBuffer buf = ByteBuffer.allocate(8 + h.length + dataBytes).order(ByteOrder.LITTLE_ENDIAN);
    buf.putLong(h.length).put(h);
    return buf.array();
  }

  @Test
  public void refusesMalformedFilesWithAMessage() {
    String ok = "{\"t\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}";
    Map<String, byte[]> cases = new LinkedHashMap<>();
    cases.put("shorter than the 8-byte", new byte[5]);
    byte[] huge = withHeader(ok, 8);
    huge[6] = 1;
    cases.put("out of range", huge);
    cases.put("does not start with", withHeader("[1, 2]", 0));
    cases.put("not JSON", withHeader("{\"t\": ", 0));
    cases.put("unknown dtype", withHeader(ok.replace("F32", "F31"), 8));
    cases.put("spans 4 bytes", withHeader(ok.replace("[0,8]", "[0,4]"), 4));
    cases.put("past the", withHeader(ok, 4));
    cases.put("belong to no tensor", withHeader(ok, 12));
    cases.put("must tile", withHeader("{\"a\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":"
        + "[0,2]},\"b\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[1,3]}}", 3));
    cases.put("not a string", withHeader("{\"__metadata__\":{\"k\":1}}", 0));
    cases.put("non-negative integer", withHeader(ok.replace("[2]", "[-2]"), 8));
    cases.put("duplicate", withHeader(ok.replace("}}", "},\"t\":{}}"), 8));
    for (Map.Entry<String, byte[]> c : cases.entrySet()) {
      try {
        Safetensors.parse(c.getValue(), "case");
        fail("accepted: " + c.getKey());
      } catch (Safetensors.FormatException e) {
        assertTrue(c.getKey() + " -> " + e.getMessage(), e.getMessage().contains(c.getKey()));
        assertTrue(e.getMessage().startsWith("case: not a valid safetensors file"));
      }
    }
  }

  @Test
  public void tensorDataChecksSizesAndTypedViews() {
    try {
      new TensorData("F32", new long[] {3}, new byte[8]);
      fail();
    } catch (IllegalArgumentException e) {
      assertTrue(e.getMessage(), e.getMessage().contains("needs 12 bytes"));
    }
    TensorData t = TensorData.ofLongs(new long[] {2}, new long[] {5, -6});
    assertArrayEquals(new long[] {5, -6}, t.longs());
    try {
      t.floats();
      fail();
    } catch (IllegalStateException e) {
      assertTrue(e.getMessage().contains("I64"));
    }
  }
}
