package android.widget;
public class RadioButton extends CompoundButton {
  public RadioButton(android.content.Context context) { super(context); }
}
