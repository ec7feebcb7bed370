package org.pytorch.executorch;
public abstract class Tensor {
  public static Tensor fromBlob(float[] data, long[] shape) { return null; }
  public static Tensor fromBlob(long[] data, long[] shape) { return null; }
  public long[] shape() { return null; }
  public float[] getDataAsFloatArray() { return null; }
}
