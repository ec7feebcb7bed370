package org.pflkit.core.personal;

import java.util.Arrays;
import java.util.Map;
import java.util.Random;
import org.pflkit.core.TrainingSection;

/**
 * The app's personalize flow: a quarter of the user's labelled samples is held out; the card's
 * recipe trains the personal part on the rest (splitting them further as the recipe says, and
 * re-choosing SuPerFed's lambda on its own split); the held-out accuracy is measured before and
 * after with the same program.
 */
public final class Personalizer {
  /** One held-out row per this many labelled rows. */
  public static final int HOLD_OUT_EVERY = 4;

  private Personalizer() {}

  /** What personalizing did. */
  public static final class Report {
    public final int trainRows;
    public final int heldOutRows;
    /** Held-out top-1 before and after (NaN with fewer than {@value #HOLD_OUT_EVERY} rows). */
    public final double accuracyBefore;
    public final double accuracyAfter;
    public final int steps;
    public final Map<String, Float> losses;
    /** The lambda evaluated before and chosen after (null without a lambda input). */
    public final Float lambdaBefore;
    public final Float lambdaAfter;
    public final Map<String, float[]> weights;

    Report(int trainRows, int heldOutRows, double before, double after, RecipeRunner.Result run,
        Float lambdaBefore, Float lambdaAfter, Map<String, float[]> weights) {
      this.trainRows = trainRows;
      this.heldOutRows = heldOutRows;
      this.accuracyBefore = before;
      this.accuracyAfter = after;
      this.steps = run.steps;
      this.losses = run.losses;
      this.lambdaBefore = lambdaBefore;
      this.lambdaAfter = lambdaAfter;
      this.weights = weights;
    }
  }

  /**
   * Personalize {@code session} (already holding the weights to start from) on labelled
   * preprocessed {@code images}; {@code lambda} is the model's current lambda, in [0, 1]
   * (ignored without a lambda input). Rows {@link RecipeRunner#prepare} refuses and a lambda
   * outside [0, 1] are refused before any step. Deterministic in {@code seed}. A run that fails
   * or diverges (a trained weight not finite: {@link IllegalStateException}) puts the starting
   * weights back first, so the session and the weights the caller would save are never a
   * broken run's.
   */
  public static Report run(TrainingSection recipe, TrainingSession session, long[] imageShape,
      float[] images, long[] labels, float lambda, long seed) throws Exception {
    if (recipe.lambda != null) {
      RecipeRunner.checkLambda(lambda);
    }
    Map<String, float[]> start = session.weights();
    try {
      Report report = train(recipe, session, imageShape, images, labels, lambda, seed);
      for (Map.Entry<String, float[]> w : report.weights.entrySet()) {
        Float bad = PersonalWeights.nonFinite(w.getValue());
        if (bad != null) {
          throw new IllegalStateException("training diverged: parameter " + w.getKey()
              + " is not finite (" + bad + "); the personal weights are kept as they were");
        }
      }
      return report;
    } catch (Exception e) {
      try {
        session.loadWeights(start);
      } catch (Exception restore) {
        e.addSuppressed(restore);
      }
      throw e;
    }
  }

  private static Report train(TrainingSection recipe, TrainingSession session,
      long[] imageShape, float[] images, long[] labels, float lambda, long seed)
      throws Exception {
    RecipeRunner runner = new RecipeRunner(recipe, session, imageShape);
    RecipeRunner.Data data = runner.prepare(images, labels);
    Random rng = new Random(seed);
    int[] order = RecipeRunner.permutation(data.rows, rng);
    int held = data.rows / HOLD_OUT_EVERY;
    int[] heldOut = sorted(Arrays.copyOfRange(order, 0, held));
    int[] train = sorted(Arrays.copyOfRange(order, held, data.rows));
    RecipeRunner.Data trainData = subset(data, train);

    Float lamBefore = recipe.lambda == null ? null : lambda;
    float lam = lamBefore == null ? 0f : lamBefore;
    double before = held == 0 ? Double.NaN : runner.accuracy(data, heldOut, lam);
    Map<String, int[]> rows = runner.splitRows(trainData.rows, rng);
    RecipeRunner.Result result = runner.train(trainData, rows, rng);
    Float lamAfter = lamBefore;
    if (recipe.chooseLambdaOn != null && rows.get(recipe.chooseLambdaOn).length > 0) {
      lamAfter = runner.chooseLambda(trainData, rows.get(recipe.chooseLambdaOn));
    }
    double after = held == 0 ? Double.NaN
        : runner.accuracy(data, heldOut, lamAfter == null ? 0f : lamAfter);
    return new Report(train.length, held, before, after, result, lamBefore, lamAfter,
        session.weights());
  }

  private static RecipeRunner.Data subset(RecipeRunner.Data data, int[] rows) {
    java.util.List<float[]> inputs = new java.util.ArrayList<float[]>();
    for (float[] all : data.inputs) {
      if (all == null) {
        inputs.add(null);
        continue;
      }
      int size = all.length / Math.max(1, data.rows);
      float[] part = new float[size * rows.length];
      for (int i = 0; i < rows.length; i++) {
        System.arraycopy(all, rows[i] * size, part, i * size, size);
      }
      inputs.add(part);
    }
    long[] labels = new long[rows.length];
    for (int i = 0; i < rows.length; i++) {
      labels[i] = data.labels[rows[i]];
    }
    return new RecipeRunner.Data(rows.length, inputs, labels);
  }

  private static int[] sorted(int[] rows) {
    int[] out = rows.clone();
    Arrays.sort(out);
    return out;
  }
}
