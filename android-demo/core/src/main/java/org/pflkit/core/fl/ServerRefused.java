package org.pflkit.core.fl;

import java.io.IOException;

/**
 * The server answered with a final 4xx, or a redirect (3xx, never followed): {@code detail} is
 * its message as one line of at most 300 characters. Nothing was changed.
 */
public final class ServerRefused extends IOException {
  private static final long serialVersionUID = 1L;

  public final int status;
  public final String detail;

  public ServerRefused(int status, String detail) {
    super("server refused (" + status + "): " + detail);
    this.status = status;
    this.detail = detail;
  }
}
