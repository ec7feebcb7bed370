package org.pflkit.core;

import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.charset.Charset;
import java.util.ArrayList;
import java.util.Collections;
import java.util.Comparator;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;

/**
 * The safetensors format (the only way tensors travel and rest in pflkit): an 8-byte
 * little-endian header length, a JSON header naming each tensor's dtype, shape and byte range,
 * then the data. Reading validates everything the reference implementation checks (header
 * bounds, known dtypes, sizes that match shapes, ranges that tile the data exactly, string
 * metadata), so a truncated or hostile file is refused with a message instead of misread.
 * Writing sorts tensors by name and pads the header to 8 bytes, like the Python library.
 */
public final class Safetensors {
  /** Headers larger than this are refused (the reference implementation's limit). */
  public static final int MAX_HEADER_BYTES = 100_000_000;
  private static final String METADATA = "__metadata__";
  private static final Charset UTF8 = Charset.forName("UTF-8");

  /** Name to tensor, sorted by name. */
  public final Map<String, TensorData> tensors;
  /** The {@code __metadata__} strings (empty when absent). */
  public final Map<String, String> metadata;

  private Safetensors(Map<String, TensorData> tensors, Map<String, String> metadata) {
    this.tensors = Collections.unmodifiableMap(tensors);
    this.metadata = Collections.unmodifiableMap(metadata);
  }

  /** Thrown for bytes that are not a valid safetensors file; the message names the source. */
  public static final class FormatException extends java.io.IOException {
    private static final long serialVersionUID = 1L;

    public FormatException(String message) {
      super(message);
    }
  }

  /** Parse and validate {@code bytes}; {@code source} names them in error messages. */
  public static Safetensors parse(byte[] bytes, String source) throws FormatException {
    try {
      return parse(bytes);
    } catch (IllegalArgumentException e) {
      throw new FormatException(source + ": not a valid safetensors file (" + e.getMessage()
          + ")");
    }
  }

  private static Safetensors parse(byte[] bytes) {
    if (bytes.length < 8) {
      throw new IllegalArgumentException("shorter than the 8-byte header length");
    }
    long n = ByteBuffer.wrap(bytes, 0, 8).order(ByteOrder.LITTLE_ENDIAN).getLong();
    if (n < 2 || n > MAX_HEADER_BYTES || n > bytes.length - 8) {
      throw new IllegalArgumentException("header length " + n + " is out of range for "
          + bytes.length + " bytes");
    }
    int dataStart = 8 + (int) n;
    String text = new String(bytes, 8, (int) n, UTF8);
    if (!text.startsWith("{")) {
      throw new IllegalArgumentException("header does not start with '{'");
    }
    Object root;
    try {
      root = Json.parse(text);
    } catch (Json.SyntaxException e) {
      throw new IllegalArgumentException("header is not JSON: " + e.getMessage());
    }
    if (!(root instanceof Map)) {
      throw new IllegalArgumentException("header is not a JSON object");
    }
    Map<String, String> metadata = new TreeMap<String, String>();
    List<Entry> entries = new ArrayList<Entry>();
    for (Map.Entry<?, ?> e : ((Map<?, ?>) root).entrySet()) {
      String name = (String) e.getKey();
      if (name.equals(METADATA)) {
        readMetadata(e.getValue(), metadata);
      } else {
        entries.add(new Entry(name, e.getValue()));
      }
    }
    Collections.sort(entries, new Comparator<Entry>() {
      @Override
      public int compare(Entry a, Entry b) {
        return Long.compare(a.begin, b.begin);
      }
    });
    int dataLength = bytes.length - dataStart;
    long expected = 0;
    Map<String, TensorData> tensors = new TreeMap<String, TensorData>();
    for (Entry entry : entries) {
      if (entry.begin != expected) {
        throw new IllegalArgumentException("tensor \"" + entry.name + "\" starts at byte "
            + entry.begin + ", expected " + expected + " (ranges must tile the data)");
      }
      if (entry.end > dataLength) {
        throw new IllegalArgumentException("tensor \"" + entry.name + "\" ends at byte "
            + entry.end + ", past the " + dataLength + " data bytes");
      }
      byte[] data = new byte[(int) (entry.end - entry.begin)];
      System.arraycopy(bytes, dataStart + (int) entry.begin, data, 0, data.length);
      tensors.put(entry.name, new TensorData(entry.dtype, entry.shape, data));
      expected = entry.end;
    }
    if (expected != dataLength) {
      throw new IllegalArgumentException((dataLength - expected)
          + " data bytes belong to no tensor");
    }
    return new Safetensors(tensors, metadata);
  }

