package org.pflkit.core;

/**
 * Decoded image pixels (Android's packed ARGB ints) to the raw HWC values a card expects.
 *
 * <p>One-channel models get Pillow's {@code convert("L")} luma, computed with the same integer
 * formula (ITU-R 601-2: 19595 R + 38470 G + 7471 B, rounded), so a developer who checks an
 * image in Python with Pillow gets the same raw values. Values are then mapped from 0..255 to
 * the card's 0..pixel_scale (a no-op for the usual 255).
 */
public final class Pixels {
  private Pixels() {}

  /** {@code argb} is row-major, {@code width * height} ints as {@code Bitmap.getPixels} gives. */
  public static float[] fromArgb(int[] argb, int width, int height, Preprocessing pre) {
    if (width < 0 || height < 0 || argb.length != (long) width * height) {
      throw new IllegalArgumentException("expected " + width + "x" + height + " pixels, got "
          + argb.length);
    }
    if (pre.channels != 1 && pre.channels != 3) {
      throw new IllegalArgumentException("only 1- and 3-channel models take camera images, "
          + "this card has " + pre.channels + " channels");
    }
    float toScale = pre.pixelScale / 255f;
    float[] raw = new float[argb.length * pre.channels];
    for (int i = 0; i < argb.length; i++) {
      int r = (argb[i] >> 16) & 0xFF;
      int g = (argb[i] >> 8) & 0xFF;
      int b = argb[i] & 0xFF;
      if (pre.channels == 1) {
        raw[i] = luma(r, g, b) * toScale;
      } else {
        raw[3 * i] = r * toScale;
        raw[3 * i + 1] = g * toScale;
        raw[3 * i + 2] = b * toScale;
      }
    }
    return raw;
  }

  /** Pillow's "L" conversion of one RGB pixel. */
  static int luma(int r, int g, int b) {
    return (r * 19595 + g * 38470 + b * 7471 + 0x8000) >> 16;
  }
}
