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

/** {@link HttpTransport} over {@link HttpURLConnection} (JVM and Android alike). */
public final class UrlConnectionTransport implements HttpTransport {
  private final int connectTimeoutMillis;
  private final int readTimeoutMillis;

  public UrlConnectionTransport(int connectTimeoutMillis, int readTimeoutMillis) {
    this.connectTimeoutMillis = connectTimeoutMillis;
    this.readTimeoutMillis = readTimeoutMillis;
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
      InputStream in = status >= 400 ? conn.getErrorStream() : conn.getInputStream();
      return new Response(status, answer, in == null ? new byte[0] : Streams.readAll(in));
    } finally {
      conn.disconnect();
    }
  }
}
