package org.pflkit.core;

import static org.junit.Assert.assertArrayEquals;
import static org.junit.Assert.assertEquals;
import static org.junit.Assert.assertFalse;
import static org.junit.Assert.assertTrue;
import static org.junit.Assert.fail;

import java.io.ByteArrayInputStream;
import java.io.File;
import java.io.IOException;
import java.io.InputStream;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import org.junit.Rule;
import org.junit.Test;
import org.junit.rules.TemporaryFolder;

public class BundledFilesTest {
  @Rule public final TemporaryFolder tmp = new TemporaryFolder();

  /** A bundle held in memory; {@code failOn} names a file whose copy dies half-way. */
  static final class Bundle implements BundledFiles.Source {
    final Map<String, byte[]> files = new LinkedHashMap<>();
    final String version;
    String failOn;
    int opened;

    Bundle(String version) {
      this.version = version;
      files.put("model_card.json", "{\"card\": 1}".getBytes(StandardCharsets.UTF_8));
      files.put("model.pte", new byte[100_000]);
    }

    @Override
    public List<String> names() {
      return new ArrayList<>(files.keySet());
    }

    @Override
    public InputStream open(String name) {
      opened++;
      byte[] data = files.get(name);
      if (name.equals(failOn)) {
        return new InputStream() {
          int served;

          @Override
          public int read() throws IOException {
            if (served++ > data.length / 2) {
              throw new IOException("killed mid-copy");
            }
            return 0;
          }
        };
      }
      return new ByteArrayInputStream(data);
    }

    @Override
    public String version() {
      return version;
    }
  }

  @Test
  public void installsOnceAndSkipsTheSameBundleLater() throws Exception {
    File target = new File(tmp.getRoot(), "model");
    Bundle bundle = new Bundle("7");
    assertTrue(BundledFiles.install(bundle, target));
    assertArrayEquals(bundle.files.get("model.pte"),
        Files.readAllBytes(new File(target, "model.pte").toPath()));
    long modified = new File(target, "model.pte").lastModified();
    int opened = bundle.opened;
    assertFalse("a rotation or a restart copies nothing", BundledFiles.install(bundle, target));
    assertEquals(opened, bundle.opened);
    assertEquals(modified, new File(target, "model.pte").lastModified());

    Bundle update = new Bundle("8");
    update.files.put("model.pte", new byte[] {1, 2, 3});
    assertTrue("a new app version reinstalls", BundledFiles.install(update, target));
    assertArrayEquals(new byte[] {1, 2, 3},
        Files.readAllBytes(new File(target, "model.pte").toPath()));
  }

  @Test
  public void anInterruptedCopyLeavesNoHalfInstalledFolder() throws Exception {
    File target = new File(tmp.getRoot(), "model");
    Bundle bundle = new Bundle("1");
    bundle.failOn = "model.pte";
    try {
      BundledFiles.install(bundle, target);
      fail();
    } catch (IOException expected) {
      assertEquals("killed mid-copy", expected.getMessage());
    }
    assertFalse("nothing is installed", target.exists());

    BundledFiles.install(new Bundle("1"), target);  // the next start succeeds
    Bundle broken = new Bundle("2");
    broken.failOn = "model.pte";
    try {
      BundledFiles.install(broken, target);
      fail();
    } catch (IOException expected) {
      // the previous installation is still whole
    }
    assertEquals(100_000, new File(target, "model.pte").length());
    assertTrue(new File(target, "model_card.json").isFile());
  }
}
