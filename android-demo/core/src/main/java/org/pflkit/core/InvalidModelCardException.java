package org.pflkit.core;

/** A model card that is not valid JSON or breaks the {@code pflkit.model-card/1} schema. */
public final class InvalidModelCardException extends IllegalArgumentException {
  private static final long serialVersionUID = 1L;

  /** {@code where} is the JSON path of the offending field, e.g. {@code preprocessing.std[0]}. */
  InvalidModelCardException(String where, String problem) {
    super("invalid model card: " + (where.isEmpty() ? "" : where + ": ") + problem);
  }
}
