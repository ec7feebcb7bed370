package org.pflkit.core.fl;

import java.io.IOException;
import java.util.Collections;
import java.util.Map;

/**
 * One HTTP exchange, nothing more: the federated client's only dependency on the platform.
 * {@link UrlConnectionTransport} works on the JVM and on Android ({@code java.net.http} does
 * not exist on Android). An {@link IOException} means no answer (connection refused, reset,
 * timeout); every answer, whatever its status, is a {@link Response}.
 */
public interface HttpTransport {
  /** Send one request; {@code body} is null for requests without one. */
  Response send(String method, String url, Map<String, String> headers, byte[] body)
      throws IOException;

  /** Status, headers (names in lower case) and body of an answer. */
  final class Response {
    public final int status;
    public final Map<String, String> headers;
    public final byte[] body;

    public Response(int status, Map<String, String> headers, byte[] body) {
      this.status = status;
      this.headers = Collections.unmodifiableMap(headers);
      this.body = body;
    }

    /** A header by its lower-case name, or null. */
    public String header(String lowerCaseName) {
      return headers.get(lowerCaseName);
    }
  }
}
