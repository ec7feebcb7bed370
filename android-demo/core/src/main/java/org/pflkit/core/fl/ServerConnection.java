package org.pflkit.core.fl;

import java.io.IOException;
import java.io.InterruptedIOException;
import java.net.SocketTimeoutException;
import java.nio.charset.Charset;
import java.util.LinkedHashMap;
import java.util.Map;
import java.util.Random;
import org.pflkit.core.Json;

/**
 * The federated client's requests to {@code pfl-server} (the Python SDK's
 * {@code ServerConnection}): network errors, 429 and 5xx, and any answer carrying
 * {@code Retry-After} are retried per {@link RetryPolicy}, waiting what {@code Retry-After} says
 * when present; other 4xx answers raise {@link ServerRefused} with the server's detail.
 */
final class ServerConnection {
  private static final Charset UTF8 = Charset.forName("UTF-8");
  /** The longest server message quoted in an error. */
  static final int MAX_MESSAGE = 300;

  private final String server;
  private final HttpTransport http;
  private final RetryPolicy retry;
  private final FederatedClient.Sleeper sleeper;
  private final Random jitter;

  ServerConnection(String server, HttpTransport http, RetryPolicy retry,
      FederatedClient.Sleeper sleeper, Random jitter) {
    this.server = server;
    this.http = http;
    this.retry = retry;
    this.sleeper = sleeper;
    this.jitter = jitter;
  }

  /** One request with retries, as the device with this {@code secret} unless null. */
  HttpTransport.Response send(String method, String path, byte[] body, String contentType,
      String secret) throws IOException {
    Map<String, String> headers = new LinkedHashMap<String, String>();
    if (secret != null) {
      headers.put("Authorization", "Bearer " + secret);
    }
    if (contentType != null) {
      headers.put("Content-Type", contentType);
    }
    headers.put("Accept", Wire.JSON + ", " + Wire.OCTET_STREAM);
    long started = System.nanoTime();
    for (int attempt = 0; ; attempt++) {
      String problem;
      long wait;
      try {
        HttpTransport.Response answer = http.send(method, server + path, headers, body);
        if (answer.status < 300) {
          return answer;
        }
        if (answer.status < 400) {  // never followed: the secret would go wherever it points
          throw new ServerRefused(answer.status, "redirect to "
              + oneLine(String.valueOf(answer.header("location"))) + " not followed: give "
              + "the client the server's final URL");
        }
        long asked = RetryPolicy.retryAfterMillis(answer.header(Wire.RETRY_AFTER_HEADER),
            System.currentTimeMillis());
        // 429 and 5xx may be repeated; any other refusal only when the server says when
        boolean retryable = answer.status == 429 || answer.status >= 500 || asked >= 0;
        if (!retryable) {
          throw new ServerRefused(answer.status, detail(answer));
        }
        problem = "HTTP " + answer.status;
        wait = asked >= 0 ? asked : retry.backoffMillis(attempt, jitter);
      } catch (ServerRefused refused) {
        throw refused;
      } catch (UrlConnectionTransport.AnswerTooLarge tooLarge) {
        throw tooLarge;
      } catch (IOException e) {
        if (e instanceof InterruptedIOException && !(e instanceof SocketTimeoutException)) {
          throw e;  // the app interrupted this thread: a timeout is a network failure
        }
        problem = e.getClass().getSimpleName() + ": " + e.getMessage();
        wait = retry.backoffMillis(attempt, jitter);
      }
      long elapsed = (System.nanoTime() - started) / 1_000_000;
      if (elapsed + wait > retry.maxElapsedMillis) {
        throw new ServerUnavailable(method + " " + path + ": gave up after " + (attempt + 1)
            + " attempts (" + problem + ")");
      }
      try {
        sleeper.sleep(wait);
      } catch (InterruptedException e) {
        Thread.currentThread().interrupt();
        throw new InterruptedIOException(method + " " + path + " interrupted while waiting");
      }
    }
  }

  /** The server's message (its JSON {@code detail}, else the body) as one bounded line. */
  private static String detail(HttpTransport.Response answer) {
    String text = new String(answer.body, UTF8);
    try {
      Object parsed = Json.parse(text);
      if (parsed instanceof Map && ((Map<?, ?>) parsed).get(Wire.DETAIL) != null) {
        return oneLine(String.valueOf(((Map<?, ?>) parsed).get(Wire.DETAIL)));
      }
    } catch (Json.SyntaxException e) {
      // not JSON: the body itself is the message
    }
    return oneLine(text);
  }

  /** Text from the server shown to a user: whitespace runs as one space, at most 300 chars. */
  static String oneLine(String text) {
    String line = text.replaceAll("\\s+", " ").trim();
    return line.length() <= MAX_MESSAGE ? line : line.substring(0, MAX_MESSAGE) + "...";
  }

  static Map<String, Object> json(HttpTransport.Response answer) throws IOException {
    try {
      Object parsed = Json.parse(new String(answer.body, UTF8));
      if (parsed instanceof Map) {
        @SuppressWarnings("unchecked")
        Map<String, Object> map = (Map<String, Object>) parsed;
        return map;
      }
    } catch (Json.SyntaxException e) {
      throw new IOException("server answer is not JSON: " + e.getMessage(), e);
    }
    throw new IOException("server answer is not a JSON object");
  }
}
