package ai.onnxruntime;
public class OrtException extends Exception {}
