package android.content;
public abstract class Context {
  public android.content.res.AssetManager getAssets() { return null; }
  public android.content.pm.PackageManager getPackageManager() { return null; }
  public String getPackageName() { return null; }
  public java.io.File getFilesDir() { return null; }
  public java.io.File getExternalFilesDir(String type) { return null; }
  public final String getString(int resId) { return null; }
  public final String getString(int resId, Object... formatArgs) { return null; }
  public ContentResolver getContentResolver() { return null; }
  public void startActivity(Intent intent) {}
}
