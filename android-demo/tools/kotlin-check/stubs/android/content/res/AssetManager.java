package android.content.res;
public final class AssetManager {
  public String[] list(String path) throws java.io.IOException { return null; }
  public java.io.InputStream open(String fileName) throws java.io.IOException { return null; }
}
