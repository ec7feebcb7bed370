package ai.onnxruntime;
public class OrtSession implements AutoCloseable {
  public static class SessionOptions implements AutoCloseable {
    @Override public void close() {}
  }
  public static class Result implements AutoCloseable {
    public java.util.Optional<OnnxValue> get(String key) { return null; }
    @Override public void close() {}
  }
  public Result run(java.util.Map<String, ? extends OnnxTensorLike> inputs) throws OrtException {
    return null;
  }
  @Override public void close() throws OrtException {}
}
