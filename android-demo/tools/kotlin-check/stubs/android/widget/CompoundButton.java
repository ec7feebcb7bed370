package android.widget;
public abstract class CompoundButton extends Button {
  public CompoundButton(android.content.Context context) { super(context); }
  public boolean isChecked() { return false; }
  public void setChecked(boolean checked) {}
}
