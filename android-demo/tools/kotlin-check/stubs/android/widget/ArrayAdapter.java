package android.widget;
public class ArrayAdapter<T> implements SpinnerAdapter {
  public ArrayAdapter(android.content.Context context, int resource, java.util.List<T> objects) {}
}
