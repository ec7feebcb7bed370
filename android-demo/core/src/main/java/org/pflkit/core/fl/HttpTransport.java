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

  /**
   * As {@link #send(String, String, Map, byte[])}, for an answer whose body may be at most
   * {@code maxBodyBytes} long (a JSON answer's bound, {@link Wire#MAX_JSON_ANSWER}): over it is
   * an {@link UrlConnectionTransport.AnswerTooLarge}. This default checks the answer once read;
   * {@link UrlConnectionTransport} stops reading at the bound.
   */
  default Response send(String method, String url, Map<String, String> headers, byte[] body,
      int maxBodyBytes) throws IOException {
    Response answer = send(method, url, headers, body);
    if (answer.body.length > maxBodyBytes) {
      throw new UrlConnectionTransport.AnswerTooLarge(method + " " + url + ": the answer's "
          + "body of " + answer.body.length + " bytes is over the limit of " + maxBodyBytes
          + " bytes");
    }
    return answer;
  }

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
