package android.view;
public class View {
  public static final int VISIBLE = 0;
  public static final int GONE = 8;
  public interface OnClickListener { void onClick(View v); }
  public View(android.content.Context context) {}
  public static int generateViewId() { return 0; }
  public int getId() { return 0; }
  public void setId(int id) {}
  public int getVisibility() { return 0; }
  public void setVisibility(int visibility) {}
  public void setOnClickListener(OnClickListener l) {}
  public int getPaddingLeft() { return 0; }
  public int getPaddingTop() { return 0; }
  public int getPaddingRight() { return 0; }
  public int getPaddingBottom() { return 0; }
  public void setPadding(int left, int top, int right, int bottom) {}
}
