package ai.onnxruntime;
public abstract class OnnxTensorLike implements OnnxValue {}
