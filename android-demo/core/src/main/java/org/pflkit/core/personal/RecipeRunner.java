package org.pflkit.core.personal;

import java.util.ArrayList;
import java.util.Arrays;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Random;
import org.pflkit.core.TensorData;
import org.pflkit.core.TrainingSection;

/**
 * Walks a card's training recipe against a {@link TrainingSession}: the Java twin of pflkit's
 * Python {@code run_recipe}, so the phone trains the personal part with the same schedule the
 * export verified (epochs, phases, optimizers, row splits, SuPerFed's lambda draws and its
 * re-choice of lambda on held-out rows). Random choices (splits, batch order, lambda draws) use
 * a seeded {@link Random}; a device's order is its own, as with any data it alone holds.
 */
public final class RecipeRunner {
  /** Rows per logits call (the program's batch dimension is bounded). */
  static final int PREDICT_CHUNK = 64;

  private final TrainingSection recipe;
  private final TrainingSession session;
  private final int imageSize;

  /**
   * {@code imageShape}: the model's C, H, W (the card's preprocessing), which must be the
   * shape of the program's image input when it has one.
   */
  public RecipeRunner(TrainingSection recipe, TrainingSession session, long[] imageShape) {
    this.recipe = recipe;
    this.session = session;
    for (TrainingSection.Input in : recipe.inputs) {
      if (in.from.equals(TrainingSection.FROM_IMAGE) && !Arrays.equals(in.shape, imageShape)) {
        throw new IllegalArgumentException("the program's image input " + in.name + " takes "
            + Arrays.toString(in.shape) + " per row, the images are "
            + Arrays.toString(imageShape) + " (training.inputs vs preprocessing)");
      }
    }
    this.imageSize = (int) TensorData.numel(imageShape);
  }

  /** Labelled rows in the program's terms: each batched float input's data, and the labels. */
  public static final class Data {
    public final int rows;
    final List<float[]> inputs;  // per card input (null for label and lambda)
    final long[] labels;

    Data(int rows, List<float[]> inputs, long[] labels) {
      this.rows = rows;
      this.inputs = inputs;
      this.labels = labels;
    }
  }

  /** What one walk did. */
  public static final class Result {
    public final int steps;
    /** Mean loss of each optimizer's last pass. */
    public final Map<String, Float> losses;

    Result(int steps, Map<String, Float> losses) {
      this.steps = steps;
      this.losses = losses;
    }
  }

  /**
   * Images (NCHW, preprocessed) and labels into program inputs; prepare runs once per row.
   * Rows the program cannot learn from are refused before any call (pflkit's
   * {@code check_rows}): none at all, non-finite values, a label outside the program's
   * classes; so are non-finite {@code prepare} outputs. The runtime would take them without a
   * word and make the personal weights NaN, or read past its logits.
   */
  public Data prepare(float[] images, long[] labels) throws Exception {
    int n = labels.length;
    if (n == 0) {
      throw new IllegalArgumentException("no labelled rows: at least one is needed to train");
    }
    if (images.length != (long) n * imageSize) {
      throw new IllegalArgumentException(images.length + " image values for " + n + " rows of "
          + imageSize);
    }
    int bad = PersonalWeights.firstNonFinite(images);
    if (bad >= 0) {
      throw new IllegalArgumentException("image value " + images[bad] + " at row "
          + bad / Math.max(1, imageSize) + ": images must be finite (preprocessed as the card "
          + "says)");
    }
    for (int r = 0; r < n; r++) {
      if (labels[r] < 0 || labels[r] >= recipe.classes) {
        throw new IllegalArgumentException("label " + labels[r] + " at row " + r + " is not a "
            + "class of this program (0.." + (recipe.classes - 1) + ")");
      }
    }
    List<float[]> prepared = null;
    if (recipe.prepareMethod != null) {
      prepared = new ArrayList<float[]>();
      int chunk = Math.min(PREDICT_CHUNK, recipe.maxBatch);
      for (int start = 0; start < n; start += chunk) {
        int rows = Math.min(chunk, n - start);
        List<float[]> part = session.prepare(
            Arrays.copyOfRange(images, start * imageSize, (start + rows) * imageSize), rows);
        for (int k = 0; k < part.size(); k++) {
          if (start == 0) {
            prepared.add(new float[part.get(k).length / rows * n]);
          }
          System.arraycopy(part.get(k), 0, prepared.get(k), part.get(k).length / rows * start,
              part.get(k).length);
        }
      }
    }
    List<float[]> inputs = new ArrayList<float[]>();
    int k = 0;
    for (TrainingSection.Input in : recipe.inputs) {
      if (in.from.equals(TrainingSection.FROM_IMAGE)) {
        inputs.add(images);
      } else if (in.from.equals(TrainingSection.FROM_PREPARE)) {
        float[] values = k < prepared.size() ? prepared.get(k++) : null;
        long size = TensorData.numel(in.shape);
        if (values == null || values.length != n * size) {
          throw new IllegalStateException("prepare gave " + (values == null ? "no output"
              : values.length + " values") + " for input " + in.name + ", which takes "
              + Arrays.toString(in.shape) + " per row (training.inputs)");
        }
        int wrong = PersonalWeights.firstNonFinite(values);
        if (wrong >= 0) {  // e.g. a frozen part that overflows on these rows
          throw new IllegalStateException("prepare gave " + values[wrong] + " for input "
              + in.name + " at row " + wrong / Math.max(1, size) + ": the program's inputs must "
              + "be finite");
        }
        inputs.add(values);
      } else {
        inputs.add(null);
      }
    }
    return new Data(n, inputs, labels.clone());
  }

