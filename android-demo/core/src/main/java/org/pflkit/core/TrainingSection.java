package org.pflkit.core;

import java.util.ArrayList;
import java.util.Collections;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;

/**
 * The model card's optional {@code training} section ({@code pfl-export --trainer}, schema
 * {@value #SCHEMA}): the personal part's ExecuTorch training program and everything a device
 * needs to run its post-federation stage (inputs, personal parameters, optimizers, schedule,
 * row splits, SuPerFed's lambda input and re-choice). Validated like the rest of the card: a
 * violation names the field, e.g. {@code training.optimizers[0].lr}.
 */
public final class TrainingSection {
  public static final String SCHEMA = "pflkit.training/1";
  /** Where an input's data comes from. */
  public static final String FROM_IMAGE = "image";
  public static final String FROM_PREPARE = "prepare";
  public static final String FROM_LABEL = "label";
  public static final String FROM_LAMBDA = "lambda";
  /** The row set no split took. */
  public static final String TRAIN_ROWS = "train";

  public final String program;
  public final String initialWeights;
  public final String trainMethod;
  /** The frozen per-row method ({@code prepare}), or null when the program reads images. */
  public final String prepareMethod;
  public final List<Input> inputs;
  /** The personal parameters, in card order. */
  public final List<Parameter> parameters;
  public final int maxBatch;
  /**
   * The classes the program's {@code logits} output scores ({@code outputs[1].shape[1]}): the
   * labels it can learn are 0..classes-1 (its cross-entropy reads no other).
   */
  public final int classes;
  /** The objective, in words. */
  public final String loss;
  public final List<Optimizer> optimizers;
  public final int epochs;
  public final int batchSize;
  public final List<Phase> phases;
  public final List<Split> splits;
  /** SuPerFed's {@code lam} input, or null. */
  public final LambdaInput lambda;
  /** The split on whose rows lambda is re-chosen after training, or null. */
  public final String chooseLambdaOn;
  /** The lambdas the re-choice compares (the card's {@code lambda_grid}; 0, 0.1, ..., 1). */
  public final float[] lambdaGrid;

  TrainingSection(Object node) {
    String p = "training";
    Map<String, Object> map = Fields.object(node, p);
    String version = Fields.string(Fields.required(map, "schema_version", p),
        p + ".schema_version");
    if (!SCHEMA.equals(version)) {
      throw Fields.fail(p + ".schema_version", "unsupported version \"" + version
          + "\" (this app reads " + SCHEMA + ")");
    }
    program = fileName(map, "program");
    initialWeights = fileName(map, "initial_weights");
    trainMethod = Fields.string(Fields.required(map, "train_method", p), p + ".train_method");
    Object prep = Fields.optional(map, "prepare_method");
    prepareMethod = prep == null ? null : Fields.string(prep, p + ".prepare_method");
    inputs = readList(map, "inputs", new Reader<Input>() {
      @Override
      public Input read(Object n, String path) {
        return new Input(n, path);
      }
    });
    parameters = readList(map, "parameters", new Reader<Parameter>() {
      @Override
      public Parameter read(Object n, String path) {
        return new Parameter(n, path);
      }
    });
    maxBatch = positive(map, "max_batch", p);
    classes = readClasses(Fields.required(map, "outputs", p));
    loss = Fields.string(Fields.required(map, "loss", p), p + ".loss");
    optimizers = readList(map, "optimizers", new Reader<Optimizer>() {
      @Override
      public Optimizer read(Object n, String path) {
        return new Optimizer(n, path);
      }
    });
    Map<String, Object> schedule = Fields.object(Fields.required(map, "schedule", p),
        p + ".schedule");
    epochs = positive(schedule, "epochs", p + ".schedule");
    batchSize = positive(schedule, "batch_size", p + ".schedule");
    if (batchSize > maxBatch) {  // the train method takes batches of 1..max_batch rows only
      throw Fields.fail(p + ".schedule.batch_size", "must be at most max_batch (" + maxBatch
          + "), found " + batchSize);
    }
    phases = readList(schedule, "phases", "training.schedule", new Reader<Phase>() {
      @Override
      public Phase read(Object n, String path) {
        return new Phase(n, path);
      }
    });
    Object sp = Fields.optional(map, "splits");
    splits = sp == null ? Collections.<Split>emptyList() : readList(map, "splits",
        new Reader<Split>() {
          @Override
          public Split read(Object n, String path) {
            return new Split(n, path);
          }
        });
    Object lam = Fields.optional(map, "lambda");
    lambda = lam == null ? null : new LambdaInput(lam, p + ".lambda");
    Object choose = Fields.optional(map, "choose_lambda_on");
    chooseLambdaOn = choose == null ? null : Fields.string(choose, p + ".choose_lambda_on");
    Object grid = Fields.optional(map, "lambda_grid");
    lambdaGrid = grid == null ? defaultGrid() : readGrid(grid, p + ".lambda_grid");
    checkConsistency();
  }

