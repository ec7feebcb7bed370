package androidx.core.view;
public class ViewCompat {
  public static void setOnApplyWindowInsetsListener(android.view.View v,
      OnApplyWindowInsetsListener listener) {}
}
