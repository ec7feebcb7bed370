package org.pflkit.core.fl;

import java.util.Collections;
import java.util.LinkedHashMap;
import java.util.Map;
import org.pflkit.core.Json;
import org.pflkit.core.JsonWriter;
import org.pflkit.core.Safetensors;
import org.pflkit.core.TensorData;

/**
 * The device's private state (the personal part that never leaves the phone, e.g. SuPerFed's
 * local model or FedRoD's personalized head) and small JSON metadata. Stored as the Python
 * SDK's {@code client_state.safetensors}: the tensors plus metadata {@value #META_KEY}.
 */
public final class ClientState {
  public static final String META_KEY = "pflkit.client_meta";

  public final Map<String, TensorData> tensors;
  public final Map<String, Object> meta;

  public ClientState(Map<String, TensorData> tensors, Map<String, Object> meta) {
    this.tensors = Collections.unmodifiableMap(new LinkedHashMap<String, TensorData>(tensors));
    this.meta = Collections.unmodifiableMap(new LinkedHashMap<String, Object>(meta));
  }

  public byte[] toBytes() {
    return Safetensors.write(tensors, Collections.singletonMap(META_KEY,
        JsonWriter.write(meta)));
  }

  /** Inverse of {@link #toBytes}; corrupt bytes throw naming {@code source}. */
  public static ClientState fromBytes(byte[] bytes, String source)
      throws Safetensors.FormatException {
    Safetensors file = Safetensors.parse(bytes, source);
    String json = file.metadata.get(META_KEY);
    Object meta;
    try {
      meta = json == null ? Collections.emptyMap() : Json.parse(json);
    } catch (Json.SyntaxException e) {
      throw new Safetensors.FormatException(source + ": " + META_KEY + " is not JSON");
    }
    if (!(meta instanceof Map)) {
      throw new Safetensors.FormatException(source + ": " + META_KEY + " is not an object");
    }
    @SuppressWarnings("unchecked")
    Map<String, Object> map = (Map<String, Object>) meta;
    return new ClientState(file.tensors, map);
  }
}
