package org.pflkit.core;

import java.io.IOException;
import java.io.InputStream;
import java.nio.charset.Charset;
import java.util.ArrayList;
import java.util.Collections;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;

/**
 * A parsed and validated {@code model_card.json} (schema {@code pflkit.model-card/2}, pinned in
 * docs/model-card.md). Unknown extra keys are ignored (forward compatibility); every required
 * key is checked for presence, type and consistency with the rest of the card, and a violation
 * is an {@link InvalidModelCardException} naming the field.
 */
public final class ModelCard {
  public static final String SCHEMA_VERSION = "pflkit.model-card/2";
  /** Name of the extra output a FedRoD personalized export adds (the generic head alone). */
  public static final String GENERIC_OUTPUT = "generic_logits";

  public final String created;
  public final String algorithm;
  public final String model;
  public final TensorSpec image;
  /**
   * The runtime input (the second input: a method's choice exported as {@code "runtime"},
   * named like that choice, e.g. SuPerFed's {@code lam}), or null when the model has none.
   */
  public final TensorSpec lambda;
  public final List<TensorSpec> outputs;
  public final Preprocessing preprocessing;
  public final List<String> classes;
  /** The mixture, or null for plain models. */
  public final Mixture mixture;
  public final List<Artifact> artifacts;
  /**
   * The value a runtime-input export was verified with ({@code parity[].runtime_value}: the
   * input's default, e.g. the client's chosen lambda), or NaN when the card records none.
   */
  public final float verifiedLambda;
  /** The personal part's training program ({@code pfl-export --trainer}), or null. */
  public final TrainingSection training;

  private ModelCard(Map<String, Object> root) {
    String version = Fields.string(Fields.required(root, "schema_version", ""), "schema_version");
    if (!SCHEMA_VERSION.equals(version)) {
      throw Fields.fail("schema_version", "unsupported version \"" + version
          + "\" (this app reads " + SCHEMA_VERSION + ")");
    }
    created = Fields.string(Fields.required(root, "created", ""), "created");
    algorithm = Fields.string(Fields.required(root, "algorithm", ""), "algorithm");
    model = Fields.string(Fields.required(root, "model", ""), "model");
    preprocessing = Preprocessing.fromJson(Fields.required(root, "preprocessing", ""),
        "preprocessing");
    classes = readClasses(Fields.required(root, "classes", ""));
    Object mix = Fields.optional(root, "mixture");
    mixture = mix == null ? null : new Mixture(mix);

    List<Object> ins = Fields.array(Fields.required(root, "inputs", ""), "inputs");
    if (ins.isEmpty() || ins.size() > 2) {
      throw Fields.fail("inputs", "expected the image input and optionally one runtime input, "
          + "found " + ins.size() + " inputs");
    }
    image = new TensorSpec(ins.get(0), "inputs[0]");
    checkImage();
    lambda = ins.size() == 2 ? new TensorSpec(ins.get(1), "inputs[1]") : null;
    checkLambda();

    List<Object> outs = Fields.array(Fields.required(root, "outputs", ""), "outputs");
    if (outs.isEmpty()) {
      throw Fields.fail("outputs", "expected at least one output");
    }
    List<TensorSpec> parsed = new ArrayList<TensorSpec>();
    Set<String> names = new HashSet<String>();
    for (int i = 0; i < outs.size(); i++) {
      TensorSpec out = new TensorSpec(outs.get(i), "outputs[" + i + "]");
      checkLogits(out, "outputs[" + i + "]");
      if (!names.add(out.name)) {
        throw Fields.fail("outputs[" + i + "].name", "duplicate output name \"" + out.name + "\"");
      }
      parsed.add(out);
    }
    outputs = Collections.unmodifiableList(parsed);

    Fields.object(Fields.required(root, "source", ""), "source");
    artifacts = readArtifacts(Fields.required(root, "artifacts", ""));
    verifiedLambda = readParity(Fields.required(root, "parity", ""));
    Object train = Fields.optional(root, "training");
    training = train == null ? null : new TrainingSection(train);
  }

  /** The most bytes a card may hold (pfl-export's limit; a written one is a few KiB). */
  public static final int MAX_BYTES = 1 << 20;

  /**
   * Read, parse and validate the card in {@code in} (closed): one over {@link #MAX_BYTES} is
   * refused without being read whole, as pfl-export refuses it (a card pushed to the device
   * may be anything).
   */
  public static ModelCard read(InputStream in, String source) throws IOException {
    byte[] bytes = Streams.readAtMost(in, MAX_BYTES);
    if (bytes == null) {
      throw new IOException(source + ": more than " + MAX_BYTES + " bytes, too large for a "
          + "model card (at most 1 MiB): not read");
    }
    return parse(new String(bytes, Charset.forName("UTF-8")));
  }

  /** Parse and validate card text. */
  public static ModelCard parse(String json) {
    Object root;
    try {
      root = Json.parse(json);
    } catch (Json.SyntaxException e) {
      throw Fields.fail("", "not valid JSON: " + e.getMessage());
    }
    return new ModelCard(Fields.object(root, "(top level)"));
  }

