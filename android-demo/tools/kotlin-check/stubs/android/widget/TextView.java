package android.widget;
public class TextView extends android.view.View {
  public TextView(android.content.Context context) { super(context); }
  public CharSequence getText() { return null; }
  public final void setText(CharSequence text) {}
  public final void setText(int resid) {}
}
