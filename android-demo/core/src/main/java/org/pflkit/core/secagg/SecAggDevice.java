package org.pflkit.core.secagg;

import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashMap;
import java.util.HashSet;
import java.util.Map;
import java.util.Set;
import java.util.TreeMap;
import java.util.TreeSet;

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
  private Map<Long, byte[][]> agreed = new HashMap<>(); // peer -> {envelope key, mask seed}
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

  /**
   * The AES-256-GCM key and the pairwise mask seed this device and {@code peer} share (both ends
   * derive them alike); SecAggException naming the peer for a key that is malformed,
   * non-canonical or low-order.
   */
  private byte[][] agree(long peer, byte[][] keys) {
    try {
      if (keys == null || keys.length != 2) {
        throw new SecAggException("two keys expected");
      }
      return new byte[][] {
          SecAggCrypto.agree(cipherKey, keys[0], "share", setup.roundId, 32),
          SecAggCrypto.agree(maskKey, keys[1], "mask", setup.roundId, SecAggCrypto.SEED_BYTES)};
    } catch (SecAggException e) {
      throw new SecAggException("client " + id + ": client " + peer + "'s advertised key is not "
          + "a usable X25519 public key");
    }
  }

  /** Step 1: {cipher key, mask key}, raw public keys. */
  public byte[][] advertiseKeys() {
    check("advertise_keys");
    step++;
    return new byte[][] {cipherKey.publicBytes(), maskKey.publicBytes()};
  }

  /**
   * Step 2: shares of a fresh seed and of the mask key, sealed for each advertised neighbour.
   * Every peer key is checked (usable, canonical, distinct) before anything changes here.
   */
  public Map<Long, byte[]> shareKeys(Map<Long, byte[][]> keys) {
    check("share_keys");
    for (Long peer : keys.keySet()) {
      if (Arrays.binarySearch(neighbours, peer) < 0) {
        throw new SecAggException("client " + id + ": keys of " + peer + ", not a neighbour");
      }
    }
    Map<Long, byte[][]> agreedNow = new TreeMap<>();
    for (Map.Entry<Long, byte[][]> e : new TreeMap<>(keys).entrySet()) {
      agreedNow.put(e.getKey(), agree(e.getKey(), e.getValue()));
    }
    Set<String> seen = new HashSet<>();
    seen.add(Arrays.toString(cipherKey.publicBytes()));
    seen.add(Arrays.toString(maskKey.publicBytes()));
    for (Map.Entry<Long, byte[][]> e : keys.entrySet()) {
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
    agreed = agreedNow;
    seed = SecAggCrypto.random(SecAggCrypto.SEED_BYTES);
    long[] group = NeighbourGraph.holders(setup, id);
    byte[][] seedShares = Shamir.split(seed, setup.threshold, group.length);
    byte[][] keyShares = Shamir.split(maskKey.privateBytes(), setup.threshold, group.length);
    Map<Long, byte[]> sealed = new TreeMap<>();
    for (int x = 0; x < group.length; x++) {
      long peer = group[x];
      if (peer == id) {
        own = new byte[][] {seedShares[x], keyShares[x]};
      } else if (agreed.containsKey(peer)) {
        sealed.put(peer, SecAggCrypto.seal(agreed.get(peer)[0], setup.roundId, id, peer,
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
      if (!agreed.containsKey(peer)) {
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
      byte[] plain = SecAggCrypto.open(agreed.get(peer)[0], setup.roundId, peer, id,
          e.getValue());
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
      SecAggCrypto.addMask(total, agreed.get(peer)[1], id < peer ? +1 : -1);
    }
    ByteBuffer out = ByteBuffer.allocate(4 * total.length).order(ByteOrder.LITTLE_ENDIAN);
    out.asIntBuffer().put(total);
    return out.array();
  }

  /**
   * Step 4: {seed shares of survivors, mask-key shares of the dropped}, for a request an honest
   * server could have sent (see {@link #checkRequest}).
   */
  public Map<String, Map<Long, byte[]>> unmask(long[] survivors, long[] dropped) {
    check("unmask");
    checkRequest(survivors, dropped);
    step++;
    Map<Long, byte[][]> all = new HashMap<>(held);
    all.put(id, own);
    Map<String, Map<Long, byte[]>> out = new HashMap<>();
    out.put("seed_shares", pick(all, survivors, 0));
    out.put("key_shares", pick(all, dropped, 1));
    return out;
  }

  /**
   * SecAggException unless no peer is both survivor and dropped, every id is named once and
   * from the roster, and this device and at least t of its share holders are among the
   * survivors (an honest server fails the round otherwise). Counting repeats or strangers as
   * survivors would let a server that tells each device a different story collect one device's
   * seed and its neighbours' mask keys, and so unmask that device's update alone.
   */
  private void checkRequest(long[] survivors, long[] dropped) {
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
    Set<Long> named = new HashSet<>();
    Set<Long> odd = new TreeSet<>();
    for (long[] ids : new long[][] {survivors, dropped}) {
      for (long u : ids) {
        if (!named.add(u) || Arrays.binarySearch(setup.roster, u) < 0) {
          odd.add(u);
        }
      }
    }
    if (!odd.isEmpty()) {
      throw new SecAggException("client " + id + ": the unmask request names "
          + new ArrayList<>(odd).subList(0, Math.min(5, odd.size()))
          + " twice or from outside the roster: refused");
    }
    boolean listed = alive.contains(id);
    alive.retainAll(held.keySet());
    if (!listed || 1 + alive.size() < setup.threshold) {
      throw new SecAggException("client " + id + ": an unmask request that does not list it and "
          + "at least " + setup.threshold + " of its share holders among the survivors is "
          + "refused");
    }
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