  /** True when the model takes a runtime input (a choice exported as {@code "runtime"}). */
  public boolean hasRuntimeLambda() {
    return lambda != null;
  }

  /** The output with this name, or null. */
  public TensorSpec output(String name) {
    for (TensorSpec out : outputs) {
      if (out.name.equals(name)) {
        return out;
      }
    }
    return null;
  }

  /** The model files an app can run (ExecuTorch, then ONNX; fp32 before int8 as written). */
  public List<Artifact> models() {
    List<Artifact> out = new ArrayList<Artifact>();
    for (String format : new String[] {Artifact.EXECUTORCH, Artifact.ONNX}) {
      for (Artifact a : artifacts) {
        if (a.format.equals(format)) {
          out.add(a);
        }
      }
    }
    return out;
  }

  private static List<String> readClasses(Object node) {
    List<Object> list = Fields.array(node, "classes");
    if (list.size() < 2) {
      throw Fields.fail("classes", "expected at least 2 class names, found " + list.size());
    }
    List<String> out = new ArrayList<String>();
    for (int i = 0; i < list.size(); i++) {
      out.add(Fields.string(list.get(i), "classes[" + i + "]"));
    }
    return Collections.unmodifiableList(out);
  }

  private void checkImage() {
    Fields.oneOf(image.layout, "inputs[0].layout", "NCHW");
    long[] want = {preprocessing.channels, preprocessing.height, preprocessing.width};
    boolean ok = image.shape.size() == 4;
    for (int i = 0; ok && i < want.length; i++) {
      ok = Long.valueOf(want[i]).equals(image.shape.get(i + 1));
    }
    if (!ok) {
      throw Fields.fail("inputs[0].shape", "expected [\"batch\", " + want[0] + ", " + want[1]
          + ", " + want[2] + "] to match preprocessing, found " + image.shape);
    }
  }

  /** The runtime input and the choices exported as "runtime" name each other, by name. */
  private void checkLambda() {
    Set<String> runtime = mixture == null ? Collections.<String>emptySet()
        : mixture.runtimeChoices();
    if (lambda == null) {
      if (!runtime.isEmpty()) {
        String name = runtime.iterator().next();
        throw Fields.fail("inputs", "mixture.choice." + name + " is \"runtime\" but there is "
            + "no \"" + name + "\" input");
      }
      return;
    }
    if (!runtime.contains(lambda.name)) {
      throw Fields.fail("inputs[1]", "a \"" + lambda.name + "\" input needs mixture.choice."
          + lambda.name + " = \"runtime\"");
    }
    if (lambda.shape.size() != 1 || !Long.valueOf(1).equals(lambda.shape.get(0))) {
      throw Fields.fail("inputs[1].shape", "expected [1], found " + lambda.shape);
    }
    if (lambda.range == null) {
      throw Fields.fail("inputs[1].range", "required field is missing");
    }
  }

  /** The runtime input's interval (its {@code range}: the graph clamps into it). */
  public float[] lambdaRange() {
    if (lambda == null) {
      throw new IllegalStateException("this model has no runtime input");
    }
    return lambda.range.clone();
  }

  private void checkLogits(TensorSpec out, String path) {
    if (out.shape.size() != 2 || !Long.valueOf(classes.size()).equals(out.shape.get(1))) {
      throw Fields.fail(path + ".shape", "expected [\"batch\", " + classes.size()
          + "] (one logit per class), found " + out.shape);
    }
    Fields.oneOf(out.meaning, path + ".meaning", "logits");
  }

  private static List<Artifact> readArtifacts(Object node) {
    List<Object> list = Fields.array(node, "artifacts");
    List<Artifact> out = new ArrayList<Artifact>();
    for (int i = 0; i < list.size(); i++) {
      out.add(new Artifact(list.get(i), "artifacts[" + i + "]"));
    }
    return Collections.unmodifiableList(out);
  }

  /** Validates the entries; returns the first verified runtime value, or NaN. */
  private static float readParity(Object node) {
    List<Object> list = Fields.array(node, "parity");
    float lam = Float.NaN;
    for (int i = 0; i < list.size(); i++) {
      String path = "parity[" + i + "]";
      Map<String, Object> entry = Fields.object(list.get(i), path);
      Fields.string(Fields.required(entry, "file", path), path + ".file");
      Object value = Fields.optional(entry, "runtime_value");
      if (value != null && Float.isNaN(lam)) {
        lam = (float) Fields.number(value, path + ".runtime_value");
      }
    }
    return lam;
  }

  /** One entry of {@code inputs} or {@code outputs}. */
  public static final class TensorSpec {
    public final String name;
    /** Each entry is the string "batch" (the dynamic dimension) or a Long. */
    public final List<Object> shape;
    public final String dtype;
    /** {@code layout} (inputs) or null. */
    public final String layout;
    /** {@code meaning} (outputs) or null. */
    public final String meaning;
    /** {@code range} as [min, max] or null when absent. */
    public final float[] range;

