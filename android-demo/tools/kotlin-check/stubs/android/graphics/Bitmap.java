package android.graphics;
public final class Bitmap {
  public enum Config { ALPHA_8, RGB_565, ARGB_8888 }
  public int getWidth() { return 0; }
  public int getHeight() { return 0; }
  public void getPixels(int[] pixels, int offset, int stride, int x, int y, int width,
      int height) {}
}