  /**
   * Row indices per row set for {@code n} labelled rows: each split takes a random
   * floor(fraction * n) (fewer if the splits before it left fewer), the rest are
   * {@value TrainingSection#TRAIN_ROWS} (pflkit's {@code Recipe.split_rows}); an empty split
   * with {@code if_empty = all} uses every row.
   */
  public Map<String, int[]> splitRows(int n, Random rng) {
    int[] order = permutation(n, rng);
    Map<String, int[]> rows = new LinkedHashMap<String, int[]>();
    int start = 0;
    for (TrainingSection.Split split : recipe.splits) {
      int end = Math.min(n, start + (int) Math.floor(split.fraction * n));
      rows.put(split.name, sorted(Arrays.copyOfRange(order, start, end)));
      start = end;
    }
    rows.put(TrainingSection.TRAIN_ROWS, sorted(Arrays.copyOfRange(order, start, n)));
    for (TrainingSection.Split split : recipe.splits) {
      if (rows.get(split.name).length == 0 && split.ifEmpty.equals("all")) {
        int[] all = new int[n];
        for (int i = 0; i < n; i++) {
          all[i] = i;
        }
        rows.put(split.name, all);
      }
    }
    return rows;
  }

  /**
   * The whole schedule: every epoch, every phase, shuffled mini-batches, one step each; the
   * optimizers start fresh (no momentum from an earlier walk on the same session).
   */
  public Result train(Data data, Map<String, int[]> rows, Random rng) throws Exception {
    session.newOptimizers();
    int steps = 0;
    Map<String, Float> losses = new LinkedHashMap<String, Float>();
    for (int epoch = 0; epoch < recipe.epochs; epoch++) {
      for (TrainingSection.Phase phase : recipe.phases) {
        int[] set = rows.get(phase.rows);
        int[] order = permutation(set.length, rng);
        double total = 0;
        int count = 0;
        for (int start = 0; start < set.length; start += recipe.batchSize) {
          int[] batch = new int[Math.min(recipe.batchSize, set.length - start)];
          for (int i = 0; i < batch.length; i++) {
            batch[i] = set[order[start + i]];
          }
          total += session.step(phase.optimizer, inputs(data, batch, drawLambda(rng)));
          count++;
          steps++;
        }
        if (count > 0) {
          losses.put(phase.optimizer, (float) (total / count));
        }
      }
    }
    return new Result(steps, losses);
  }

  /** The program's logits for {@code rows}, row-major; {@code lambda}: the model W(lambda). */
  public float[] logits(Data data, int[] rows, float lambda) throws Exception {
    float[] lam = recipe.lambda == null ? null : constant(lambda);
    int chunk = Math.min(PREDICT_CHUNK, recipe.maxBatch);
    int classes = recipe.classes;
    float[] out = new float[Math.multiplyExact(rows.length, classes)];
    for (int start = 0; start < rows.length; start += chunk) {
      int[] part = Arrays.copyOfRange(rows, start, Math.min(rows.length, start + chunk));
      float[] logits = session.logits(inputs(data, part, lam));
      if (logits.length != (long) part.length * classes) {  // scores would read another row's
        throw new IllegalStateException("the program gave " + logits.length + " logits for "
            + part.length + " rows; its card declares " + classes + " classes "
            + "(training.outputs)");
      }
      System.arraycopy(logits, 0, out, start * classes, logits.length);
    }
    return out;
  }