  /** Parse a {@code training} section on its own (the card parses it with the rest). */
  public static TrainingSection parse(String json) {
    Object root;
    try {
      root = Json.parse(json);
    } catch (Json.SyntaxException e) {
      throw Fields.fail("training", "not valid JSON: " + e.getMessage());
    }
    return new TrainingSection(root);
  }

  /** The optimizer with this name. */
  public Optimizer optimizer(String name) {
    for (Optimizer o : optimizers) {
      if (o.name.equals(name)) {
        return o;
      }
    }
    throw new IllegalArgumentException("no optimizer " + name);
  }

  /** The parameter names, in card order. */
  public List<String> parameterNames() {
    List<String> names = new ArrayList<String>();
    for (Parameter param : parameters) {
      names.add(param.name);
    }
    return names;
  }

  private void checkConsistency() {
    Set<String> params = new HashSet<String>(parameterNames());
    if (params.size() != parameters.size()) {
      throw Fields.fail("training.parameters", "duplicate parameter names");
    }
    Set<String> optimizerNames = new HashSet<String>();
    for (int i = 0; i < optimizers.size(); i++) {
      Optimizer o = optimizers.get(i);
      optimizerNames.add(o.name);
      for (String name : o.parameters) {
        if (!params.contains(name)) {
          throw Fields.fail("training.optimizers[" + i + "].parameters", "\"" + name
              + "\" is not one of training.parameters");
        }
      }
    }
    Set<String> rowSets = new HashSet<String>();
    rowSets.add(TRAIN_ROWS);
    for (Split s : splits) {
      rowSets.add(s.name);
    }
    for (int i = 0; i < phases.size(); i++) {
      if (!optimizerNames.contains(phases.get(i).optimizer)) {
        throw Fields.fail("training.schedule.phases[" + i + "].optimizer", "no optimizer named \""
            + phases.get(i).optimizer + "\"");
      }
      if (!rowSets.contains(phases.get(i).rows)) {
        throw Fields.fail("training.schedule.phases[" + i + "].rows", "no row set named \""
            + phases.get(i).rows + "\"");
      }
    }
    if (chooseLambdaOn != null && (lambda == null || !rowSets.contains(chooseLambdaOn))) {
      throw Fields.fail("training.choose_lambda_on", "needs a lambda input and a split named \""
          + chooseLambdaOn + "\"");
    }
    int labels = 0;
    int lambdas = 0;
    for (Input in : inputs) {
      labels += in.from.equals(FROM_LABEL) ? 1 : 0;
      lambdas += in.from.equals(FROM_LAMBDA) ? 1 : 0;
      if (in.from.equals(FROM_PREPARE) && prepareMethod == null) {
        throw Fields.fail("training.inputs", "input \"" + in.name + "\" comes from prepare, "
            + "but there is no prepare_method");
      }
    }
    if (labels != 1 || lambdas != (lambda == null ? 0 : 1)) {
      throw Fields.fail("training.inputs", "expected one label input and a lambda input exactly "
          + "when training.lambda is set");
    }
    for (Input in : inputs) {
      if (in.from.equals(FROM_LAMBDA) && !(in.shape.length == 1 && in.shape[0] == lambda.size)) {
        throw Fields.fail("training.inputs", "the lambda input's shape must be [" + lambda.size
            + "] (training.lambda.size)");
      }
    }
  }

  /** The program's outputs are (loss, logits): the logits' class count (pflkit's rule). */
  private static int readClasses(Object node) {
    List<Object> outputs = Fields.array(node, "training.outputs");
    if (outputs.size() != 2) {
      throw Fields.fail("training.outputs", "expected the loss and the logits, found "
          + outputs.size() + " outputs");
    }
    Object shape = Fields.object(outputs.get(1), "training.outputs[1]").get("shape");
    if (!(shape instanceof List) || ((List<?>) shape).size() != 2
        || !"batch".equals(((List<?>) shape).get(0))) {
      throw Fields.fail("training.outputs[1].shape", "expected [\"batch\", classes], found "
          + shape);
    }
    long classes = Fields.integer(((List<?>) shape).get(1), "training.outputs[1].shape[1]");
    if (classes < 1 || classes > Integer.MAX_VALUE) {
      throw Fields.fail("training.outputs[1].shape[1]", "must be a positive integer");
    }
    return (int) classes;
  }

