package org.pflkit.core;

import java.util.ArrayList;
import java.util.Collections;
import java.util.List;

/**
 * Opens the first model file whose runtime loads, in the card's order (ExecuTorch, then ONNX).
 *
 * <p>A runtime whose native library is missing or was built for a newer Android fails with an
 * {@link Error} ({@link UnsatisfiedLinkError}, or {@link NoClassDefFoundError} /
 * {@link ExceptionInInitializerError} from its class's static initializer), not an Exception:
 * those are caught here too, so the app falls back to the next file and says why instead of
 * losing its worker thread. Errors of the virtual machine itself (out of memory) still propagate.
 */
public final class ModelLoader {
  private ModelLoader() {}

  /** Loads one artifact in one runtime. */
  public interface Opener<B> {
    B open(ModelCard.Artifact artifact) throws Exception;
  }

  /** The first runtime that loaded (null when none did) and why the ones before it failed. */
  public static final class Loaded<B> {
    public final ModelCard.Artifact artifact;
    public final B backend;
    /** One line per artifact that failed: {@code "<file>: <reason>"}. */
    public final List<String> failures;

    Loaded(ModelCard.Artifact artifact, B backend, List<String> failures) {
      this.artifact = artifact;
      this.backend = backend;
      this.failures = Collections.unmodifiableList(failures);
    }
  }

  /** Try {@code candidates} in order; never throws for a file or runtime that fails to load. */
  public static <B> Loaded<B> openFirst(List<ModelCard.Artifact> candidates, Opener<B> opener) {
    List<String> failures = new ArrayList<String>();
    for (ModelCard.Artifact artifact : candidates) {
      try {
        return new Loaded<B>(artifact, opener.open(artifact), failures);
      } catch (Exception e) {
        failures.add(artifact.file + ": " + reason(e));
      } catch (LinkageError e) {
        failures.add(artifact.file + ": the " + artifact.format + " runtime is not available on "
            + "this device (" + reason(e) + ")");
      }
    }
    return new Loaded<B>(null, null, failures);
  }

  private static String reason(Throwable t) {
    Throwable root = t;
    while (root.getCause() != null && root.getCause() != root) {
      root = root.getCause();
    }
    String message = root.getMessage();
    return root.getClass().getSimpleName() + (message == null ? "" : ": " + message);
  }
}
