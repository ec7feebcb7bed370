package androidx.activity;
public class ComponentActivity extends android.content.Context
    implements androidx.lifecycle.LifecycleOwner {
  protected void onCreate(android.os.Bundle savedInstanceState) {}
  public void setContentView(int layoutResID) {}
  public <T extends android.view.View> T findViewById(int id) { return null; }
  public final <I, O> androidx.activity.result.ActivityResultLauncher<I> registerForActivityResult(
      androidx.activity.result.contract.ActivityResultContract<I, O> contract,
      androidx.activity.result.ActivityResultCallback<O> callback) { return null; }
}
