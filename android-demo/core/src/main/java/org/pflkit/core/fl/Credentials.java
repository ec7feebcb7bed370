package org.pflkit.core.fl;

import java.io.IOException;
import java.util.LinkedHashMap;
import java.util.Map;
import org.pflkit.core.Json;

/**
 * What enrollment gives a device ({@code credentials.json}: the server's URL, the client id and
 * the secret), checked whenever it is read: a file that is not what {@link FederatedClient#enroll}
 * wrote (a missing, fractional, negative or string id, no secret) is refused naming the file, the
 * Python SDK's rule, instead of failing later inside a round.
 */
final class Credentials {
  /** Ids are 32-bit signed on the server ({@code pflkit.sdk.protocol.MAX_ID}). */
  static final long MAX_ID = Integer.MAX_VALUE;
  static final String SERVER = "server";

  final String server;
  final long clientId;
  final String secret;

  private Credentials(String server, long clientId, String secret) {
    this.server = server;
    this.clientId = clientId;
    this.secret = secret;
  }

  /** The credentials in a parsed {@code credentials.json}, or null when it is empty. */
  static Credentials fromJson(Map<String, Object> json, String source) throws IOException {
    if (json.isEmpty()) {
      return null;
    }
    Object server = json.get(SERVER);
    Long id = id(json.get(Wire.CLIENT_ID));
    Object secret = json.get(Wire.SECRET);
    if (!(server instanceof String) || id == null || !sendable(secret)) {
      throw new IOException(source + ": not the credentials enrollment writes (server, "
          + "client_id in 0.." + MAX_ID + ", secret); move it away and enroll with a new token");
    }
    return new Credentials((String) server, id, (String) secret);
  }

  /** The server's answer to an enrollment, for {@code server}. */
  static Credentials fromAnswer(String server, Map<String, Object> answer) throws IOException {
    Long id = id(answer.get(Wire.CLIENT_ID));
    Object secret = answer.get(Wire.SECRET);
    if (id == null || !sendable(secret)) {  // stored, it would fail every request
      throw new IOException("enrollment: the server's answer holds no client id in 0.."
          + MAX_ID + " and sendable secret; nothing was stored");
    }
    return new Credentials(server, id, (String) secret);
  }

  Map<String, Object> toJson() {
    Map<String, Object> json = new LinkedHashMap<String, Object>();
    json.put(SERVER, server);
    json.put(Wire.CLIENT_ID, clientId);
    json.put(Wire.SECRET, secret);
    return json;
  }

  /**
   * Whether a token or secret can travel in an HTTP header: printable ASCII, no spaces, not
   * empty (the Python SDK's {@code protocol.sendable}). A stray newline would otherwise reach
   * the HTTP library, whose error quotes the header, secret and all.
   */
  static boolean sendable(Object secret) {
    if (!(secret instanceof String) || ((String) secret).isEmpty()) {
      return false;
    }
    for (char c : ((String) secret).toCharArray()) {
      if (c < '!' || c > '~') {
        return false;
      }
    }
    return true;
  }

  /** A JSON number that is an integer in 0..{@link #MAX_ID}, else null. */
  private static Long id(Object value) {
    return Json.integer(value, 0, MAX_ID);
  }
}
