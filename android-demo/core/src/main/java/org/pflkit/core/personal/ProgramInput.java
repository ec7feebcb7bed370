package org.pflkit.core.personal;

/** One input tensor of the training program: float32 or int64 data with its shape. */
public final class ProgramInput {
  public final String name;
  public final long[] shape;
  /** The data of a float32 input, else null. */
  public final float[] floats;
  /** The data of an int64 input (labels), else null. */
  public final long[] longs;

  private ProgramInput(String name, long[] shape, float[] floats, long[] longs) {
    this.name = name;
    this.shape = shape;
    this.floats = floats;
    this.longs = longs;
  }

  public static ProgramInput ofFloats(String name, long[] shape, float[] data) {
    return new ProgramInput(name, shape, data, null);
  }

  public static ProgramInput ofLongs(String name, long[] shape, long[] data) {
    return new ProgramInput(name, shape, null, data);
  }
}
