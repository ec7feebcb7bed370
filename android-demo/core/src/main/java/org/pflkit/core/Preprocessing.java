package org.pflkit.core;

import java.util.Arrays;
import java.util.Map;

/**
 * The card's {@code preprocessing} block, applied exactly as pflkit's Python
 * {@code Preprocessing.apply} does, in float32 and in the same order: divide by
 * {@code pixel_scale}, bilinear resize to {@code size} (align_corners = false, no antialias, as
 * PyTorch's {@code F.interpolate}) only when the image is not already that size, then
 * {@code (x - mean[c]) / std[c]}, laid out NCHW.
 */
public final class Preprocessing {
  public final int channels;
  public final int height;
  public final int width;
  public final float pixelScale;
  private final float[] mean;
  private final float[] std;

  Preprocessing(int channels, int height, int width, float pixelScale, float[] mean, float[] std) {
    this.channels = channels;
    this.height = height;
    this.width = width;
    this.pixelScale = pixelScale;
    this.mean = mean.clone();
    this.std = std.clone();
  }

  /** Per-channel mean (a copy). */
  public float[] mean() {
    return mean.clone();
  }

  /** Per-channel standard deviation (a copy). */
  public float[] std() {
    return std.clone();
  }

  static Preprocessing fromJson(Object node, String path) {
    Map<String, Object> map = Fields.object(node, path);
    long channels = Fields.integer(Fields.required(map, "channels", path), path + ".channels");
    if (channels < 1 || channels > 4) {
      throw Fields.fail(path + ".channels", "expected 1 to 4 channels, found " + channels);
    }
    String sizePath = path + ".size";
    java.util.List<Object> size = Fields.array(Fields.required(map, "size", path), sizePath);
    if (size.size() != 2) {
      throw Fields.fail(sizePath, "expected [height, width], found " + size.size() + " entries");
    }
    long h = Fields.integer(size.get(0), sizePath + "[0]");
    long w = Fields.integer(size.get(1), sizePath + "[1]");
    if (h < 1 || w < 1 || h > 4096 || w > 4096) {
      throw Fields.fail(sizePath, "height and width must be in 1..4096, found " + h + "x" + w);
    }
    double scale = Fields.number(Fields.required(map, "pixel_scale", path), path + ".pixel_scale");
    if (!(scale > 0)) {
      throw Fields.fail(path + ".pixel_scale", "must be > 0, found " + scale);
    }
    Fields.oneOf(Fields.required(map, "resize", path), path + ".resize", "bilinear");
    Fields.oneOf(Fields.required(map, "layout", path), path + ".layout", "NCHW");
    float[] mean = perChannel(map, "mean", path, (int) channels);
    float[] std = perChannel(map, "std", path, (int) channels);
    for (int c = 0; c < std.length; c++) {
      if (!(std[c] > 0)) {
        throw Fields.fail(path + ".std[" + c + "]", "must be > 0, found " + std[c]);
      }
    }
    return new Preprocessing((int) channels, (int) h, (int) w, (float) scale, mean, std);
  }

  private static float[] perChannel(Map<String, Object> map, String key, String path, int n) {
    String p = path + "." + key;
    double[] values = Fields.numbers(Fields.required(map, key, path), p);
    if (values.length != n) {
      throw Fields.fail(p, "expected one value per channel (" + n + "), found " + values.length);
    }
    float[] out = new float[n];
    for (int i = 0; i < n; i++) {
      out[i] = (float) values[i];
    }
    return out;
  }

  /** Number of floats in one preprocessed image: C * H * W. */
  public int inputSize() {
    return channels * height * width;
  }

  /**
   * Raw pixels in HWC order (values 0..pixel_scale, {@code rawHeight * rawWidth * channels} of
   * them) to the model input in CHW order ({@code channels * height * width} floats).
   */
  public float[] apply(float[] raw, int rawHeight, int rawWidth) {
    if (rawHeight < 1 || rawWidth < 1) {
      throw new IllegalArgumentException("image size must be positive, got "
          + rawHeight + "x" + rawWidth);
    }
    long expected = (long) rawHeight * rawWidth * channels;  // an int product can wrap to 0
    if (raw.length != expected) {
      throw new IllegalArgumentException("expected " + rawHeight + "x" + rawWidth + "x" + channels
          + " = " + expected + " raw values, got " + raw.length);
    }
    float[] scaled = new float[raw.length]; // CHW, in [0, 1]
    for (int y = 0; y < rawHeight; y++) {
      for (int x = 0; x < rawWidth; x++) {
        for (int c = 0; c < channels; c++) {
          scaled[(c * rawHeight + y) * rawWidth + x] =
              raw[(y * rawWidth + x) * channels + c] / pixelScale;
        }
      }
    }
    float[] sized = (rawHeight == height && rawWidth == width)
        ? scaled : resizeBilinear(scaled, channels, rawHeight, rawWidth, height, width);
    float[] out = new float[sized.length];
    int plane = height * width;
    for (int c = 0; c < channels; c++) {
      for (int i = 0; i < plane; i++) {
        out[c * plane + i] = (sized[c * plane + i] - mean[c]) / std[c];
      }
    }
    return out;
  }

  /**
   * Bilinear resize of a CHW float image with PyTorch's align_corners=false convention: source
   * coordinate {@code max((dst + 0.5) * in / out - 0.5, 0)}, the right/bottom neighbour clamped
   * at the edge; computed in float32 like PyTorch's CPU kernel.
   */
  static float[] resizeBilinear(float[] src, int channels, int inH, int inW, int outH, int outW) {
    Axis ys = new Axis(inH, outH);
    Axis xs = new Axis(inW, outW);
    float[] out = new float[channels * outH * outW];
    for (int c = 0; c < channels; c++) {
      int base = c * inH * inW;
      for (int oy = 0; oy < outH; oy++) {
        int row0 = base + ys.index0[oy] * inW;
        int row1 = base + ys.index1[oy] * inW;
        for (int ox = 0; ox < outW; ox++) {
          int x0 = xs.index0[ox];
          int x1 = xs.index1[ox];
          float top = xs.weight0[ox] * src[row0 + x0] + xs.weight1[ox] * src[row0 + x1];
          float bottom = xs.weight0[ox] * src[row1 + x0] + xs.weight1[ox] * src[row1 + x1];
          out[(c * outH + oy) * outW + ox] = ys.weight0[oy] * top + ys.weight1[oy] * bottom;
        }
      }
    }
    return out;
  }

  /** Source indices and weights along one axis. */
  private static final class Axis {
    final int[] index0;
    final int[] index1;
    final float[] weight0;
    final float[] weight1;

    Axis(int in, int out) {
      index0 = new int[out];
      index1 = new int[out];
      weight0 = new float[out];
      weight1 = new float[out];
      float scale = (float) in / out;
      for (int i = 0; i < out; i++) {
        float source = Math.max(scale * (i + 0.5f) - 0.5f, 0f);
        int i0 = (int) source;
        index0[i] = i0;
        index1[i] = i0 + (i0 < in - 1 ? 1 : 0);
        weight1[i] = source - i0;
        weight0[i] = 1f - weight1[i];
      }
    }
  }

  @Override
  public String toString() {
    return "Preprocessing(channels=" + channels + ", size=" + height + "x" + width
        + ", pixel_scale=" + pixelScale + ", mean=" + Arrays.toString(mean)
        + ", std=" + Arrays.toString(std) + ")";
  }
}
