package org.pflkit.core.personal;

import java.io.ByteArrayInputStream;
import java.io.File;
import java.io.IOException;
import java.util.Arrays;
import java.util.LinkedHashMap;
import java.util.Map;
import org.pflkit.core.ArtifactCheck;
import org.pflkit.core.AtomicFiles;
import org.pflkit.core.Json;
import org.pflkit.core.ModelCard;
import org.pflkit.core.Safetensors;
import org.pflkit.core.TensorData;
import org.pflkit.core.TrainingSection;
import org.pflkit.core.fl.ClientState;

/**
 * The personal weights a device trained, at rest in app storage as a client state
 * ({@code client_state.safetensors} layout: the tensors named as the card's {@code parameters},
 * metadata with the chosen lambda and the sha256 of the program they belong to, so weights of
 * another export are never loaded into this one). {@link #restore} and {@link #reset} are the
 * screen's two ways of putting weights into the program, so that no stored file can make the
 * screen fail on every start.
 */
public final class PersonalWeights {
  public static final String FILE = "personal_weights.safetensors";
  public static final String LAMBDA = "lam";
  public static final String PROGRAM = "program_sha256";

  private PersonalWeights() {}

  /** What {@link #restore} loaded. */
  public static final class Restored {
    /** The lambda saved with the weights, or null (none saved, or the export's were loaded). */
    public final Float lambda;
    /** Why the saved weights were not loaded (they stay on disk), or null. */
    public final String problem;

    Restored(Float lambda, String problem) {
      this.lambda = lambda;
      this.problem = problem;
    }
  }

  /**
   * Load this program's saved weights into {@code session}, else the export's initial ones
   * ({@code listed}: the card's artifacts entry for them, see {@link #initial}). Saved weights
   * that cannot be used (damaged, other shapes, non-finite values, a lambda outside [0, 1],
   * refused by the session) are not loaded but reported, and kept on disk until {@link #reset}
   * or the next {@link #save}. Only the initial weights failing throws.
   */
  public static Restored restore(TrainingSection section, File dir, String programSha256,
      File exportDir, ModelCard.Artifact listed, TrainingSession session) throws Exception {
    String problem = null;
    try {
      ClientState saved = load(dir, programSha256);
      if (saved != null) {
        Float lambda = lambda(saved.meta.get(LAMBDA));
        session.loadWeights(fromTensors(section, saved.tensors, FILE));
        return new Restored(lambda, null);
      }
    } catch (Exception e) {
      problem = e.getMessage() != null ? e.getMessage() : e.toString();
    }
    session.loadWeights(initial(section, exportDir, listed));
    return new Restored(null, problem);
  }

  /** Back to the export's initial weights; the saved ones are deleted only once those loaded. */
  public static void reset(TrainingSection section, File dir, File exportDir,
      ModelCard.Artifact listed, TrainingSession session) throws Exception {
    session.loadWeights(initial(section, exportDir, listed));
    AtomicFiles.delete(new File(dir, FILE));
  }

  private static Float lambda(Object saved) throws IOException {
    if (saved == null) {
      return null;
    }
    double value = Json.isNumber(saved) ? ((Number) saved).doubleValue() : Double.NaN;
    if (!(value >= 0 && value <= 1)) {  // the writer's 1.0 reads back as the integer 1
      throw new IOException(FILE + ": " + LAMBDA + " " + saved + " is not a number in [0, 1]");
    }
    return (float) value;
  }

  /** Weights by name from safetensors bytes, checked against the card's parameters. */
  public static Map<String, float[]> fromTensors(TrainingSection section,
      Map<String, TensorData> tensors, String source) throws IOException {
    Map<String, float[]> out = new LinkedHashMap<String, float[]>();
    for (TrainingSection.Parameter p : section.parameters) {
      TensorData t = tensors.get(p.name);
      if (t == null || !t.dtype.equals(TensorData.F32) || !Arrays.equals(t.shape(), p.shape)) {
        throw new IOException(source + ": parameter " + p.name + " is "
            + (t == null ? "missing" : t + ", expected F32" + Arrays.toString(p.shape)));
      }
      float[] values = t.floats();
      Float bad = nonFinite(values);
      if (bad != null) {
        throw new IOException(source + ": parameter " + p.name + " holds " + bad);
      }
      out.put(p.name, values);
    }
    return out;
  }

  /** The first NaN or infinite value of {@code values}, or null when all are finite. */
  static Float nonFinite(float[] values) {
    int i = firstNonFinite(values);
    return i < 0 ? null : values[i];
  }

  /** The index of the first NaN or infinite value of {@code values}, or -1. */
  static int firstNonFinite(float[] values) {
    for (int i = 0; i < values.length; i++) {
      if (Float.isNaN(values[i]) || Float.isInfinite(values[i])) {
        return i;
      }
    }
    return -1;
  }

  /**
   * The export's initial personal weights ({@code training.initial_weights}), read only when
   * the file is the one the card lists ({@code listed}: the card's artifacts entry for it, its
   * size and sha256), as pflkit's Python trainer reads them: weights of another export (a
   * folder pushed in part) or damaged ones are refused, not loaded into this program.
   */
  public static Map<String, float[]> initial(TrainingSection section, File exportDir,
      ModelCard.Artifact listed) throws IOException {
    if (listed == null || !listed.file.equals(section.initialWeights)) {
      throw new IOException(section.initialWeights + " is not listed in the model card's "
          + "artifacts");
    }
    File file = new File(exportDir, section.initialWeights);
    if (!file.isFile()) {
      throw new IOException("no " + section.initialWeights + " beside the model card");
    }
    byte[] bytes = file.length() == listed.bytes ? AtomicFiles.readOrNull(file) : null;
    if (bytes == null) {  // a file of another size is not read
      throw new IOException(listed.file + " does not match its model card: " + file.length()
          + " bytes; the card lists " + listed.bytes + " bytes. Copy the card and the "
          + "artifacts of the same export together.");
    }
    ArtifactCheck.verify(new ByteArrayInputStream(bytes), listed);
    return fromTensors(section, Safetensors.parse(bytes, file.getPath()).tensors,
        file.getPath());
  }

  /** The saved state for this program, or null (none saved, or saved for another program). */
  public static ClientState load(File dir, String programSha256) throws IOException {
    byte[] bytes = AtomicFiles.readOrNull(new File(dir, FILE));
    if (bytes == null) {
      return null;
    }
    ClientState state = ClientState.fromBytes(bytes, FILE);
    return programSha256.equals(state.meta.get(PROGRAM)) ? state : null;
  }

  /** Save trained weights and the lambda chosen with them (null when the model has none). */
  public static void save(File dir, TrainingSection section, String programSha256,
      Map<String, float[]> weights, Float lambda) throws IOException {
    Map<String, TensorData> tensors = new LinkedHashMap<String, TensorData>();
    for (TrainingSection.Parameter p : section.parameters) {
      tensors.put(p.name, TensorData.ofFloats(p.shape, weights.get(p.name)));
    }
    Map<String, Object> meta = new LinkedHashMap<String, Object>();
    meta.put(PROGRAM, programSha256);
    if (lambda != null) {
      meta.put(LAMBDA, (double) lambda);
    }
    AtomicFiles.write(new File(dir, FILE), new ClientState(tensors, meta).toBytes());
  }
}
