package ai.onnxruntime;
public interface OnnxValue extends AutoCloseable { @Override void close(); }
