package androidx.core.view;
public class WindowInsetsCompat {
  public static final class Type {
    public static int systemBars() { return 0; }
    public static int displayCutout() { return 0; }
  }
  public androidx.core.graphics.Insets getInsets(int typeMask) { return null; }
}
