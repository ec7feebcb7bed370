package org.pflkit.core;

import static org.junit.Assert.assertTrue;
import static org.junit.Assert.fail;

import java.io.ByteArrayInputStream;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import org.junit.Test;

public class ArtifactCheckTest {
  // sha256("abc"), the FIPS 180-2 test vector
  private static final String ABC =
      "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad";

  private static ModelCard.Artifact artifact(String sha, long bytes) {
    String json = "{\"file\": \"model.pte\", \"format\": \"executorch\", "
        + "\"precision\": \"fp32\", \"sha256\": \"" + sha + "\", \"bytes\": " + bytes + "}";
    return new ModelCard.Artifact(Json.parse(json), "artifacts[0]");
  }

  private static ByteArrayInputStream abc() {
    return new ByteArrayInputStream("abc".getBytes(StandardCharsets.US_ASCII));
  }

  @Test
  public void acceptsTheListedFile() throws IOException {
    ArtifactCheck.verify(abc(), artifact(ABC, 3));
  }

  @Test
  public void rejectsAnotherFileNamingBothDigests() {
    String other = ABC.replace('a', 'b');
    for (ModelCard.Artifact a : new ModelCard.Artifact[] {artifact(other, 3), artifact(ABC, 4)}) {
      try {
        ArtifactCheck.verify(abc(), a);
        fail("accepted a mismatching file");
      } catch (IOException e) {
        assertTrue(e.getMessage(),
            e.getMessage().contains("model.pte does not match its model card"));
        assertTrue(e.getMessage(), e.getMessage().contains(ABC));
      }
    }
  }
}
