package org.pflkit.core.fl;

import static org.junit.Assert.assertEquals;
import static org.junit.Assert.assertFalse;
import static org.junit.Assert.assertNotNull;
import static org.junit.Assert.assertTrue;
import static org.junit.Assert.fail;

import java.io.BufferedInputStream;
import java.io.File;
import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.net.ServerSocket;
import java.net.Socket;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.concurrent.ConcurrentLinkedQueue;
import org.junit.After;
import org.junit.Before;
import org.junit.Rule;
import org.junit.Test;
import org.junit.rules.TemporaryFolder;
import org.pflkit.core.AtomicFiles;

/**
 * The client facing a malicious or broken server, over raw sockets (answers no well-behaved
 * HTTP server library would send): bodies over the transport's bound, with or without a
 * Content-Length, redirects, error messages of megabytes over many lines, out-of-range waits,
 * headers or bodies sent a byte at a time.
 * Each gives one bounded, one-line error and leaves the device's files as they were.
 */
public class HostileServerTest {
  private static final int LIMIT = 64 * 1024;

  @Rule public final TemporaryFolder tmp = new TemporaryFolder();

  /** Writes one raw answer to a connection whose request was read. */
  interface Raw {
    void answer(OutputStream out) throws IOException;
  }

  private ServerSocket socket;
  private Thread acceptor;
  private final ConcurrentLinkedQueue<Raw> script = new ConcurrentLinkedQueue<>();
  private final List<String> requests = Collections.synchronizedList(new ArrayList<>());

  @Before
  public void start() throws IOException {
    socket = new ServerSocket(0);
    acceptor = new Thread(() -> {
      while (!socket.isClosed()) {
        try (Socket s = socket.accept()) {
          InputStream in = new BufferedInputStream(s.getInputStream());
          requests.add(readRequest(in));
          Raw raw = script.poll();
          try {
            (raw == null ? text(599, "script exhausted") : raw).answer(s.getOutputStream());
          } catch (IOException clientHungUp) {
            // the client stopped reading: what a bounded reader does
          }
        } catch (IOException closed) {
          return;
        }
      }
    });
    acceptor.setDaemon(true);
    acceptor.start();
  }

  @After
  public void stop() throws Exception {
    socket.close();
    acceptor.join();
  }

  /** The request line; headers and the body (by Content-Length) are consumed. */
  private static String readRequest(InputStream in) throws IOException {
    List<String> lines = new ArrayList<>();
    StringBuilder line = new StringBuilder();
    int length = 0;
    for (int c = in.read(); c >= 0; c = in.read()) {
      if (c == '\n') {
        String l = line.toString().trim();
        if (l.isEmpty()) {
          break;
        }
        if (l.toLowerCase().startsWith("content-length:")) {
          length = Integer.parseInt(l.substring(15).trim());
        }
        lines.add(l);
        line.setLength(0);
      } else {
        line.append((char) c);
      }
    }
    in.readNBytes(length);
    return lines.isEmpty() ? "" : lines.get(0);
  }

  static Raw raw(String head, byte[] body) {
    return out -> {
      out.write(head.getBytes(StandardCharsets.ISO_8859_1));
      out.write(body);
      out.flush();
    };
  }

  static Raw text(int status, String body) {
    byte[] bytes = body.getBytes(StandardCharsets.UTF_8);
    return raw("HTTP/1.1 " + status + " X\r\nContent-Length: " + bytes.length
        + "\r\nConnection: close\r\n\r\n", bytes);
  }

  /** A chunked body that never ends (until the client hangs up). */
  static Raw endless(int status) {
    return out -> {
      out.write(("HTTP/1.1 " + status + " X\r\nTransfer-Encoding: chunked\r\n\r\n")
          .getBytes(StandardCharsets.ISO_8859_1));
      byte[] chunk = new byte[8192];
      String size = Integer.toHexString(chunk.length) + "\r\n";
      for (int i = 0; i < 100_000; i++) {  // 800 MB: far over any bound
        out.write(size.getBytes(StandardCharsets.ISO_8859_1));
        out.write(chunk);
        out.write("\r\n".getBytes(StandardCharsets.ISO_8859_1));
      }
    };
  }

