package android.widget;
public class ImageView extends android.view.View {
  public ImageView(android.content.Context context) { super(context); }
  public void setImageBitmap(android.graphics.Bitmap bm) {}
}
