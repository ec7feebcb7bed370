package org.pflkit.core.personal;

import java.util.LinkedHashMap;
import java.util.Map;
import java.util.Random;
import java.util.TreeSet;
import org.pflkit.core.Safetensors;
import org.pflkit.core.TensorData;
import org.pflkit.core.TrainingSection;
import org.pflkit.core.fl.ClientState;
import org.pflkit.core.fl.RoundTrainer;
import org.pflkit.core.fl.Task;

/**
 * A federated round trained by a training program on the device's labelled samples: the
 * round's global tensors are written into the program's parameters, the card's recipe trains
 * them, and the trained parameters are the update.
 *
 * <p>This works only when the program's parameters are exactly the run's update (same names
 * and shapes). A personal-part program (FedRoD's head, SuPerFed's local model, PFL-MoE's gate)
 * trains what never leaves the device, so it cannot produce another method's update: the
 * trainer refuses with both name lists instead of uploading something the server would reject.
 */
public final class ProgramRoundTrainer implements RoundTrainer {
  private final TrainingSection recipe;
  private final TrainingSession session;
  private final long[] imageShape;
  private final float[] images;
  private final long[] labels;
  private final long seed;

  public ProgramRoundTrainer(TrainingSection recipe, TrainingSession session, long[] imageShape,
      float[] images, long[] labels, long seed) {
    this.recipe = recipe;
    this.session = session;
    this.imageShape = imageShape.clone();
    this.images = images;
    this.labels = labels;
    this.seed = seed;
  }

  @Override
  public Result train(Task task, Safetensors global, ClientState state) throws Exception {
    TreeSet<String> programs = new TreeSet<String>(recipe.parameterNames());
    TreeSet<String> update = new TreeSet<String>(global.tensors.keySet());
    if (!programs.equals(update)) {
      throw new IllegalStateException("this training program trains " + programs + "; the "
          + "run's update is " + update + ": a personal part never leaves the device, so it "
          + "cannot be this run's update");
    }
    RecipeRunner runner = new RecipeRunner(recipe, session, imageShape);
    RecipeRunner.Data data = runner.prepare(images, labels);  // rows it refuses change nothing
    session.loadWeights(PersonalWeights.fromTensors(recipe, global.tensors, "global state"));
    Random rng = new Random(seed ^ (task.round == null ? 0 : task.round));
    RecipeRunner.Result result = runner.train(data, runner.splitRows(data.rows, rng), rng);
    Map<String, TensorData> out = new LinkedHashMap<String, TensorData>();
    Map<String, float[]> weights = session.weights();
    for (TrainingSection.Parameter p : recipe.parameters) {
      out.put(p.name, TensorData.ofFloats(p.shape, weights.get(p.name)));
    }
    Map<String, Double> metrics = new LinkedHashMap<String, Double>();
    for (Map.Entry<String, Float> loss : result.losses.entrySet()) {
      if (!loss.getValue().isNaN() && !loss.getValue().isInfinite()) {
        metrics.put("loss_" + loss.getKey(), (double) loss.getValue());
      }
    }
    return new Result(out, data.rows, metrics, state);
  }
}
