package org.pflkit.core.fl;

import java.io.IOException;

/** The server did not answer usefully within the retry budget. */
public final class ServerUnavailable extends IOException {
  private static final long serialVersionUID = 1L;

  public ServerUnavailable(String message) {
    super(message);
  }
}