  private static void readMetadata(Object node, Map<String, String> out) {
    if (!(node instanceof Map)) {
      throw new IllegalArgumentException(METADATA + " is not an object");
    }
    for (Map.Entry<?, ?> m : ((Map<?, ?>) node).entrySet()) {
      if (!(m.getValue() instanceof String)) {
        throw new IllegalArgumentException(METADATA + "." + m.getKey() + " is not a string");
      }
      out.put((String) m.getKey(), (String) m.getValue());
    }
  }

  /** One header entry, validated: a known dtype, a shape, a byte range of the right size. */
  private static final class Entry {
    final String name;
    final String dtype;
    final long[] shape;
    final long begin;
    final long end;

    Entry(String name, Object node) {
      this.name = name;
      if (!(node instanceof Map)) {
        throw new IllegalArgumentException("tensor \"" + name + "\" is not an object");
      }
      Map<?, ?> map = (Map<?, ?>) node;
      Object d = map.get("dtype");
      if (!(d instanceof String) || TensorData.elementBytes((String) d) < 0) {
        throw new IllegalArgumentException("tensor \"" + name + "\" has unknown dtype " + d);
      }
      dtype = (String) d;
      shape = integers(map.get("shape"), name + ".shape");
      long[] offsets = integers(map.get("data_offsets"), name + ".data_offsets");
      if (offsets.length != 2 || offsets[1] < offsets[0]) {
        throw new IllegalArgumentException("tensor \"" + name + "\" needs data_offsets "
            + "[begin, end] with begin <= end");
      }
      begin = offsets[0];
      end = offsets[1];
      long bytes = TensorData.numel(shape) * TensorData.elementBytes(dtype);
      if (end - begin != bytes) {
        throw new IllegalArgumentException("tensor \"" + name + "\" is " + dtype + " of shape "
            + java.util.Arrays.toString(shape) + " (" + bytes + " bytes) but spans "
            + (end - begin) + " bytes");
      }
    }

    private static long[] integers(Object node, String what) {
      if (!(node instanceof List)) {
        throw new IllegalArgumentException(what + " is not an array");
      }
      List<?> list = (List<?>) node;
      long[] out = new long[list.size()];
      for (int i = 0; i < out.length; i++) {
        Long n = Json.integer(list.get(i), 0, 1L << 53);
        if (n == null) {
          throw new IllegalArgumentException(what + "[" + i + "] is not a non-negative integer");
        }
        out[i] = n;
      }
      return out;
    }
  }

  /** Serialize: tensors in name order, header padded with spaces to a multiple of 8. */
  public static byte[] write(Map<String, TensorData> tensors, Map<String, String> metadata) {
    Map<String, Object> header = new LinkedHashMap<String, Object>();
    if (metadata != null && !metadata.isEmpty()) {
      header.put(METADATA, new TreeMap<String, String>(metadata));
    }
    Map<String, TensorData> sorted = new TreeMap<String, TensorData>(tensors);
    long offset = 0;
    for (Map.Entry<String, TensorData> e : sorted.entrySet()) {
      if (e.getKey().equals(METADATA)) {
        throw new IllegalArgumentException("\"" + METADATA + "\" is not a tensor name");
      }
      TensorData t = e.getValue();
      List<Object> shape = new ArrayList<Object>();
      for (long d : t.shape()) {
        shape.add(d);
      }
      List<Object> range = new ArrayList<Object>();
      range.add(offset);
      range.add(offset + t.byteCount());
      Map<String, Object> entry = new LinkedHashMap<String, Object>();
      entry.put("dtype", t.dtype);
      entry.put("shape", shape);
      entry.put("data_offsets", range);
      header.put(e.getKey(), entry);
      offset += t.byteCount();
    }
    byte[] json = JsonWriter.write(header).getBytes(UTF8);
    int padded = (json.length + 7) / 8 * 8;
    if (8L + padded + offset > Integer.MAX_VALUE) {
      throw new IllegalArgumentException("safetensors file over 2 GiB");
    }
    byte[] out = new byte[8 + padded + (int) offset];
    ByteBuffer.wrap(out, 0, 8).order(ByteOrder.LITTLE_ENDIAN).putLong(padded);
    System.arraycopy(json, 0, out, 8, json.length);
    for (int i = 8 + json.length; i < 8 + padded; i++) {
      out[i] = ' ';
    }
    int at = 8 + padded;
    for (TensorData t : sorted.values()) {
      t.copyBytesTo(out, at);
      at += t.byteCount();
    }
    return out;
  }
}
