package android.graphics;
public class BitmapFactory {
  public static class Options {
    public boolean inJustDecodeBounds;
    public int inSampleSize;
    public Bitmap.Config inPreferredConfig;
    public int outWidth;
    public int outHeight;
  }
  public static Bitmap decodeStream(java.io.InputStream is) { return null; }
  public static Bitmap decodeStream(java.io.InputStream is, Rect outPadding, Options opts) {
    return null;
  }
}
