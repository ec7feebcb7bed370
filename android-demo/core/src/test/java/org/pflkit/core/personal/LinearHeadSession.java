package org.pflkit.core.personal;

import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import org.pflkit.core.TrainingSection;

/**
 * A host engine for the recipe runner's tests: the program "logits = ((1 - lam) Wf + lam W) x + b"
 * (lam = 1 without a lambda input) with personal parameters {@code head.weight} W and
 * {@code head.bias} b, softmax cross-entropy, and SGD with torch's momentum, dampening,
 * weight-decay and Nesterov rules. Real maths in plain Java: the Android engine is ExecuTorch.
 */
final class LinearHeadSession implements TrainingSession {
  final int features;
  final int classes;
  final float[] frozen;  // Wf
  final Map<String, float[]> params = new LinkedHashMap<>();
  private final Map<String, float[]> momentum = new LinkedHashMap<>();
  private final TrainingSection recipe;
  int steps;

  LinearHeadSession(TrainingSection recipe, int features, int classes, float[] frozen) {
    this.recipe = recipe;
    this.features = features;
    this.classes = classes;
    this.frozen = frozen;
    params.put("head.weight", new float[classes * features]);
    params.put("head.bias", new float[classes]);
  }

  @Override
  public List<float[]> prepare(float[] images, int rows) {
    throw new UnsupportedOperationException("this program reads the images");
  }

  /** Logits and, when {@code grads} is not null, the gradients of the mean loss. */
  private float[] forward(List<ProgramInput> inputs, Map<String, float[]> grads, float[] loss) {
    float[] x = inputs.get(0).floats;
    long[] y = inputs.get(1).longs;
    float lam = inputs.size() > 2 ? inputs.get(2).floats[0] : 1f;
    int n = y.length;
    float[] w = params.get("head.weight");
    float[] b = params.get("head.bias");
    float[] logits = new float[n * classes];
    double total = 0;
    for (int r = 0; r < n; r++) {
      for (int c = 0; c < classes; c++) {
        double s = b[c];
        for (int f = 0; f < features; f++) {
          double mixed = (1 - lam) * frozen[c * features + f] + lam * w[c * features + f];
          s += mixed * x[r * features + f];
        }
        logits[r * classes + c] = (float) s;
      }
      if (grads != null) {
        double max = Double.NEGATIVE_INFINITY;
        for (int c = 0; c < classes; c++) {
          max = Math.max(max, logits[r * classes + c]);
        }
        double sum = 0;
        for (int c = 0; c < classes; c++) {
          sum += Math.exp(logits[r * classes + c] - max);
        }
        total += max + Math.log(sum) - logits[r * classes + (int) y[r]];
        for (int c = 0; c < classes; c++) {
          double p = Math.exp(logits[r * classes + c] - max) / sum - (c == y[r] ? 1 : 0);
          grads.get("head.bias")[c] += (float) (p / n);
          for (int f = 0; f < features; f++) {
            grads.get("head.weight")[c * features + f] += (float) (p * lam * x[r * features + f]
                / n);
          }
        }
      }
    }
    if (loss != null) {
      loss[0] = (float) (total / n);
    }
    return logits;
  }

  @Override
  public void newOptimizers() {
    momentum.clear();
  }

  @Override
  public float step(String optimizer, List<ProgramInput> inputs) {
    Map<String, float[]> grads = new LinkedHashMap<>();
    for (Map.Entry<String, float[]> e : params.entrySet()) {
      grads.put(e.getKey(), new float[e.getValue().length]);
    }
    float[] loss = new float[1];
    forward(inputs, grads, loss);
    TrainingSection.Optimizer o = recipe.optimizer(optimizer);
    for (String name : o.parameters) {
      float[] p = params.get(name);
      float[] g = grads.get(name);
      boolean first = !momentum.containsKey(name);
      float[] buf = momentum.computeIfAbsent(name, k -> new float[p.length]);
      for (int i = 0; i < p.length; i++) {
        float d = (float) (g[i] + o.weightDecay * p[i]);
        if (o.momentum != 0) {
          buf[i] = first ? d : (float) (o.momentum * buf[i] + (1 - o.dampening) * d);
          d = o.nesterov ? (float) (d + o.momentum * buf[i]) : buf[i];
        }
        p[i] -= (float) (o.lr * d);
      }
    }
    steps++;
    return loss[0];
  }

  @Override
  public float[] logits(List<ProgramInput> inputs) {
    return forward(inputs, null, null);
  }

  @Override
  public Map<String, float[]> weights() {
    Map<String, float[]> out = new LinkedHashMap<>();
    params.forEach((k, v) -> out.put(k, v.clone()));
    return out;
  }

  @Override
  public void loadWeights(Map<String, float[]> weights) {
    weights.forEach((k, v) -> params.put(k, v.clone()));
  }

  /** The test programs' inputs: images flattened to features, then labels, then lambda. */
  static List<Object> inputSpecs(int features, Integer lambdaSize) {
    List<Object> inputs = new ArrayList<>();
    inputs.add(Map.of("name", "image", "shape", List.of("batch", (double) features), "dtype",
        "float32", "from", "image"));
    inputs.add(Map.of("name", "label", "shape", List.of("batch"), "dtype", "int64", "from",
        "label"));
    if (lambdaSize != null) {
      inputs.add(Map.of("name", "lam", "shape", List.of((double) lambdaSize), "dtype",
          "float32", "from", "lambda"));
    }
    return inputs;
  }
}
