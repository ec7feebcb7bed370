package org.pytorch.executorch;
public class EValue {
  public static EValue from(Tensor tensor) { return null; }
  public Tensor toTensor() { return null; }
}