  private static float[] defaultGrid() {
    float[] grid = new float[11];
    for (int i = 0; i < grid.length; i++) {
      grid[i] = i / 10f;
    }
    return grid;
  }

  private static float[] readGrid(Object node, String path) {
    double[] values = Fields.numbers(node, path);
    if (values.length == 0) {
      throw Fields.fail(path, "expected at least one lambda");
    }
    float[] grid = new float[values.length];
    for (int i = 0; i < grid.length; i++) {
      if (!(values[i] >= 0 && values[i] <= 1)) {
        throw Fields.fail(path + "[" + i + "]", "must be in [0, 1], found " + values[i]);
      }
      grid[i] = (float) values[i];
    }
    return grid;
  }

  private interface Reader<T> {
    T read(Object node, String path);
  }

  private static <T> List<T> readList(Map<String, Object> map, String key, Reader<T> reader) {
    return readList(map, key, "training", reader);
  }

  private static <T> List<T> readList(Map<String, Object> map, String key, String parent,
      Reader<T> reader) {
    String path = parent + "." + key;
    List<Object> list = Fields.array(Fields.required(map, key, parent), path);
    List<T> out = new ArrayList<T>();
    for (int i = 0; i < list.size(); i++) {
      out.add(reader.read(list.get(i), path + "[" + i + "]"));
    }
    return Collections.unmodifiableList(out);
  }

  private static String fileName(Map<String, Object> map, String key) {
    String file = Fields.string(Fields.required(map, key, "training"), "training." + key);
    if (file.contains("/") || file.contains("\\") || file.startsWith(".")) {
      throw Fields.fail("training." + key, "must be a plain file name beside the card, found \""
          + file + "\"");
    }
    return file;
  }

  private static int positive(Map<String, Object> map, String key, String parent) {
    long v = Fields.integer(Fields.required(map, key, parent), parent + "." + key);
    if (v < 1 || v > Integer.MAX_VALUE) {
      throw Fields.fail(parent + "." + key, "must be a positive integer, found " + v);
    }
    return (int) v;
  }

  private static long[] dims(Object node, String path, boolean batched) {
    List<Object> list = Fields.array(node, path);
    int start = 0;
    if (batched) {
      if (list.isEmpty() || !"batch".equals(list.get(0))) {
        throw Fields.fail(path, "expected [\"batch\", ...], found " + list);
      }
      start = 1;
    }
    long[] out = new long[list.size() - start];
    for (int i = start; i < list.size(); i++) {
      out[i - start] = Fields.integer(list.get(i), path + "[" + i + "]");
      if (out[i - start] < 0) {
        throw Fields.fail(path + "[" + i + "]", "must be >= 0");
      }
    }
    return out;
  }

  /** One program input: per-row shape (after the batch dimension) and where it comes from. */
  public static final class Input {
    public final String name;
    /** Dimensions after "batch" (batched inputs) or the whole shape (lambda). */
    public final long[] shape;
    public final boolean batched;
    public final String dtype;
    public final String from;

    Input(Object node, String path) {
      Map<String, Object> map = Fields.object(node, path);
      name = Fields.string(Fields.required(map, "name", path), path + ".name");
      from = Fields.oneOf(Fields.required(map, "from", path), path + ".from", FROM_IMAGE,
          FROM_PREPARE, FROM_LABEL, FROM_LAMBDA);
      batched = !from.equals(FROM_LAMBDA);
      shape = dims(Fields.required(map, "shape", path), path + ".shape", batched);
      dtype = Fields.oneOf(Fields.required(map, "dtype", path), path + ".dtype",
          from.equals(FROM_LABEL) ? "int64" : "float32");
    }
  }

  /** One personal parameter. */
  public static final class Parameter {
    public final String name;
    public final long[] shape;

    Parameter(Object node, String path) {
      Map<String, Object> map = Fields.object(node, path);
      name = Fields.string(Fields.required(map, "name", path), path + ".name");
      shape = dims(Fields.required(map, "shape", path), path + ".shape", false);
      Fields.oneOf(Fields.required(map, "dtype", path), path + ".dtype", "float32");
    }
  }

  /** SGD over a group of parameters (ExecuTorch's training runtime offers SGD only). */
  public static final class Optimizer {
    public final String name;
    public final List<String> parameters;
    public final double lr;
    public final double momentum;
    public final double weightDecay;
    public final double dampening;
    public final boolean nesterov;

