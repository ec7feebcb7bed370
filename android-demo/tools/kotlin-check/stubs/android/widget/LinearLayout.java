package android.widget;
public class LinearLayout extends android.view.ViewGroup {
  public LinearLayout(android.content.Context context) { super(context); }
}