  /** {@code head}'s bytes one at a time, each well within any read timeout, then nothing. */
  static Raw trickled(String head) {
    return out -> {
      for (byte b : head.getBytes(StandardCharsets.ISO_8859_1)) {
        out.write(b);
        out.flush();
        try {
          Thread.sleep(10);  // pace of the trickle: the outcome is the client's deadline
        } catch (InterruptedException e) {
          return;
        }
      }
    };
  }

  FederatedClient enrolled() throws IOException {
    return enrolled(new UrlConnectionTransport(2_000, 5_000, LIMIT));
  }

  FederatedClient enrolled(UrlConnectionTransport transport) throws IOException {
    FederatedClient c = new FederatedClient("http://127.0.0.1:" + socket.getLocalPort(),
        tmp.getRoot(), transport, new RetryPolicy(1, 1, 0), millis -> { });
    script.add(text(200, "{\"client_id\": 7, \"secret\": \"s3cret\"}"));
    assertEquals(7, c.enroll("tok"));
    requests.clear();
    return c;
  }

  /** The poll fails with one line that contains {@code expected}. */
  void pollFails(FederatedClient c, String expected) {
    try {
      c.poll();
      fail("expected a refusal containing " + expected);
    } catch (IOException e) {
      String m = e.getMessage();
      assertNotNull(m);
      assertTrue(m, m.contains(expected));
      assertFalse("one line: " + m, m.contains("\n"));
      assertTrue("bounded: " + m.length(), m.length() < 1000);
    }
  }

  @Test
  public void aBodyOverTheBoundIsRefusedBeforeOrWhileReadingIt() throws Exception {
    FederatedClient c = enrolled();
    script.add(raw("HTTP/1.1 200 OK\r\nContent-Length: 1099511627776\r\n\r\n", new byte[10]));
    pollFails(c, "over the limit of " + LIMIT + " bytes");
    script.add(endless(200));
    pollFails(c, "over the limit of " + LIMIT + " bytes");
    script.add(endless(500));  // error bodies are bounded too
    pollFails(c, "over the limit of " + LIMIT + " bytes");
    script.add(text(200, "{\"status\": \"wait\", \"retry_after\": 1.0}"));
    assertEquals("wait", c.poll().status);  // and the client goes on
  }

  @Test
  public void headersOrABodyThatTrickleAreCutOffAtTheDeadlineAsANetworkFailure()
      throws Exception {
    FederatedClient c = enrolled(new UrlConnectionTransport(2_000, 5_000, LIMIT, 300));
    StringBuilder header = new StringBuilder("HTTP/1.1 200 OK\r\nX-Slow: ");
    for (int i = 0; i < 4096; i++) {
      header.append('a');  // 41 s at the server's pace: the read timeout never fires
    }
    script.add(trickled(header.toString()));
    pollFails(c, "gave up after 1 attempts (SocketTimeoutException: GET ");
    script.add(trickled("HTTP/1.1 200 OK\r\nContent-Length: 4096\r\n\r\n"
        + header.substring(0, 4096)));
    pollFails(c, "did not arrive whole within 0.3 s (its deadline)");
    script.add(text(200, "{\"status\": \"wait\", \"retry_after\": 1.0}"));
    assertEquals("wait", c.poll().status);  // and the client goes on
    assertEquals(4000 + LIMIT * 1000L / UrlConnectionTransport.MIN_ANSWER_RATE,
        new UrlConnectionTransport(2_000, 4_000, LIMIT).deadlineMillis(0));
  }

