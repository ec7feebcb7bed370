package org.pflkit.core.secagg;

import java.nio.ByteBuffer;
import java.security.MessageDigest;
import java.security.NoSuchAlgorithmException;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;

/**
 * SecAgg+'s k-regular Harary graph as Python's {@code pflkit.sdk.secagg.graph} draws it: the
 * roster ordered by SHA-256(graph seed || id as 8 big-endian bytes), each device joined to the
 * k/2 on either side of it in that ring; k >= n - 1 is the complete graph.
 */
public final class NeighbourGraph {
  private NeighbourGraph() {}

  /** {@code id}'s neighbours, sorted (a device is not its own neighbour). */
  public static long[] neighbours(RoundSetup setup, long id) {
    long[] roster = setup.roster;
    int n = roster.length;
    List<Long> out = new ArrayList<>();
    if (setup.neighbours >= n - 1) {
      for (long c : roster) {
        if (c != id) {
          out.add(c);
        }
      }
    } else {
      Long[] ring = new Long[n];
      for (int i = 0; i < n; i++) {
        ring[i] = roster[i];
      }
      Arrays.sort(ring, (a, b) -> compare(digest(setup.graphSeed, a), digest(setup.graphSeed, b)));
      int p = Arrays.asList(ring).indexOf(id);
      int half = setup.neighbours / 2;
      for (int j = -half; j <= half; j++) {
        if (j != 0) {
          out.add(ring[Math.floorMod(p + j, n)]);
        }
      }
    }
    long[] sorted = new long[out.size()];
    for (int i = 0; i < sorted.length; i++) {
      sorted[i] = out.get(i);
    }
    Arrays.sort(sorted);
    return sorted;
  }

  /** Who holds shares of {@code owner}'s secrets, in x-coordinate order (x = index + 1). */
  public static long[] holders(RoundSetup setup, long owner) {
    long[] peers = neighbours(setup, owner);
    long[] all = Arrays.copyOf(peers, peers.length + 1);
    all[peers.length] = owner;
    Arrays.sort(all);
    return all;
  }

  private static byte[] digest(byte[] seed, long id) {
    try {
      MessageDigest sha = MessageDigest.getInstance("SHA-256");
      sha.update(seed);
      return sha.digest(ByteBuffer.allocate(8).putLong(id).array());
    } catch (NoSuchAlgorithmException e) {
      throw new IllegalStateException(e);
    }
  }

  private static int compare(byte[] a, byte[] b) {
    for (int i = 0; i < a.length; i++) {
      int d = (a[i] & 0xff) - (b[i] & 0xff);
      if (d != 0) {
        return d;
      }
    }
    return 0;
  }
}
