package org.pflkit.core.secagg;

import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.util.Arrays;
import java.util.HashMap;
import java.util.HashSet;
import java.util.Map;
import java.util.Set;
import java.util.TreeMap;

/**
 * One device in one SecAgg round: Python's {@code pflkit.sdk.secagg.client.SecAggClient} step
 * for step (advertise keys, share keys, masked input, unmask), each once and in order.
 */
public final class SecAggDevice {
  private static final String[] STEPS = {"advertise_keys", "share_keys", "masked_input",
      "unmask", "done"};
  private static final int SHARE_PAIR = 2 * Shamir.SHARE_BYTES; // seed share || key share

  private final long id;
  private final RoundSetup setup;
  private final long[] neighbours;
  private final X25519 cipherKey = X25519.generate();
  private final X25519 maskKey = X25519.generate();
  private int step;
  private Map<Long, byte[][]> directory = new HashMap<>();
  private byte[][] own = new byte[0][];
  private byte[] seed = new byte[0];
  private Map<Long, byte[][]> held = new HashMap<>();

  public SecAggDevice(long id, RoundSetup setup) {
    if (Arrays.binarySearch(setup.roster, id) < 0) {
      throw new SecAggException("client " + id + " is not in round " + setup.roundId
          + "'s roster");
    }
    this.id = id;
    this.setup = setup;
    this.neighbours = NeighbourGraph.neighbours(setup, id);
  }

  private void check(String name) {
    if (!STEPS[step].equals(name)) {
      throw new SecAggException("client " + id + ": " + name + " now is out of order (next is "
          + STEPS[step] + "): refused as a replay");
    }
  }

  private byte[] envelopeKey(long peer) {
    return SecAggCrypto.agree(cipherKey, directory.get(peer)[0], "share", setup.roundId, 32);
  }

  /** Step 1: {cipher key, mask key}, raw public keys. */
  public byte[][] advertiseKeys() {
    check("advertise_keys");
    step++;
    return new byte[][] {cipherKey.publicBytes(), maskKey.publicBytes()};
  }

  /** Step 2: shares of a fresh seed and of the mask key, sealed for each advertised neighbour. */
  public Map<Long, byte[]> shareKeys(Map<Long, byte[][]> keys) {
    check("share_keys");
    Set<String> seen = new HashSet<>();
    seen.add(Arrays.toString(cipherKey.publicBytes()));
    seen.add(Arrays.toString(maskKey.publicBytes()));
    for (Map.Entry<Long, byte[][]> e : keys.entrySet()) {
      if (Arrays.binarySearch(neighbours, e.getKey()) < 0) {
        throw new SecAggException("client " + id + ": keys of " + e.getKey()
            + ", not a neighbour");
      }
      for (byte[] k : e.getValue()) {
        if (!seen.add(Arrays.toString(k))) {
          throw new SecAggException("client " + id + ": the key directory reuses a public key");
        }
      }
    }
    if (keys.size() + 1 < setup.threshold) {
      throw new SecAggException("client " + id + ": " + keys.size() + " neighbours advertised "
          + "keys, fewer than threshold " + setup.threshold + " - 1");
    }
    step++;
    directory = new HashMap<>(keys);
    seed = SecAggCrypto.random(SecAggCrypto.SEED_BYTES);
    long[] group = NeighbourGraph.holders(setup, id);
    byte[][] seedShares = Shamir.split(seed, setup.threshold, group.length);
    byte[][] keyShares = Shamir.split(maskKey.privateBytes(), setup.threshold, group.length);
    Map<Long, byte[]> sealed = new TreeMap<>();
    for (int x = 0; x < group.length; x++) {
      long peer = group[x];
      if (peer == id) {
        own = new byte[][] {seedShares[x], keyShares[x]};
      } else if (directory.containsKey(peer)) {
        sealed.put(peer, SecAggCrypto.seal(envelopeKey(peer), setup.roundId, id, peer,
            X25519.concat(seedShares[x], keyShares[x])));
      }
    }
    return sealed;
  }

  /** Step 3: open the shares addressed here, then mask the quantized update (little-endian). */
  public byte[] maskedInput(Map<Long, byte[]> shares, double[] update) {
    if (update.length != setup.dimension) {
      throw new IllegalArgumentException("update must have " + setup.dimension + " values");
    }
    check("masked_input");
    for (Long peer : shares.keySet()) {
      if (!directory.containsKey(peer)) {
        throw new SecAggException("client " + id + ": shares from " + peer
            + ", who advertised no keys to it");
      }
    }
    if (shares.size() + 1 < setup.threshold) {
      throw new SecAggException("client " + id + ": shares from " + shares.size()
          + " peers, fewer than threshold " + setup.threshold + " - 1: not masking");
    }
    Map<Long, byte[][]> opened = new TreeMap<>();
    for (Map.Entry<Long, byte[]> e : shares.entrySet()) {
      long peer = e.getKey();
      byte[] plain = SecAggCrypto.open(envelopeKey(peer), setup.roundId, peer, id, e.getValue());
      if (plain.length != SHARE_PAIR) {
        throw new SecAggException("client " + id + ": a malformed share from client " + peer);
      }
      opened.put(peer, new byte[][] {Arrays.copyOf(plain, Shamir.SHARE_BYTES),
          Arrays.copyOfRange(plain, Shamir.SHARE_BYTES, SHARE_PAIR)});
    }
    step++;
    held = opened;
    int[] total = Quantizer.quantize(update, setup.clipRange, setup.roster.length);
    SecAggCrypto.addMask(total, seed, +1);
    for (long peer : opened.keySet()) {
      byte[] pairwise = SecAggCrypto.agree(maskKey, directory.get(peer)[1], "mask",
          setup.roundId, SecAggCrypto.SEED_BYTES);
      SecAggCrypto.addMask(total, pairwise, id < peer ? +1 : -1);
    }
    ByteBuffer out = ByteBuffer.allocate(4 * total.length).order(ByteOrder.LITTLE_ENDIAN);
    out.asIntBuffer().put(total);
    return out.array();
  }

  /**
   * Step 4: {seed shares of survivors, mask-key shares of the dropped}; a request naming a
   * device as both would unmask its update and is refused.
   */
  public Map<String, Map<Long, byte[]>> unmask(long[] survivors, long[] dropped) {
    check("unmask");
    Set<Long> alive = new HashSet<>();
    for (long u : survivors) {
      alive.add(u);
    }
    for (long u : dropped) {
      if (alive.contains(u)) {
        throw new SecAggException("client " + id + ": the request names " + u + " as both "
            + "survivor and dropped, which would unmask an individual update");
      }
    }
    if (!alive.contains(id) || survivors.length < setup.threshold) {
      throw new SecAggException("client " + id + ": an unmask request that does not list it "
          + "among at least " + setup.threshold + " survivors is refused");
    }
    step++;
    Map<Long, byte[][]> all = new HashMap<>(held);
    all.put(id, own);
    Map<String, Map<Long, byte[]>> out = new HashMap<>();
    out.put("seed_shares", pick(all, survivors, 0));
    out.put("key_shares", pick(all, dropped, 1));
    return out;
  }

  private static Map<Long, byte[]> pick(Map<Long, byte[][]> all, long[] ids, int which) {
    Map<Long, byte[]> out = new TreeMap<>();
    for (long u : ids) {
      if (all.containsKey(u)) {
        out.put(u, all.get(u)[which]);
      }
    }
    return out;
  }
}