  @Test
  public void aRedirectIsNotSuccessAndNeverFollowed() throws Exception {
    FederatedClient c = enrolled();
    script.add(raw("HTTP/1.1 302 Found\r\nLocation: http://evil.example/v1/task\r\n"
        + "Content-Length: 2\r\n\r\n", "{}".getBytes(StandardCharsets.UTF_8)));
    pollFails(c, "server refused (302): redirect to http://evil.example/v1/task not followed: "
        + "give the client the server's final URL");
    assertEquals(1, requests.size());  // not followed
    script.add(raw("HTTP/1.1 301 Moved\r\nLocation: http://evil.example/?s=s3cret\r\n"
        + "Content-Length: 0\r\n\r\n", new byte[0]));
    pollFails(c, "redirect to http://evil.example/?s=<secret> not followed");
    // a 3xx without a Location is a refusal like any other, its message the body's detail
    script.add(text(300, "{\"detail\": \"pick one\"}"));
    pollFails(c, "server refused (300): pick one");
    assertEquals(3, requests.size());
    // an upload answered by a redirect was not received: the round stays pending
    File pending = new File(tmp.getRoot(), PendingRound.FILE);
    script.add(text(200, "{\"status\": \"train\", \"retry_after\": 1.0, \"run_id\": 1, "
        + "\"round\": 0, \"global_hash\": \"" + "0".repeat(64) + "\", \"config\": {}}"));
    byte[] bytes = new PendingRound(1, 0, 5, null, null, new byte[] {1, 2, 3}, null).toBytes();
    AtomicFiles.write(pending, bytes);
    script.add(raw("HTTP/1.1 307 Temporary Redirect\r\nLocation: http://evil.example/\r\n"
        + "Content-Length: 2\r\n\r\n", "{}".getBytes(StandardCharsets.UTF_8)));
    try {
      c.step((task, global, state) -> {
        throw new AssertionError("the pending round is re-sent, not trained again");
      });
      fail("a redirected upload is not an accepted one");
    } catch (ServerRefused e) {
      assertEquals(307, e.status);
    }
    assertTrue("kept for the next step", pending.isFile());
  }

  @Test
  public void aServersMessageIsShownAsOneBoundedLine() throws Exception {
    FederatedClient c = enrolled();
    StringBuilder huge = new StringBuilder();
    for (int i = 0; i < 2000; i++) {
      huge.append("line ").append(i).append("\r\n");
    }
    script.add(text(403, huge.toString()));
    pollFails(c, "server refused (403): line 0 line 1");
    script.add(text(400, "{\"detail\": \"bad\\nthing\\r\\nhere\"}"));
    pollFails(c, "server refused (400): bad thing here");
  }

  @Test
  public void aWaitOutsideItsRangeIsRefused() throws Exception {
    FederatedClient c = enrolled();
    for (String wait : new String[] {"-1", "1e300", "3601"}) {
      script.add(text(200, "{\"status\": \"wait\", \"retry_after\": " + wait + "}"));
      pollFails(c, "retry_after must be a number in [0, 3600]");
    }
    script.add(text(200, "{\"status\": \"wait\", \"retry_after\": 3600}"));
    assertEquals(3600.0, c.poll().retryAfterSeconds, 0);
  }

  /**
   * A JSON answer (a task, a receipt, a SecAgg step) is read up to 16 MiB, the Python SDK's
   * bound, not up to the transport's 256 MiB a global state may take: a phone that decoded and
   * parsed a 256 MiB task would run out of memory.
   */
  @Test
  public void aJsonAnswerOverSixteenMegabytesIsRefused() throws Exception {
    FederatedClient c = enrolled(new UrlConnectionTransport(2_000, 5_000));
    String task = "{\"status\": \"wait\", \"retry_after\": 1, \"pad\": \"";
    script.add(text(200, task + "x".repeat(Wire.MAX_JSON_ANSWER) + "\"}"));
    pollFails(c, "GET http://127.0.0.1:" + socket.getLocalPort() + "/v1/task: the answer's "
        + "body of 16777263 bytes is over the limit of 16777216 bytes");
    script.add(endless(200));
    pollFails(c, "over the limit of 16777216 bytes");
    script.add(text(200, task + "\"}"));
    assertEquals("wait", c.poll().status);
  }

