package org.pflkit.core.secagg;

/** A SecAgg message refused (bad peer, reused key, malformed, replay): the state is unchanged. */
public final class SecAggException extends IllegalArgumentException {
  private static final long serialVersionUID = 1L;

  public SecAggException(String message) {
    super(message);
  }
}
