package org.pflkit.core.fl;

import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.net.HttpURLConnection;
import java.net.URL;
import java.util.HashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import org.pflkit.core.Streams;

/**
 * {@link HttpTransport} over {@link HttpURLConnection} (JVM and Android alike). Redirects are
 * not followed, and no answer body is read past {@code maxBodyBytes}: a server (or anything
 * posing as one) cannot make the device buffer more than that, whatever its Content-Length.
 */
public final class UrlConnectionTransport implements HttpTransport {
  /**
   * The default bound on one answer's body: 256 MiB, four times pfl-server's default
   * {@code max_upload_bytes} (a global state is the size of an update); an app whose runs
   * allow larger models passes its own.
   */
  public static final int DEFAULT_MAX_BODY_BYTES = 256 << 20;

  private final int connectTimeoutMillis;
  private final int readTimeoutMillis;
  private final int maxBodyBytes;

  public UrlConnectionTransport(int connectTimeoutMillis, int readTimeoutMillis) {
    this(connectTimeoutMillis, readTimeoutMillis, DEFAULT_MAX_BODY_BYTES);
  }

  /** {@code maxBodyBytes} in 1..2^31-1: the largest answer body read. */
  public UrlConnectionTransport(int connectTimeoutMillis, int readTimeoutMillis,
      int maxBodyBytes) {
    if (maxBodyBytes < 1) {
      throw new IllegalArgumentException("maxBodyBytes must be in 1.." + Integer.MAX_VALUE
          + ", found " + maxBodyBytes);
    }
    this.connectTimeoutMillis = connectTimeoutMillis;
    this.readTimeoutMillis = readTimeoutMillis;
    this.maxBodyBytes = maxBodyBytes;
  }

  @Override
  public Response send(String method, String url, Map<String, String> headers, byte[] body)
      throws IOException {
    HttpURLConnection conn = (HttpURLConnection) new URL(url).openConnection();
    try {
      conn.setRequestMethod(method);
      conn.setConnectTimeout(connectTimeoutMillis);
      conn.setReadTimeout(readTimeoutMillis);
      conn.setUseCaches(false);
      conn.setInstanceFollowRedirects(false);
      for (Map.Entry<String, String> h : headers.entrySet()) {
        conn.setRequestProperty(h.getKey(), h.getValue());
      }
      if (body != null) {
        conn.setDoOutput(true);
        conn.setFixedLengthStreamingMode(body.length);
        OutputStream out = conn.getOutputStream();
        try {
          out.write(body);
        } finally {
          out.close();
        }
      }
      int status = conn.getResponseCode();
      Map<String, String> answer = new HashMap<String, String>();
      for (Map.Entry<String, List<String>> h : conn.getHeaderFields().entrySet()) {
        if (h.getKey() != null && !h.getValue().isEmpty()) {
          answer.put(h.getKey().toLowerCase(Locale.ROOT), h.getValue().get(0));
        }
      }
      long declared = conn.getContentLengthLong();
      if (declared > maxBodyBytes) {
        throw tooLarge(method, url, declared + " bytes");
      }
      InputStream in = status >= 400 ? conn.getErrorStream() : conn.getInputStream();
      byte[] read = in == null ? new byte[0] : Streams.readAtMost(in, maxBodyBytes);
      if (read == null) {
        throw tooLarge(method, url, "more bytes");
      }
      return new Response(status, answer, read);
    } finally {
      conn.disconnect();
    }
  }

  private IOException tooLarge(String method, String url, String size) {
    return new AnswerTooLarge(method + " " + url + ": the answer's body of " + size
        + " is over the limit of " + maxBodyBytes + " bytes");
  }

  /** An answer body over the bound: not retried (the same server would send it again). */
  public static final class AnswerTooLarge extends IOException {
    private static final long serialVersionUID = 1L;

    AnswerTooLarge(String message) {
      super(message);
    }
  }
}
