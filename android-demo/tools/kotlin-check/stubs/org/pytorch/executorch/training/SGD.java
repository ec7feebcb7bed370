package org.pytorch.executorch.training;
import java.util.Map;
import org.pytorch.executorch.Tensor;
public class SGD {
  public static SGD create(Map<String, Tensor> namedParameters, double learningRate,
      double momentum, double dampening, double weightDecay, boolean nesterov) { return null; }
  public static SGD create(Map<String, Tensor> namedParameters, double learningRate) {
    return null;
  }
  public void step(Map<String, Tensor> namedGradients) {}
  public void destroy() {}
}
