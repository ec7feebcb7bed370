package org.pflkit.core.fl;

import java.io.IOException;
import java.io.InterruptedIOException;
import java.net.SocketTimeoutException;
import java.nio.charset.Charset;
import java.util.Collections;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Random;
import org.pflkit.core.Json;
import org.pflkit.core.JsonWriter;

/**
 * The federated client's requests to {@code pfl-server} (the Python SDK's
 * {@code ServerConnection}): network errors, 429 and 5xx, and any answer carrying
 * {@code Retry-After} (seconds in [0, 3600]) are retried per {@link RetryPolicy}, waiting what
 * {@code Retry-After} says when present; other 4xx answers raise {@link ServerRefused} with the
 * server's detail.
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

  /**
   * One request with retries, as the device with this {@code secret} unless null; an answer's
   * body over {@code maxAnswerBytes} is an AnswerTooLarge (not retried). A refusal's message
   * shows neither the secret nor {@code hidden} (e.g. a token in the body), which a server or
   * proxy may quote.
   */
  HttpTransport.Response send(String method, String path, byte[] body, String contentType,
      String secret, String hidden, int maxAnswerBytes) throws IOException {
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
        HttpTransport.Response answer = http.send(method, server + path, headers, body,
            maxAnswerBytes);
        if (answer.status < 300) {
          return answer;
        }
        String location = answer.header("location");
        if (answer.status < 400 && location != null) {
          // never followed (the secret would go wherever it points); its body is a web
          // server's page, so the Location is the message
          throw new ServerRefused(answer.status, oneLine("redirect to " + location
              + " not followed: give the client the server's final URL", secret, hidden));
        }
        long asked = RetryPolicy.retryAfterMillis(answer.header(Wire.RETRY_AFTER_HEADER));
        // 429 and 5xx may be repeated; any other refusal only when the server says when
        boolean retryable = answer.status == 429 || answer.status >= 500 || asked >= 0;
        if (!retryable) {
          throw new ServerRefused(answer.status, detail(answer, secret, hidden));
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

  /**
   * The server's message (its JSON {@code detail}, else the body) as one bounded line, each of
   * {@code hidden} masked in the body and again in the decoded message (a server may escape
   * one in its JSON, {@code \u0039} for {@code 9}); FastAPI's validation lists as
   * {@code key: msg; ...}, as the Python SDK shows them.
   */
  private static String detail(HttpTransport.Response answer, String... hidden) {
    String text = mask(new String(answer.body, UTF8), hidden);
    try {
      Object parsed = Json.parse(text);
      Object detail = parsed instanceof Map ? ((Map<?, ?>) parsed).get(Wire.DETAIL) : null;
      if (detail instanceof List) {
        return oneLine(validationErrors((List<?>) detail), hidden);
      }
      if (detail != null && detail != Json.NULL) {
        return oneLine(String.valueOf(detail), hidden);
      }
    } catch (Json.SyntaxException e) {
      // not JSON: the body itself is the message
    }
    return oneLine(text, hidden);
  }

  /** {@code text} with each of {@code hidden} (a secret: printable, no spaces) as <secret>. */
  private static String mask(String text, String... hidden) {
    for (String secret : hidden) {
      if (secret != null && !secret.isEmpty()) {
        text = text.replace(secret, "<secret>");
      }
    }
    return text;
  }

  /** {@code [{"loc": ["query", "num_samples"], "msg": "..."}]} as {@code num_samples: ...}. */
  private static String validationErrors(List<?> items) {
    StringBuilder out = new StringBuilder();
    for (Object item : items) {
      out.append(out.length() == 0 ? "" : "; ");
      if (!(item instanceof Map)) {
        out.append(item);
        continue;
      }
      Object loc = ((Map<?, ?>) item).get("loc");
      List<?> path = loc instanceof List ? (List<?>) loc : Collections.emptyList();
      StringBuilder key = new StringBuilder();
      for (Object part : path.subList(Math.min(1, path.size()), path.size())) {
        key.append(key.length() == 0 ? "" : ".")  // an index as 2, not 2.0
            .append(Json.isNumber(part) ? JsonWriter.write(part) : String.valueOf(part));
      }
      Object msg = ((Map<?, ?>) item).get("msg");
      out.append(key).append(": ").append(msg != null ? msg : item);
    }
    return out.toString();
  }

  /**
   * Text from the server shown to a user: whitespace runs as one space, every other character
   * that does not print (an escape sequence's ESC, a format control) as {@code ?}, each of
   * {@code hidden} as {@code <secret>}, then cut to at most 300 characters.
   */
  static String oneLine(String text, String... hidden) {
    String line = text.replaceAll("\\s+", " ").trim();
    StringBuilder shown = new StringBuilder(line.length());
    for (int i = 0; i < line.length(); i++) {
      char c = line.charAt(i);
      shown.append(c == ' ' || printable(c) ? c : '?');
    }
    line = mask(shown.toString(), hidden);
    return line.length() <= MAX_MESSAGE ? line : line.substring(0, MAX_MESSAGE) + "...";
  }

  /** Python's str.isprintable for one UTF-16 unit (a surrogate half does not print alone). */
  private static boolean printable(char c) {
    switch (Character.getType(c)) {
      case Character.CONTROL:
      case Character.FORMAT:
      case Character.SURROGATE:
      case Character.PRIVATE_USE:
      case Character.UNASSIGNED:
      case Character.LINE_SEPARATOR:
      case Character.PARAGRAPH_SEPARATOR:
      case Character.SPACE_SEPARATOR:
        return false;
      default:
        return true;
    }
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