  /** The program's inputs for {@code rows} at a constant lambda (e.g. a warm-up call). */
  public List<ProgramInput> batch(Data data, int[] rows, float lambda) {
    if (rows.length < 1 || rows.length > recipe.maxBatch) {
      throw new IllegalArgumentException("a batch of " + rows.length + " rows: the program "
          + "takes 1.." + recipe.maxBatch + " (training.max_batch)");
    }
    return inputs(data, rows, recipe.lambda == null ? null : constant(lambda));
  }

  /** Top-1 accuracy of W(lambda) on {@code rows} (NaN for no rows). */
  public double accuracy(Data data, int[] rows, float lambda) throws Exception {
    return Scores.of(logits(data, rows, lambda), labels(data, rows)).top1;
  }

  /**
   * SuPerFed's rule: the lambda of the card's grid with the best top-1 on {@code rows}, ties to
   * the lower NLL, then to the earlier grid entry.
   */
  public float chooseLambda(Data data, int[] rows) throws Exception {
    float best = 0;
    Scores bestScores = null;
    for (float lam : recipe.lambdaGrid) {
      Scores s = Scores.of(logits(data, rows, lam), labels(data, rows));
      if (bestScores == null || s.top1 > bestScores.top1
          || (s.top1 == bestScores.top1 && s.nll < bestScores.nll)) {
        best = lam;
        bestScores = s;
      }
    }
    return best;
  }

  private static long[] labels(Data data, int[] rows) {
    long[] y = new long[rows.length];
    for (int i = 0; i < rows.length; i++) {
      y[i] = data.labels[rows[i]];
    }
    return y;
  }

  /** The lam input for one training batch, or null when the program has none. */
  float[] drawLambda(Random rng) {
    TrainingSection.LambdaInput spec = recipe.lambda;
    if (spec == null) {
      return null;
    }
    if (spec.fixed != null) {
      return constant(spec.fixed.floatValue());
    }
    if (spec.layerOf == null) {
      return constant(rng.nextFloat());
    }
    int layers = 0;
    for (int l : spec.layerOf) {
      layers = Math.max(layers, l + 1);
    }
    float[] draws = new float[layers];
    for (int l = 0; l < layers; l++) {
      draws[l] = rng.nextFloat();
    }
    float[] lam = new float[spec.size];
    for (int i = 0; i < lam.length; i++) {
      lam[i] = draws[spec.layerOf[i]];
    }
    return lam;
  }

  /**
   * A lambda the app hands in (the model W(lambda) it evaluates): SuPerFed's mixing weight is
   * in [0, 1], as every lambda the recipe draws; another value is no model of the method.
   */
  static void checkLambda(float lambda) {
    if (!(lambda >= 0 && lambda <= 1)) {
      throw new IllegalArgumentException("lambda " + lambda + " is outside [0, 1] (the weight "
          + "of the personal model in W(lambda))");
    }
  }

  private float[] constant(float value) {
    checkLambda(value);
    float[] lam = new float[recipe.lambda.size];
    Arrays.fill(lam, value);
    return lam;
  }

  /** The program's inputs for a batch of rows, in card order. */
  List<ProgramInput> inputs(Data data, int[] batch, float[] lam) {
    List<ProgramInput> out = new ArrayList<ProgramInput>();
    for (int k = 0; k < recipe.inputs.size(); k++) {
      TrainingSection.Input in = recipe.inputs.get(k);
      long[] shape = new long[in.shape.length + 1];
      shape[0] = batch.length;
      System.arraycopy(in.shape, 0, shape, 1, in.shape.length);
      if (in.from.equals(TrainingSection.FROM_LABEL)) {
        out.add(ProgramInput.ofLongs(in.name, shape, labels(data, batch)));
      } else if (in.from.equals(TrainingSection.FROM_LAMBDA)) {
        out.add(ProgramInput.ofFloats(in.name, in.shape.clone(), lam));
      } else {
        float[] all = data.inputs.get(k);
        int size = all.length / data.rows;
        float[] rows = new float[size * batch.length];
        for (int i = 0; i < batch.length; i++) {
          System.arraycopy(all, batch[i] * size, rows, i * size, size);
        }
        out.add(ProgramInput.ofFloats(in.name, shape, rows));
      }
    }
    return out;
  }

  static int[] permutation(int n, Random rng) {
    int[] order = new int[n];
    for (int i = 0; i < n; i++) {
      order[i] = i;
    }
    for (int i = n - 1; i > 0; i--) {
      int j = rng.nextInt(i + 1);
      int t = order[i];
      order[i] = order[j];
      order[j] = t;
    }
    return order;
  }

  private static int[] sorted(int[] rows) {
    int[] out = rows.clone();
    Arrays.sort(out);
    return out;
  }
}
