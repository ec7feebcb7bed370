package ai.onnxruntime;
public final class OrtEnvironment implements AutoCloseable {
  public static OrtEnvironment getEnvironment() { return null; }
  public OrtSession createSession(String modelPath, OrtSession.SessionOptions options)
      throws OrtException { return null; }
  @Override public void close() {}
}
