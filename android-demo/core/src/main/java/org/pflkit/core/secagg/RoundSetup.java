package org.pflkit.core.secagg;

import java.util.Arrays;
import java.util.Base64;
import java.util.List;
import java.util.Map;
import org.pflkit.core.Json;

/**
 * A SecAgg round's public setup as a task carries it (Python's {@code wire.setup_to_wire} plus
 * DP's C and z), checked as Python's {@code RoundSetup} checks it.
 */
public final class RoundSetup {
  /** Client ids and the round fit the server's 32-bit integers, as Python's MAX_ID. */
  public static final long MAX_ID = Integer.MAX_VALUE;
  /** Shamir's x-coordinates and the quantization's headroom stay small (Python's MAX_CLIENTS). */
  public static final int MAX_CLIENTS = 10_000;
  /** A run config's ranges of DP's C and z (Python's AggregationConfig). */
  public static final double MAX_DP_CLIP_NORM = 1e6;
  public static final double MAX_DP_NOISE_MULTIPLIER = 1e3;
  private static final String BAD_DP = "secagg: the task's dp_clip_norm and dp_noise_multiplier"
      + " are not both in a run config's ranges (docs/privacy.md)";

  public final long roundId;
  public final long[] roster; // sorted client ids
  public final int threshold; // t
  public final int neighbours; // k
  public final int dimension;
  public final double clipRange;
  public final byte[] graphSeed;
  public final Double dpClipNorm; // null without DP; both or neither
  public final Double dpNoiseMultiplier;

  public RoundSetup(long roundId, long[] roster, int threshold, int neighbours, int dimension,
      double clipRange, byte[] graphSeed, Double dpClipNorm, Double dpNoiseMultiplier) {
    this.roundId = roundId;
    this.roster = roster.clone();
    this.threshold = threshold;
    this.neighbours = neighbours;
    this.dimension = dimension;
    this.clipRange = clipRange;
    this.graphSeed = graphSeed.clone();
    this.dpClipNorm = dpClipNorm;
    this.dpNoiseMultiplier = dpNoiseMultiplier;
    int n = roster.length;
    long[] sorted = roster.clone();
    Arrays.sort(sorted);
    boolean distinct = true;
    for (int i = 1; i < n; i++) {
      distinct &= sorted[i] != sorted[i - 1];
    }
    if (n < 2 || n > MAX_CLIENTS || !distinct || !Arrays.equals(sorted, roster)) {
      throw new SecAggException("roster must be 2.." + MAX_CLIENTS
          + " distinct sorted client ids");
    }
    if (roster[0] < 0 || roster[n - 1] > MAX_ID || roundId < 0 || roundId > MAX_ID) {
      throw new SecAggException("client ids and round_id must be in [0, " + MAX_ID + "]");
    }
    if (neighbours < n - 1 && (neighbours < 2 || neighbours % 2 != 0)) {
      throw new SecAggException("neighbours = " + neighbours + ": even and >= 2, or >= "
          + (n - 1));
    }
    int holders = holdersPerClient();
    if (!(holders < 2 * threshold && threshold <= holders)) {
      throw new SecAggException("threshold = " + threshold + ": must be in (" + holders
          + " / 2, " + holders + "]");
    }
    if (dimension < 1 || !(clipRange > 0 && clipRange < Double.POSITIVE_INFINITY)) {
      throw new SecAggException("dimension must be >= 1 and clip_range in (0, inf)");
    }
    if ((dpClipNorm != null || dpNoiseMultiplier != null)
        && !(inRange(dpClipNorm, MAX_DP_CLIP_NORM)
            && inRange(dpNoiseMultiplier, MAX_DP_NOISE_MULTIPLIER))) {
      throw new SecAggException(BAD_DP); // never sent unclipped or unnoised on a bad setup
    }
  }

  /** A DP number a run config allows: in (0, max]. */
  private static boolean inRange(Double value, double max) {
    return value != null && value > 0 && value <= max;
  }

  /** K: a device and its neighbours. */
  public int holdersPerClient() {
    return Math.min(neighbours, roster.length - 1) + 1;
  }

  /** The setup under a task's {@code secagg} key (numbers parsed as doubles). */
  public static RoundSetup fromTask(Map<String, Object> data) {
    try {
      List<?> ids = (List<?>) data.get("roster");
      long[] roster = new long[ids.size()];
      for (int i = 0; i < roster.length; i++) {
        roster[i] = whole(ids.get(i));
      }
      return new RoundSetup(whole(data.get("round_id")), roster,
          count(data.get("threshold")), count(data.get("neighbours")),
          count(data.get("dimension")), ((Number) data.get("clip_range")).doubleValue(),
          Base64.getDecoder().decode((String) data.get("graph_seed")),
          dpNumber(data.get("dp_clip_norm")), dpNumber(data.get("dp_noise_multiplier")));
    } catch (ClassCastException | NullPointerException | IllegalArgumentException e) {
      if (e instanceof SecAggException) {
        throw e;
      }
      throw new SecAggException("a malformed secagg setup in the task: " + e.getMessage());
    }
  }

  /** A JSON integer (ids, counts): 3.0 and 3e0 are not, as Python's setup_from_wire reads. */
  public static long whole(Object value) {
    Long n = Json.integer(value, Long.MIN_VALUE, Long.MAX_VALUE);
    if (n == null) {
      throw new SecAggException(value + " is not an integer");
    }
    return n;
  }

  /** A whole number an int holds (a cast would wrap 2^32 + 3 to 3). */
  private static int count(Object value) {
    long n = whole(value);
    if (n < 0 || n > Integer.MAX_VALUE) {
      throw new SecAggException(value + " is not a count in [0, " + Integer.MAX_VALUE + "]");
    }
    return (int) n;
  }

  /** DP's C or z: absent or JSON null is null (no DP); anything but a number is refused. */
  private static Double dpNumber(Object value) {
    if (value == null || value == Json.NULL) {
      return null;
    }
    if (!Json.isNumber(value)) {
      throw new SecAggException(BAD_DP);
    }
    return ((Number) value).doubleValue();
  }
}
