package androidx.lifecycle;
public class AndroidViewModel extends ViewModel {
  public AndroidViewModel(android.app.Application application) {}
  public <T extends android.app.Application> T getApplication() { return null; }
}
