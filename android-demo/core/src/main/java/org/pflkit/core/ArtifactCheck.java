package org.pflkit.core;

import java.io.IOException;
import java.io.InputStream;
import java.security.MessageDigest;
import java.security.NoSuchAlgorithmException;

/**
 * Checks a model file against the size and sha256 its card lists, so the app never runs
 * weights that are not the ones the card (classes, preprocessing, lambda) describes.
 */
public final class ArtifactCheck {
  private ArtifactCheck() {}

  /** Read the stream to the end; throws with both digests when the file does not match. */
  public static void verify(InputStream in, ModelCard.Artifact artifact) throws IOException {
    MessageDigest sha;
    try {
      sha = MessageDigest.getInstance("SHA-256");
    } catch (NoSuchAlgorithmException e) {
      throw new IllegalStateException("this Java runtime has no SHA-256", e);
    }
    byte[] buffer = new byte[1 << 16];
    long size = 0;
    for (int n = in.read(buffer); n >= 0; n = in.read(buffer)) {
      sha.update(buffer, 0, n);
      size += n;
    }
    StringBuilder hex = new StringBuilder();
    for (byte b : sha.digest()) {
      hex.append(String.format("%02x", b & 0xFF));
    }
    if (size != artifact.bytes || !hex.toString().equals(artifact.sha256)) {
      throw new IOException(artifact.file + " does not match its model card: " + size
          + " bytes, sha256 " + hex + "; the card lists " + artifact.bytes + " bytes, sha256 "
          + artifact.sha256 + ". Copy the card and the artifacts of the same export together.");
    }
  }
}
