package org.pflkit.core;

import java.util.Collections;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

/**
 * The whole on-device pipeline for one image, independent of the inference runtime: raw pixels
 * to the card's input, one model call through a {@link Backend} (ExecuTorch or ONNX Runtime in
 * the app), softmax and top-k for every logits output.
 */
public final class Classifier {
  /** One inference runtime holding one loaded model. */
  public interface Backend {
    /**
     * Run the model on one NCHW image. {@code lambda} is the {@code lam} input's data, or null
     * when the model has none. Returns each output's logits by the card's output name.
     */
    Map<String, float[]> run(float[] image, long[] shape, float[] lambda) throws Exception;
  }

  /** Top-k per output plus timings. */
  public static final class Result {
    /** Output name (card order) to its ranked classes, best first. */
    public final Map<String, List<Probabilities.Ranked>> topK;
    public final long preprocessNanos;
    public final long inferenceNanos;

    Result(Map<String, List<Probabilities.Ranked>> topK, long preprocessNanos,
        long inferenceNanos) {
      this.topK = Collections.unmodifiableMap(topK);
      this.preprocessNanos = preprocessNanos;
      this.inferenceNanos = inferenceNanos;
    }
  }

  private final ModelCard card;
  private final Backend backend;

  public Classifier(ModelCard card, Backend backend) {
    this.card = card;
    this.backend = backend;
  }

  /**
   * Classify raw HWC pixels. {@code lambda} must be given exactly when the card has a runtime
   * lambda input.
   */
  public Result classify(float[] raw, int height, int width, Float lambda, int k)
      throws Exception {
    float[] lam = null;
    if (card.hasRuntimeLambda()) {
      if (lambda == null) {
        throw new IllegalArgumentException("this model needs a lambda (runtime-lambda export)");
      }
      lam = new LambdaControl(card).input(lambda);
    } else if (lambda != null) {
      throw new IllegalArgumentException("this model has no lambda input");
    }
    Preprocessing pre = card.preprocessing;
    long start = System.nanoTime();
    float[] input = pre.apply(raw, height, width);
    long prepared = System.nanoTime();
    Map<String, float[]> outputs = backend.run(input,
        new long[] {1, pre.channels, pre.height, pre.width}, lam);
    long done = System.nanoTime();
    Map<String, List<Probabilities.Ranked>> ranked =
        new LinkedHashMap<String, List<Probabilities.Ranked>>();
    for (ModelCard.TensorSpec spec : card.outputs) {
      float[] logits = outputs.get(spec.name);
      if (logits == null || logits.length != card.classes.size()) {
        throw new IllegalStateException("the runtime returned "
            + (logits == null ? "no" : logits.length + " values for") + " output \"" + spec.name
            + "\", the card declares " + card.classes.size() + " logits");
      }
      ranked.put(spec.name, Probabilities.topK(Probabilities.softmax(logits), k));
    }
    return new Result(ranked, prepared - start, done - prepared);
  }
}
