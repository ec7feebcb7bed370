package org.pflkit.core;

import static org.junit.Assert.assertEquals;
import static org.junit.Assert.assertNull;
import static org.junit.Assert.assertSame;
import static org.junit.Assert.assertTrue;

import java.io.File;
import java.io.IOException;
import java.util.List;
import org.junit.Test;

public class ModelLoaderTest {
  private static List<ModelCard.Artifact> models() {
    for (File dir : Fixtures.cardDirs()) {
      ModelCard card = ModelCard.parse(Fixtures.read(new File(dir, "model_card.json")));
      if (card.models().size() >= 2) {
        return card.models();
      }
    }
    throw new AssertionError("no fixture with a .pte and an .onnx");
  }

  @Test
  public void aNativeLibraryThatFailsToLoadFallsBackToTheNextRuntime() {
    List<ModelCard.Artifact> models = models();
    assertEquals(ModelCard.Artifact.EXECUTORCH, models.get(0).format);
    ModelLoader.Loaded<String> loaded = ModelLoader.openFirst(models, a -> {
      if (a.format.equals(ModelCard.Artifact.EXECUTORCH)) {
        throw new UnsatisfiedLinkError("dlopen failed: libexecutorch.so needs API 26");
      }
      return "onnx session";
    });
    assertEquals("onnx session", loaded.backend);
    assertSame(models.get(1), loaded.artifact);
    assertEquals(1, loaded.failures.size());
    assertTrue(loaded.failures.get(0), loaded.failures.get(0).contains(
        "the executorch runtime is not available on this device (UnsatisfiedLinkError: "
        + "dlopen failed"));
  }

  @Test
  public void whenNothingLoadsEveryReasonIsReported() {
    List<ModelCard.Artifact> models = models();
    ModelLoader.Loaded<String> loaded = ModelLoader.openFirst(models, a -> {
      if (a.format.equals(ModelCard.Artifact.EXECUTORCH)) {
        throw new ExceptionInInitializerError(new IllegalStateException("soloader"));
      }
      throw new IOException(a.file + " does not match its model card");
    });
    assertNull(loaded.backend);
    assertNull(loaded.artifact);
    assertEquals(models.size(), loaded.failures.size());
    assertTrue(loaded.failures.get(0).contains("IllegalStateException: soloader"));
    assertTrue(loaded.failures.get(1).contains("does not match its model card"));
  }

  @Test(expected = OutOfMemoryError.class)
  public void errorsOfTheVirtualMachineStillPropagate() {
    ModelLoader.openFirst(models(), a -> {
      throw new OutOfMemoryError();
    });
  }
}
