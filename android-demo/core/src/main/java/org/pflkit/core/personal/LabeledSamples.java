package org.pflkit.core.personal;

import java.io.File;
import java.io.IOException;
import java.util.Arrays;
import java.util.LinkedHashMap;
import java.util.Map;
import org.pflkit.core.AtomicFiles;
import org.pflkit.core.Safetensors;
import org.pflkit.core.TensorData;

/**
 * The samples the user labelled on the device, kept in app storage in the layout
 * {@code pfl-client --data} reads ({@value #FILE}: {@code x} float32 [N, C, H, W], already
 * preprocessed as the card says; {@code y} int64 [N]), so the same rows can train a federated
 * round. Every change rewrites the file atomically. A file this model cannot use (samples of
 * another input shape, a class outside the card's, NaN or infinite inputs, damaged bytes)
 * opens as an empty set with a {@link #problem()}: {@link #add} refuses until {@link #clear}
 * replaces the file, so the screen still opens and the user decides, instead of every open
 * failing.
 */
public final class LabeledSamples {
  public static final String FILE = "data.safetensors";

  private final File file;
  private final long[] imageShape;
  private final int numClasses;
  private float[] images = new float[0];
  private long[] labels = new long[0];
  private String problem;

  private LabeledSamples(File file, long[] imageShape, int numClasses) {
    this.file = file;
    this.imageShape = imageShape.clone();
    this.numClasses = numClasses;
  }

  /** The samples in {@code dir}: none yet when the file does not exist, see {@link #problem()}. */
  public static LabeledSamples open(File dir, long[] imageShape, int numClasses) {
    LabeledSamples samples = new LabeledSamples(new File(dir, FILE), imageShape, numClasses);
    try {
      samples.read();
    } catch (IOException e) {
      samples.problem = e.getMessage();
    }
    return samples;
  }

  /** Why the file on disk cannot be used (it is kept until {@link #clear}), or null. */
  public String problem() {
    return problem;
  }

  private void read() throws IOException {
    byte[] bytes = AtomicFiles.readOrNull(file);
    if (bytes == null) {
      return;
    }
    Safetensors data = Safetensors.parse(bytes, file.getPath());
    TensorData x = data.tensors.get("x");
    TensorData y = data.tensors.get("y");
    if (x == null || y == null || data.tensors.size() != 2 || !x.dtype.equals(TensorData.F32)
        || !y.dtype.equals(TensorData.I64) || y.shape().length != 1) {
      throw new Safetensors.FormatException(file + ": expected exactly x float32 [N, "
          + "...] and y int64 [N], found " + data.tensors);
    }
    long[] shape = x.shape();
    long[] want = new long[imageShape.length + 1];
    want[0] = y.numel();
    System.arraycopy(imageShape, 0, want, 1, imageShape.length);
    if (!Arrays.equals(shape, want)) {
      throw new Safetensors.FormatException(file + ": x is " + Arrays.toString(shape)
          + ", this model needs " + Arrays.toString(want) + " (samples of another model?)");
    }
    long[] ys = y.longs();
    for (long label : ys) {
      if (label < 0 || label >= numClasses) {
        throw new Safetensors.FormatException(file + ": class " + label + " outside 0.."
            + (numClasses - 1) + " (samples of another model?)");
      }
    }
    float[] xs = x.floats();
    Float bad = PersonalWeights.nonFinite(xs);
    if (bad != null) {
      throw new Safetensors.FormatException(file + ": x holds " + bad + " (inputs must be "
          + "finite, preprocessed as the card says)");
    }
    images = xs;
    labels = ys;
  }

  public int size() {
    return labels.length;
  }

  /** All preprocessed inputs, row-major NCHW (a copy). */
  public float[] images() {
    return images.clone();
  }

  public long[] labels() {
    return labels.clone();
  }

  /** Samples per class. */
  public int[] counts() {
    int[] counts = new int[numClasses];
    for (long y : labels) {
      counts[(int) y]++;
    }
    return counts;
  }

  /** Append one preprocessed input (C*H*W values) with its class and save. */
  public void add(float[] input, int label) throws IOException {
    if (problem != null) {
      throw new IOException(problem + "; clear the samples to start again");
    }
    int size = images.length / Math.max(1, labels.length);
    long per = 1;
    for (long d : imageShape) {
      per *= d;
    }
    if (input.length != per || (labels.length > 0 && size != per)) {
      throw new IllegalArgumentException("an input has " + per + " values, got " + input.length);
    }
    if (label < 0 || label >= numClasses) {
      throw new IllegalArgumentException("class " + label + " outside 0.." + (numClasses - 1));
    }
    Float bad = PersonalWeights.nonFinite(input);
    if (bad != null) {
      throw new IllegalArgumentException("an input holds " + bad + "; inputs must be finite");
    }
    float[] x = Arrays.copyOf(images, images.length + input.length);
    System.arraycopy(input, 0, x, images.length, input.length);
    long[] y = Arrays.copyOf(labels, labels.length + 1);
    y[labels.length] = label;
    save(x, y);
  }

  /** Forget every sample. */
  public void clear() throws IOException {
    save(new float[0], new long[0]);
  }

  private void save(float[] x, long[] y) throws IOException {
    long[] shape = new long[imageShape.length + 1];
    shape[0] = y.length;
    System.arraycopy(imageShape, 0, shape, 1, imageShape.length);
    Map<String, TensorData> tensors = new LinkedHashMap<String, TensorData>();
    tensors.put("x", TensorData.ofFloats(shape, x));
    tensors.put("y", TensorData.ofLongs(new long[] {y.length}, y));
    AtomicFiles.write(file, Safetensors.write(tensors, null));
    images = x;
    labels = y;
    problem = null;
  }
}
