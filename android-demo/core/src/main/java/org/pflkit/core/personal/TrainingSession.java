package org.pflkit.core.personal;

import java.util.List;
import java.util.Map;

/**
 * One engine's view of a loaded training program: the only calls {@link RecipeRunner} makes
 * (pflkit's Python {@code Session}). On Android: ExecuTorch's {@code TrainingModule} and
 * {@code SGD}; on the host: any engine that implements the same maths.
 */
public interface TrainingSession {
  /**
   * The program's per-row inputs that come from {@code prepare} (frozen, run once per row),
   * for {@code rows} NCHW images: one row-major array per prepare input, in card order.
   */
  List<float[]> prepare(float[] images, int rows) throws Exception;

  /**
   * Fresh optimizers (no momentum buffers) for a new walk of the recipe, as pflkit's Python
   * stage makes a new {@code torch.optim.SGD} per stage and per round; steps within one walk
   * share them. Called by {@link RecipeRunner#train} before its first step.
   */
  void newOptimizers() throws Exception;

  /** One forward/backward of the train method and one SGD step of {@code optimizer}; the loss. */
  float step(String optimizer, List<ProgramInput> inputs) throws Exception;

  /** The program's logits for a batch, row-major {@code [rows, classes]}; no step taken. */
  float[] logits(List<ProgramInput> inputs) throws Exception;

  /** Copies of the current personal weights by parameter name. */
  Map<String, float[]> weights() throws Exception;

  /** Replace the personal weights (names and sizes as the card's {@code parameters}). */
  void loadWeights(Map<String, float[]> weights) throws Exception;
}
