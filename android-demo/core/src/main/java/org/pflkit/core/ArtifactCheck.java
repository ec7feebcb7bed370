package org.pflkit.core;

import java.io.IOException;
import java.io.InputStream;

/**
 * Checks a model file against the size and sha256 its card lists, so the app never runs
 * weights that are not the ones the card (classes, preprocessing, lambda) describes.
 */
public final class ArtifactCheck {
  private ArtifactCheck() {}

  /** Read the stream to the end; throws with both digests when the file does not match. */
  public static void verify(InputStream in, ModelCard.Artifact artifact) throws IOException {
    Sha256 actual = Sha256.of(in);
    if (actual.bytes != artifact.bytes || !actual.hex.equals(artifact.sha256)) {
      throw new IOException(artifact.file + " does not match its model card: " + actual.bytes
          + " bytes, sha256 " + actual.hex + "; the card lists " + artifact.bytes
          + " bytes, sha256 " + artifact.sha256
          + ". Copy the card and the artifacts of the same export together.");
    }
  }
}
