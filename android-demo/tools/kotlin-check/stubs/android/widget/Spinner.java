package android.widget;
public class Spinner extends android.view.ViewGroup {
  public Spinner(android.content.Context context) { super(context); }
  public SpinnerAdapter getAdapter() { return null; }
  public void setAdapter(SpinnerAdapter adapter) {}
  public int getSelectedItemPosition() { return 0; }
}