    Optimizer(Object node, String path) {
      Map<String, Object> map = Fields.object(node, path);
      name = Fields.string(Fields.required(map, "name", path), path + ".name");
      List<Object> names = Fields.array(Fields.required(map, "parameters", path),
          path + ".parameters");
      List<String> list = new ArrayList<String>();
      for (int i = 0; i < names.size(); i++) {
        list.add(Fields.string(names.get(i), path + ".parameters[" + i + "]"));
      }
      parameters = Collections.unmodifiableList(list);
      lr = nonNegative(map, "lr", path);
      momentum = nonNegative(map, "momentum", path);
      weightDecay = nonNegative(map, "weight_decay", path);
      dampening = nonNegative(map, "dampening", path);
      nesterov = Fields.bool(Fields.required(map, "nesterov", path), path + ".nesterov");
      Object kind = Fields.optional(map, "kind");
      if (kind != null) {
        Fields.oneOf(kind, path + ".kind", "sgd");
      }
    }

    private static double nonNegative(Map<String, Object> map, String key, String path) {
      double v = Fields.number(Fields.required(map, key, path), path + "." + key);
      if (!(v >= 0) || Double.isInfinite(v)) {
        throw Fields.fail(path + "." + key, "must be a finite number >= 0, found " + v);
      }
      return v;
    }
  }

  /** One pass over a row set per epoch, stepping one optimizer. */
  public static final class Phase {
    public final String optimizer;
    public final String rows;

    Phase(Object node, String path) {
      Map<String, Object> map = Fields.object(node, path);
      optimizer = Fields.string(Fields.required(map, "optimizer", path), path + ".optimizer");
      rows = Fields.string(Fields.required(map, "rows", path), path + ".rows");
    }
  }

  /** Rows set aside: a random floor(fraction * n) of the labelled rows. */
  public static final class Split {
    public final String name;
    public final double fraction;
    /** {@code all}: an empty split uses every row; {@code skip}: its phases do nothing. */
    public final String ifEmpty;

    Split(Object node, String path) {
      Map<String, Object> map = Fields.object(node, path);
      name = Fields.string(Fields.required(map, "name", path), path + ".name");
      if (name.equals(TRAIN_ROWS)) {
        throw Fields.fail(path + ".name", "\"" + TRAIN_ROWS + "\" names the rows no split took");
      }
      fraction = Fields.number(Fields.required(map, "fraction", path), path + ".fraction");
      if (!(fraction >= 0 && fraction < 1)) {
        throw Fields.fail(path + ".fraction", "must be in [0, 1), found " + fraction);
      }
      ifEmpty = Fields.oneOf(Fields.required(map, "if_empty", path), path + ".if_empty", "all",
          "skip");
    }
  }

  /**
   * SuPerFed's {@code lam} input: one mixing weight per trainable tensor. {@code fixed} set:
   * every entry is that value; else U(0, 1) draws per batch, one shared ({@code layerOf} null)
   * or one per layer.
   */
  public static final class LambdaInput {
    public final int size;
    public final Double fixed;
    /** Entry i takes the draw of layer {@code layerOf[i]}; null: one draw for all. */
    public final int[] layerOf;

    LambdaInput(Object node, String path) {
      Map<String, Object> map = Fields.object(node, path);
      long s = Fields.integer(Fields.required(map, "size", path), path + ".size");
      if (s < 1 || s > 1_000_000) {
        throw Fields.fail(path + ".size", "must be a positive integer, found " + s);
      }
      size = (int) s;
      Object f = Fields.optional(map, "fixed");
      fixed = f == null ? null : Fields.number(f, path + ".fixed");
      if (fixed != null && !(fixed >= 0 && fixed <= 1)) {
        throw Fields.fail(path + ".fixed", "must be in [0, 1], found " + fixed);
      }
      Object layers = Fields.optional(map, "layer_of");
      if (layers == null) {
        layerOf = null;
      } else {
        double[] d = Fields.numbers(layers, path + ".layer_of");
        if (d.length != size) {
          throw Fields.fail(path + ".layer_of", "expected " + size + " entries, found "
              + d.length);
        }
        layerOf = new int[size];
        for (int i = 0; i < size; i++) {
          if (d[i] < 0 || d[i] != Math.rint(d[i]) || d[i] >= size) {
            throw Fields.fail(path + ".layer_of[" + i + "]", "expected a layer index in 0.."
                + (size - 1));
          }
          layerOf[i] = (int) d[i];
        }
      }
    }
  }
}
