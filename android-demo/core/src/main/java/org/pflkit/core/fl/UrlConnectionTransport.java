package org.pflkit.core.fl;

import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.net.HttpURLConnection;
import java.net.SocketTimeoutException;
import java.net.URL;
import java.util.HashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.ScheduledFuture;
import java.util.concurrent.ScheduledThreadPoolExecutor;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;
import org.pflkit.core.Streams;

/**
 * {@link HttpTransport} over {@link HttpURLConnection} (JVM and Android alike). Redirects are
 * not followed, and no answer body is read past {@code maxBodyBytes}: a server (or anything
 * posing as one) cannot make the device buffer more than that, whatever its Content-Length.
 *
 * <p>Every answer must arrive whole, headers and body, within its deadline: the read timeout
 * bounds each single read only, so a server sending a byte now and then could hold the device
 * for ever. Past the deadline the connection is closed and the request fails with a
 * {@link SocketTimeoutException}, a network failure the client retries.
 */
public final class UrlConnectionTransport implements HttpTransport {
  /**
   * The default bound on one answer's body: 256 MiB, four times pfl-server's default
   * {@code max_upload_bytes} (a global state is the size of an update); an app whose runs
   * allow larger models passes its own.
   */
  public static final int DEFAULT_MAX_BODY_BYTES = 256 << 20;
  /**
   * Request bodies up to this size (every JSON request, and the updates of most models) are
   * handed to HttpURLConnection whole rather than streamed: the JDK drops the answer to a
   * streamed request that gets 401 (it could not resend the body to authenticate), and with it
   * the server's message, e.g. "unknown enrollment token". Larger bodies are streamed, so the
   * device never holds a second copy of a large update.
   */
  public static final int BUFFERED_BODY_BYTES = 16 << 20;
  /** Bytes per second a default deadline allows (512 kbit/s, slow 3G), as pfl-client's. */
  public static final long MIN_ANSWER_RATE = 64 * 1024;

  /** Closes connections past their deadline: one daemon thread for every transport. */
  private static final ScheduledExecutorService WATCHDOG = watchdog();

  private final int connectTimeoutMillis;
  private final int readTimeoutMillis;
  private final int maxBodyBytes;
  private final long answerDeadlineMillis;

  /**
   * {@code connectTimeoutMillis} and {@code readTimeoutMillis} in 1..3600000 (an hour, the
   * Python SDK's timeout range; HttpURLConnection would read 0 as "wait for ever").
   */
  public UrlConnectionTransport(int connectTimeoutMillis, int readTimeoutMillis) {
    this(connectTimeoutMillis, readTimeoutMillis, DEFAULT_MAX_BODY_BYTES);
  }

  /** {@code maxBodyBytes} in 1..2^31-1: the largest answer body read. */
  public UrlConnectionTransport(int connectTimeoutMillis, int readTimeoutMillis,
      int maxBodyBytes) {
    this(connectTimeoutMillis, readTimeoutMillis, maxBodyBytes, 0);
  }

  /**
   * {@code answerDeadlineMillis} in 1..604800000 (a week) for every answer, or 0: the read
   * timeout plus the request's body and {@code maxBodyBytes} at {@link #MIN_ANSWER_RATE}.
   */
  public UrlConnectionTransport(int connectTimeoutMillis, int readTimeoutMillis,
      int maxBodyBytes, long answerDeadlineMillis) {
    checkTimeout("connectTimeoutMillis", connectTimeoutMillis);
    checkTimeout("readTimeoutMillis", readTimeoutMillis);
    if (maxBodyBytes < 1) {
      throw new IllegalArgumentException("maxBodyBytes must be in 1.." + Integer.MAX_VALUE
          + ", found " + maxBodyBytes);
    }
    if (answerDeadlineMillis < 0 || answerDeadlineMillis > 604_800_000L) {
      throw new IllegalArgumentException("answerDeadlineMillis must be in 0..604800000, found "
          + answerDeadlineMillis);
    }
    this.connectTimeoutMillis = connectTimeoutMillis;
    this.readTimeoutMillis = readTimeoutMillis;
    this.maxBodyBytes = maxBodyBytes;
    this.answerDeadlineMillis = answerDeadlineMillis;
  }

  private static void checkTimeout(String name, int millis) {
    if (millis < 1 || millis > RetryPolicy.MAX_WAIT_MILLIS) {
      throw new IllegalArgumentException(name + " must be in 1.." + RetryPolicy.MAX_WAIT_MILLIS
          + ", found " + millis);
    }
  }

  /** Milliseconds an answer may take to arrive whole when the request sends {@code sent}. */
  public long deadlineMillis(long sent) {
    if (answerDeadlineMillis > 0) {
      return answerDeadlineMillis;
    }
    return readTimeoutMillis + (sent + maxBodyBytes) * 1000 / MIN_ANSWER_RATE;
  }

  @Override
  public Response send(String method, String url, Map<String, String> headers, byte[] body)
      throws IOException {
    return send(method, url, headers, body, maxBodyBytes);
  }

  /** Reads at most the smaller of {@code bound} and this transport's {@code maxBodyBytes}. */
  @Override
  public Response send(String method, String url, Map<String, String> headers, byte[] body,
      int bound) throws IOException {
    final HttpURLConnection conn = (HttpURLConnection) new URL(url).openConnection();
    long deadline = deadlineMillis(body == null ? 0 : body.length);
    final AtomicBoolean late = new AtomicBoolean();
    ScheduledFuture<?> watch = WATCHDOG.schedule(() -> {
      late.set(true);
      conn.disconnect();  // a read blocked in another thread fails at once
    }, deadline, TimeUnit.MILLISECONDS);
    try {
      return exchange(conn, method, url, headers, body, Math.min(bound, maxBodyBytes));
    } catch (IOException e) {
      if (late.get()) {
        throw new SocketTimeoutException(method + " " + url + ": the answer did not arrive "
            + "whole within " + deadline / 1000.0 + " s (its deadline)");
      }
      throw e;
    } finally {
      watch.cancel(false);
      conn.disconnect();
    }
  }

  private Response exchange(HttpURLConnection conn, String method, String url,
      Map<String, String> headers, byte[] body, int limit) throws IOException {
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
      if (body.length > BUFFERED_BODY_BYTES) {
        conn.setFixedLengthStreamingMode(body.length);
      }
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
    if (declared > limit) {
      throw tooLarge(method, url, declared + " bytes", limit);
    }
    InputStream in = status >= 400 ? conn.getErrorStream() : conn.getInputStream();
    byte[] read = in == null ? new byte[0] : Streams.readAtMost(in, limit);
    if (read == null) {
      throw tooLarge(method, url, "more bytes", limit);
    }
    return new Response(status, answer, read);
  }

  private static ScheduledExecutorService watchdog() {
    ScheduledThreadPoolExecutor pool = new ScheduledThreadPoolExecutor(1, task -> {
      Thread t = new Thread(task, "pflkit-answer-deadline");
      t.setDaemon(true);
      return t;
    });
    pool.setRemoveOnCancelPolicy(true);  // a finished request's watch is dropped at once
    return pool;
  }

  private static IOException tooLarge(String method, String url, String size, int limit) {
    return new AnswerTooLarge(method + " " + url + ": the answer's body of " + size
        + " is over the limit of " + limit + " bytes");
  }

  /** An answer body over the bound: not retried (the same server would send it again). */
  public static final class AnswerTooLarge extends IOException {
    private static final long serialVersionUID = 1L;

    AnswerTooLarge(String message) {
      super(message);
    }
  }
}
