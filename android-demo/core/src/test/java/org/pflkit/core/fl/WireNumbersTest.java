package org.pflkit.core.fl;

import static org.junit.Assert.assertEquals;
import static org.junit.Assert.assertNull;
import static org.junit.Assert.assertTrue;
import static org.junit.Assert.fail;

import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.util.List;
import java.util.Map;
import org.junit.Test;
import org.pflkit.core.Json;
import org.pflkit.core.PythonTool;
import org.pflkit.core.secagg.RoundSetup;

/**
 * The Java client reads every number a server sends as the Python client does: the vectors of
 * android-demo/tools/wire_numbers.py (one number in one field of a server's answer, and
 * Python's verdict). Before, Java read a run_id, round, client id or SecAgg round_id of
 * {@code 1.0} or {@code 1e0} as 1, an input_shape axis of 1.5 as 1 and a learning rate of -1
 * as -1, where Python refuses them all.
 */
public class WireNumbersTest {
  @Test
  public void javaTakesAndRefusesEveryNumberAsPythonDoes() throws Exception {
    List<?> vectors = (List<?>) PythonTool.run("wire_numbers.py", "");
    assertTrue("the tool covers the fields", vectors.size() > 100);
    for (Object v : vectors) {
      Map<?, ?> vector = (Map<?, ?>) v;
      String field = (String) vector.get("field");
      String answer = (String) vector.get("answer");
      Number read;
      try {
        read = read(field, answer);
      } catch (RuntimeException | IOException refused) {
        if (Boolean.TRUE.equals(vector.get("accepted"))) {
          fail(field + ": Java refused what Python takes (" + refused.getMessage() + "): "
              + answer);
        }
        continue;
      }
      if (!Boolean.TRUE.equals(vector.get("accepted"))) {
        fail(field + ": Java took " + read + " where Python refuses: " + answer);
      }
      Object want = vector.get("value");
      if (want == Json.NULL) {
        assertNull(field + ": " + answer, read);
      } else {
        assertEquals(field + ": " + answer, ((Number) want).doubleValue(), read.doubleValue(),
            0);
      }
    }
  }

  /** What the Java client reads from {@code answer} in {@code field}. */
  private static Number read(String field, String answer) throws IOException {
    byte[] body = answer.getBytes(StandardCharsets.UTF_8);
    switch (field) {
      case "task.run_id":
        return Task.parse(body).runId;
      case "task.round":
        return Task.parse(body).round;
      case "task.retry_after":
        return Task.parse(body).retryAfterSeconds;
      case "task.clip_norm":
        return Task.parse(body).clipNorm;
      case "task.config.input_shape":
        return Task.parse(body).inputShape()[0];
      case "task.config.lr_schedule.lr":  // round 1, decay 1: the rate is lr
      case "task.config.lr_schedule.decay":  // round 1, lr 1: the rate is decay
        return Task.parse(body).learningRate();
      case "enrollment.client_id":
        @SuppressWarnings("unchecked")
        Map<String, Object> enrolled = (Map<String, Object>) Json.parse(answer);
        return Credentials.fromAnswer("http://h", enrolled).clientId;
      case "task.secagg.round_id":
        return RoundSetup.fromTask(Task.parse(body).secagg).roundId;
      default:
        throw new AssertionError("a field this test does not know: " + field);
    }
  }
}