  /** What the Python SDK's protocol.task_problem refuses is refused here too, in one line. */
  @Test
  public void aTaskThePythonSdkRefusesIsRefused() throws Exception {
    FederatedClient c = enrolled();
    String hash = "\"" + "0".repeat(64) + "\"";
    String[][] lies = {
        {"\"status\": \"TRAIN\"", "status must be one of train, uploaded, wait, paused, "
            + "stopped, finished"},
        {"\"status\": \"wait\", \"run_id\": 2147483648", "run_id must be an integer in "
            + "[0, 2147483647]"},
        {"\"status\": \"wait\", \"round\": 1e12", "round must be an integer in"},
        {"\"status\": \"train\", \"run_id\": 1, \"round\": 0, \"config\": {}, "
            + "\"global_hash\": \"../clients/enroll\"", "global_hash must be 64 lowercase hex"},
        {"\"status\": \"train\", \"run_id\": 1, \"round\": 0, \"config\": {}, "
            + "\"global_hash\": " + hash.toUpperCase().replace('0', 'A'),
            "global_hash must be 64 lowercase hex"},
        {"\"status\": \"train\", \"run_id\": 1, \"round\": 0, \"global_hash\": " + hash,
            "config must be an object"},
        {"\"status\": \"train\", \"round\": 0, \"config\": {}, \"global_hash\": " + hash,
            "run_id and round are required"},
        {"\"status\": \"train\", \"run_id\": 1, \"round\": 0, \"config\": {}, \"secagg\": "
            + "\"on\", \"global_hash\": " + hash, "secagg: the round's setup must be an object"},
    };
    for (String[] lie : lies) {
      script.add(text(200, "{\"retry_after\": 1, " + lie[0] + "}"));
      pollFails(c, lie[1]);
    }
    // a value of the wrong kind is named by its kind: never its text (megabytes, escape
    // sequences, a quoted secret)
    String hostile = "\"s3cret \\u001b[2J" + "x".repeat(30_000) + "\"";
    String[][] kinds = {
        {"\"retry_after\": " + hostile, "retry_after must be a number, found a string"},
        {"\"retry_after\": [" + hostile + "]", "retry_after must be a number, found an array"},
        {"\"retry_after\": 1, \"global_hash\": {\"s\": " + hostile + "}",
            "global_hash must be a string, found an object"},
    };
    for (String[] kind : kinds) {
      script.add(text(200, "{\"status\": \"wait\", " + kind[0] + "}"));
      pollFails(c, "task: " + kind[1]);
    }
    script.add(text(200, "{\"retry_after\": 1, \"status\": \"train\", \"run_id\": "
        + "2147483647, \"round\": 0, \"config\": {}, \"global_hash\": " + hash + "}"));
    assertEquals(Long.valueOf(2147483647L), c.poll().runId);
  }

  /**
   * As the Python SDK's: a refusal quoting the request shows neither the token nor the secret,
   * shows no escape sequence, and a FastAPI validation list reads as {@code key: msg}.
   */
  @Test
  public void aRefusalShowsNoSecretNoEscapeAndReadableValidationErrors() throws Exception {
    FederatedClient fresh = new FederatedClient("http://127.0.0.1:" + socket.getLocalPort(),
        tmp.newFolder(), new UrlConnectionTransport(2_000, 5_000, LIMIT),
        new RetryPolicy(1, 1, 0), millis -> { });
    script.add(text(403, "{\"detail\": \"unknown token tok-5ecret\"}"));
    try {
      fresh.enroll("tok-5ecret");
      fail("refused");
    } catch (ServerRefused e) {
      assertEquals("server refused (403): unknown token <secret>", e.getMessage());
    }
    FederatedClient c = enrolled();
    script.add(text(401, "bad credentials: Bearer s3cret\u001b[2J"));
    pollFails(c, "server refused (401): bad credentials: Bearer <secret>?[2J");
    // a server escaping the secret in its JSON ("t" as \u0074) does not reveal it either,
    // nor does a message cut at 300 characters in the middle of it
    script.add(text(403, "{\"detail\": \"bad credentials: Bearer s3cre\\u0074\"}"));
    pollFails(c, "server refused (403): bad credentials: Bearer <secret>");
    script.add(text(403, "{\"detail\": \"" + "x".repeat(297) + "s3cre\\u0074\"}"));
    pollFails(c, "server refused (403): " + "x".repeat(297) + "<se...");
    script.add(text(422, "{\"detail\": [{\"type\": \"greater_than\", \"loc\": [\"query\", "
        + "\"num_samples\"], \"msg\": \"Input should be greater than 0\", \"input\": \"0\"}, "
        + "{\"loc\": [\"body\", \"items\", 2], \"msg\": \"bad\"}]}"));
    pollFails(c, "server refused (422): num_samples: Input should be greater than 0; items.2: "
        + "bad");
  }
}
