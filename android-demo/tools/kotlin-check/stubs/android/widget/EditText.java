package android.widget;
public class EditText extends TextView {
  public EditText(android.content.Context context) { super(context); }
  @Override public android.text.Editable getText() { return null; }
}
