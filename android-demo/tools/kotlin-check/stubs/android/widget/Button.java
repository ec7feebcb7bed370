package android.widget;
public class Button extends TextView {
  public Button(android.content.Context context) { super(context); }
}