    TensorSpec(Object node, String path) {
      Map<String, Object> map = Fields.object(node, path);
      name = Fields.string(Fields.required(map, "name", path), path + ".name");
      List<Object> dims = Fields.array(Fields.required(map, "shape", path), path + ".shape");
      List<Object> parsed = new ArrayList<Object>();
      for (int i = 0; i < dims.size(); i++) {
        Object d = dims.get(i);
        String p = path + ".shape[" + i + "]";
        if ("batch".equals(d) && i == 0) {
          parsed.add(d);
        } else {
          long v = Fields.integer(d, p);
          if (v < 1) {
            throw Fields.fail(p, "dimensions must be >= 1 (or \"batch\" first), found " + v);
          }
          parsed.add(v);
        }
      }
      shape = Collections.unmodifiableList(parsed);
      dtype = Fields.oneOf(Fields.required(map, "dtype", path), path + ".dtype", "float32");
      Object l = Fields.optional(map, "layout");
      layout = l == null ? null : Fields.string(l, path + ".layout");
      Object m = Fields.optional(map, "meaning");
      meaning = m == null ? null : Fields.string(m, path + ".meaning");
      Object r = Fields.optional(map, "range");
      range = r == null ? null : readRange(r, path + ".range");
    }

    private static float[] readRange(Object node, String path) {
      double[] r = Fields.numbers(node, path);
      if (r.length != 2 || r[0] > r[1]) {
        throw Fields.fail(path, "expected [min, max] with min <= max");
      }
      return new float[] {(float) r[0], (float) r[1]};
    }
  }

  /**
   * The optional {@code mixture} block: how the model is personalized, described the same way
   * for every method (docs/model-card.md), so no list of methods is needed to read it.
   */
  public static final class Mixture {
    /** The method family, free text (e.g. "superfed", or a user's own method). */
    public final String kind;
    /** One line saying what the model computes, for people. */
    public final String summary;
    /** {@code choice.head}: {@code personalized} (the default) or {@code generic}. */
    public final String head;
    /**
     * The resolved choice's entries besides {@code head}, keyed by the method's choice names
     * (numbers, words such as {@code "runtime"}, or lists), as the card writes them.
     */
    public final Map<String, Object> choice;

    Mixture(Object node) {
      String path = "mixture";
      Map<String, Object> map = Fields.object(node, path);
      kind = Fields.string(Fields.required(map, "kind", path), path + ".kind");
      summary = Fields.string(Fields.required(map, "summary", path), path + ".summary");
      Object details = Fields.optional(map, "details");
      if (details != null) {
        Fields.object(details, path + ".details");
      }
      Object chosen = Fields.optional(map, "choice");
      Map<String, Object> entries = new java.util.LinkedHashMap<String, Object>(
          chosen == null ? Collections.<String, Object>emptyMap()
              : Fields.object(chosen, path + ".choice"));
      Object h = entries.remove("head");
      head = h == null ? "personalized"
          : Fields.oneOf(h, path + ".choice.head", "generic", "personalized");
      choice = Collections.unmodifiableMap(entries);
    }

    /** The names of the choices exported as {@code "runtime"} (each is an input's name). */
    public Set<String> runtimeChoices() {
      Set<String> out = new HashSet<String>();
      for (Map.Entry<String, Object> e : choice.entrySet()) {
        if ("runtime".equals(e.getValue())) {
          out.add(e.getKey());
        }
      }
      return out;
    }

    /** The choice {@code name} as a number, or NaN when absent or not a number. */
    public double number(String name) {
      Object v = choice.get(name);
      return v instanceof Number ? ((Number) v).doubleValue() : Double.NaN;
    }
  }

  /**
   * One entry of {@code artifacts}: a file written beside the card. pfl-export writes the
   * formats {@value #EXECUTORCH} and {@value #ONNX} (models) and {@code golden} (golden.json,
   * precision null); other formats are kept so newer exports still load.
   */
  public static final class Artifact {
    public static final String EXECUTORCH = "executorch";
    public static final String ONNX = "onnx";

    public final String file;
    public final String format;
    /** {@code fp32} or {@code int8} for models; null for other files. */
    public final String precision;
    public final String sha256;
    public final long bytes;

    Artifact(Object node, String path) {
      Map<String, Object> map = Fields.object(node, path);
      file = Fields.string(Fields.required(map, "file", path), path + ".file");
      if (file.contains("/") || file.contains("\\") || file.startsWith(".")) {
        throw Fields.fail(path + ".file", "must be a plain file name beside the card, found \""
            + file + "\"");
      }
      format = Fields.string(Fields.required(map, "format", path), path + ".format");
      Object p = Fields.optional(map, "precision");
      precision = p == null ? null : Fields.string(p, path + ".precision");
      sha256 = Fields.string(Fields.required(map, "sha256", path), path + ".sha256");
      if (!sha256.matches("[0-9a-f]{64}")) {
        throw Fields.fail(path + ".sha256", "expected 64 lowercase hex digits, found \""
            + sha256 + "\"");
      }
      bytes = Fields.integer(Fields.required(map, "bytes", path), path + ".bytes");
      if (bytes < 0) {
        throw Fields.fail(path + ".bytes", "must be >= 0, found " + bytes);
      }
    }
  }
}
