package org.pflkit.core;

import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.util.Arrays;
import java.util.Collections;
import java.util.HashMap;
import java.util.Map;

/**
 * One tensor as safetensors stores it: a dtype name ({@code F32}, {@code I64}, ...), a shape and
 * the little-endian element bytes. Float32 and int64 have typed views; other dtypes are carried
 * as bytes so a file with them still round-trips.
 */
public final class TensorData {
  public static final String F32 = "F32";
  public static final String I64 = "I64";
  public static final String U8 = "U8";

  private static final Map<String, Integer> ELEMENT_BYTES;

  static {
    Map<String, Integer> sizes = new HashMap<String, Integer>();
    for (String d : new String[] {"BOOL", "U8", "I8", "F8_E5M2", "F8_E4M3"}) {
      sizes.put(d, 1);
    }
    for (String d : new String[] {"I16", "U16", "F16", "BF16"}) {
      sizes.put(d, 2);
    }
    for (String d : new String[] {"I32", "U32", "F32"}) {
      sizes.put(d, 4);
    }
    for (String d : new String[] {"I64", "U64", "F64"}) {
      sizes.put(d, 8);
    }
    ELEMENT_BYTES = Collections.unmodifiableMap(sizes);
  }

  public final String dtype;
  private final long[] shape;
  private final byte[] data;

  /** Wraps (does not copy) {@code data}; checks its length against dtype and shape. */
  public TensorData(String dtype, long[] shape, byte[] data) {
    Integer size = ELEMENT_BYTES.get(dtype);
    if (size == null) {
      throw new IllegalArgumentException("unknown safetensors dtype \"" + dtype + "\"");
    }
    long expected = numel(shape) * size;
    if (expected != data.length) {
      throw new IllegalArgumentException(dtype + " " + Arrays.toString(shape) + " needs "
          + expected + " bytes, got " + data.length);
    }
    this.dtype = dtype;
    this.shape = shape.clone();
    this.data = data;
  }

  /** A float32 tensor holding a copy of {@code values}. */
  public static TensorData ofFloats(long[] shape, float[] values) {
    ByteBuffer buf = ByteBuffer.allocate(values.length * 4).order(ByteOrder.LITTLE_ENDIAN);
    buf.asFloatBuffer().put(values);
    return new TensorData(F32, shape, buf.array());
  }

  /** An int64 tensor holding a copy of {@code values}. */
  public static TensorData ofLongs(long[] shape, long[] values) {
    ByteBuffer buf = ByteBuffer.allocate(values.length * 8).order(ByteOrder.LITTLE_ENDIAN);
    buf.asLongBuffer().put(values);
    return new TensorData(I64, shape, buf.array());
  }

  /** The size in bytes of one element of {@code dtype}, or -1 when the dtype is unknown. */
  static int elementBytes(String dtype) {
    Integer size = ELEMENT_BYTES.get(dtype);
    return size == null ? -1 : size;
  }

  /** Number of elements; throws for negative dimensions or a count past 2^31 - 1. */
  public static long numel(long[] shape) {
    long n = 1;
    for (long d : shape) {
      if (d < 0) {
        throw new IllegalArgumentException("negative dimension in " + Arrays.toString(shape));
      }
      n *= d;
      if (n > Integer.MAX_VALUE) {
        throw new IllegalArgumentException("tensor of shape " + Arrays.toString(shape)
            + " is too large for one Java array");
      }
    }
    return n;
  }

  public long[] shape() {
    return shape.clone();
  }

  public long numel() {
    return numel(shape);
  }

  /** The raw little-endian bytes (a copy). */
  public byte[] bytes() {
    return data.clone();
  }

  int byteCount() {
    return data.length;
  }

  void copyBytesTo(byte[] out, int offset) {
    System.arraycopy(data, 0, out, offset, data.length);
  }

  /** The values of a float32 tensor. */
  public float[] floats() {
    require(F32);
    float[] out = new float[data.length / 4];
    ByteBuffer.wrap(data).order(ByteOrder.LITTLE_ENDIAN).asFloatBuffer().get(out);
    return out;
  }

  /** The values of an int64 tensor. */
  public long[] longs() {
    require(I64);
    long[] out = new long[data.length / 8];
    ByteBuffer.wrap(data).order(ByteOrder.LITTLE_ENDIAN).asLongBuffer().get(out);
    return out;
  }

  private void require(String wanted) {
    if (!dtype.equals(wanted)) {
      throw new IllegalStateException("tensor is " + dtype + ", not " + wanted);
    }
  }

  /** Same dtype, shape and bytes. */
  @Override
  public boolean equals(Object other) {
    if (!(other instanceof TensorData)) {
      return false;
    }
    TensorData t = (TensorData) other;
    return dtype.equals(t.dtype) && Arrays.equals(shape, t.shape) && Arrays.equals(data, t.data);
  }

  @Override
  public int hashCode() {
    return 31 * (31 * dtype.hashCode() + Arrays.hashCode(shape)) + Arrays.hashCode(data);
  }

  @Override
  public String toString() {
    return dtype + Arrays.toString(shape);
  }
}
