package org.pytorch.executorch.training;
import java.util.Map;
import org.pytorch.executorch.EValue;
import org.pytorch.executorch.Tensor;
public class TrainingModule {
  public static TrainingModule load(String modelPath) { return null; }
  public static TrainingModule load(String modelPath, String dataPath) { return null; }
  public EValue[] executeForwardBackward(String methodName, EValue... inputs) { return null; }
  public Map<String, Tensor> namedParameters(String methodName) { return null; }
  public Map<String, Tensor> namedGradients(String methodName) { return null; }
  public void destroy() {}
}
