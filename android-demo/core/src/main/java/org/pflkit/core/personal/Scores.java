package org.pflkit.core.personal;

/** Top-1 accuracy and mean negative log-likelihood of row-major logits against labels. */
public final class Scores {
  public final double top1;
  public final double nll;

  private Scores(double top1, double nll) {
    this.top1 = top1;
    this.nll = nll;
  }

  /** NaN scores for no rows; ties in the top-1 count for the lower class index. */
  public static Scores of(float[] logits, long[] labels) {
    int n = labels.length;
    if (n == 0) {
      return new Scores(Double.NaN, Double.NaN);
    }
    int classes = logits.length / n;
    int correct = 0;
    double nll = 0;
    for (int r = 0; r < n; r++) {
      int best = 0;
      double max = Double.NEGATIVE_INFINITY;
      for (int c = 0; c < classes; c++) {
        if (logits[r * classes + c] > max) {
          max = logits[r * classes + c];
          best = c;
        }
      }
      double sum = 0;
      for (int c = 0; c < classes; c++) {
        sum += Math.exp(logits[r * classes + c] - max);
      }
      nll += max + Math.log(sum) - logits[r * classes + (int) labels[r]];
      correct += best == labels[r] ? 1 : 0;
    }
    return new Scores(correct / (double) n, nll / n);
  }
}
