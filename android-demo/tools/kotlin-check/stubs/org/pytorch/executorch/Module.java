package org.pytorch.executorch;
public class Module {
  public static Module load(String modelPath) { return null; }
  public EValue[] forward(EValue... inputs) { return null; }
  public EValue[] execute(String methodName, EValue... inputs) { return null; }
  public void destroy() {}
}
