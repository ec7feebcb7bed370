package org.pflkit.core.secagg;

import static org.junit.Assert.assertEquals;
import static org.junit.Assert.assertThrows;

import java.util.Arrays;
import java.util.LinkedHashMap;
import java.util.Map;
import java.util.TreeMap;
import java.util.function.Function;
import org.junit.Test;

/**
 * What only a lying server sends, refused by the device before anything leaves it (Python's
 * SecAggClient refusals, docs/privacy.md "Whom it protects against"): unmask requests padded
 * to reach t survivors, peer keys that are unusable or another spelling of a key, and setups
 * with ids outside [0, 2^31 - 1]. After a refusal the device still answers an honest message:
 * nothing in it changed.
 */
public class SecAggLyingRequestsTest {
  /** Six devices, each with 2 neighbours (SecAgg+): K = 3 hold each secret, t = 2. */
  private static final long[] ROSTER = {2, 5, 9, 11, 14, 20};

  private static RoundSetup sparse() {
    return new RoundSetup(4, ROSTER, 2, 2, 5, 1.0, new byte[32], null, null);
  }

  private static RoundSetup complete() {
    return new RoundSetup(4, new long[] {2, 5, 9, 11}, 3, 3, 5, 1.0, new byte[32], null, null);
  }

  /** Every device of {@code setup} after its masked input. */
  private static Map<Long, SecAggDevice> masked(RoundSetup setup) {
    Map<Long, SecAggDevice> devices = new TreeMap<>();
    Map<Long, byte[][]> keys = new TreeMap<>();
    for (long id : setup.roster) {
      devices.put(id, new SecAggDevice(id, setup));
      keys.put(id, devices.get(id).advertiseKeys());
    }
    Map<Long, Map<Long, byte[]>> inbox = new TreeMap<>();
    devices.forEach((id, d) -> d.shareKeys(neighbourKeys(setup, id, keys)).forEach((to, blob) ->
        inbox.computeIfAbsent(to, k -> new TreeMap<>()).put(id, blob)));
    devices.forEach((id, d) -> d.maskedInput(inbox.get(id), new double[setup.dimension]));
    return devices;
  }

  private static Map<Long, byte[][]> neighbourKeys(RoundSetup setup, long id,
      Map<Long, byte[][]> keys) {
    Map<Long, byte[][]> out = new TreeMap<>();
    for (long peer : NeighbourGraph.neighbours(setup, id)) {
      out.put(peer, keys.get(peer));
    }
    return out;
  }

  private static long[] without(long[] ids, long... left) {
    return Arrays.stream(ids).filter(u -> Arrays.stream(left).noneMatch(v -> v == u)).toArray();
  }

  private static void refused(String expected, Runnable call) {
    assertEquals(expected, assertThrows(SecAggException.class, call::run).getMessage());
  }

  @Test
  public void anUnmaskRequestPaddedWithTheDeviceItselfOrStrangersIsRefused() {
    RoundSetup setup = complete();
    SecAggDevice device = masked(setup).get(2L);
    long[] others = without(setup.roster, 2);
    // each device told "the victim (5) and you survived, the others dropped", padded up to t:
    // its seed share of 5 and its mask-key shares of 5's peers are what unmasks 5 alone
    refused("client 2: the unmask request names [2] twice or from outside the roster: refused",
        () -> device.unmask(new long[] {2, 5, 2}, without(others, 5)));
    refused("client 2: the unmask request names [900] twice or from outside the roster: "
        + "refused", () -> device.unmask(new long[] {2, 5, 900}, without(others, 5)));
    refused("client 2: the unmask request names [9] twice or from outside the roster: refused",
        () -> device.unmask(new long[] {2, 5, 11}, new long[] {9, 9}));
    assertEquals(3, device.unmask(new long[] {2, 5, 9}, new long[] {11})
        .get("seed_shares").size());
  }

  @Test
  public void fewerThanTOfItsOwnShareHoldersAmongTheSurvivorsIsRefused() {
    RoundSetup setup = sparse();
    Map<Long, SecAggDevice> devices = masked(setup);
    long id = 2;
    long[] holders = NeighbourGraph.neighbours(setup, id);
    long[] strangers = without(setup.roster, id, holders[0], holders[1]);
    SecAggDevice device = devices.get(id);
    // three survivors of the roster (>= t), but only the device among its own share holders:
    // its answer would be mask-key shares of both its neighbours
    long[] survivors = {id, strangers[0], strangers[1]};
    Arrays.sort(survivors);
    refused("client 2: an unmask request that does not list it and at least 2 of its share "
        + "holders among the survivors is refused",
        () -> device.unmask(survivors, without(setup.roster, survivors)));
    long[] honest = {id, holders[0], strangers[0]};
    Arrays.sort(honest);
    Map<String, Map<Long, byte[]>> answer = device.unmask(honest, without(setup.roster, honest));
    assertEquals("its own and its surviving neighbour's seed shares", 2,
        answer.get("seed_shares").size());
    assertEquals("its dropped neighbour's key share", 1, answer.get("key_shares").size());
  }

  private static byte[] topBit(byte[] raw) {
    byte[] out = raw.clone();
    out[31] |= (byte) 0x80;
    return out;
  }

  @Test
  public void anUnusableOrRespeltPeerKeyIsRefusedNamingThePeerBeforeAnythingChanges() {
    RoundSetup setup = complete();
    byte[] order4 = new byte[32];
    order4[0] = 1;
    byte[] pPlus18 = new byte[32];
    Arrays.fill(pPlus18, (byte) 0xff);
    pPlus18[31] = 0x7f;
    Map<String, Function<Map<Long, byte[][]>, byte[]>> bad = new LinkedHashMap<>();
    bad.put("zero", keys -> new byte[32]);
    bad.put("order-4 point", keys -> order4);
    bad.put("p + 18", keys -> pPlus18);
    bad.put("another peer's key, top bit set", keys -> topBit(keys.get(9L)[1]));
    bad.put("short", keys -> new byte[31]);
    for (Map.Entry<String, Function<Map<Long, byte[][]>, byte[]>> e : bad.entrySet()) {
      for (int which = 0; which < 2; which++) {
        SecAggDevice device = new SecAggDevice(2, setup);
        device.advertiseKeys();
        Map<Long, byte[][]> honest = new TreeMap<>();
        for (long peer : new long[] {5, 9, 11}) {
          honest.put(peer, new SecAggDevice(peer, setup).advertiseKeys());
        }
        Map<Long, byte[][]> lie = new TreeMap<>(honest);
        byte[][] pair = honest.get(5L).clone();
        pair[which] = e.getValue().apply(honest);
        lie.put(5L, pair);
        String what = e.getKey() + (which == 0 ? " cipher key" : " mask key");
        assertEquals(what, "client 2: client 5's advertised key is not a usable X25519 public "
            + "key", assertThrows(what, SecAggException.class, () -> device.shareKeys(lie))
            .getMessage());
        assertEquals(what + ": still at share_keys", 3, device.shareKeys(honest).size());
      }
    }
  }

  @Test
  public void idsAndTheRoundOutsideThirtyOneBitsAreRefused() {
    long top = Integer.MAX_VALUE;
    String range = "client ids and round_id must be in [0, 2147483647]";
    refused(range, () -> new RoundSetup(top + 1, ROSTER, 2, 2, 5, 1.0, new byte[32], null,
        null));
    refused(range, () -> new RoundSetup(4, new long[] {2, 5, top + 1}, 2, 2, 5, 1.0,
        new byte[32], null, null));
    refused(range, () -> new RoundSetup(4, new long[] {-1, 5, 9}, 2, 2, 5, 1.0, new byte[32],
        null, null));
    assertEquals(top, new RoundSetup(top, new long[] {0, top}, 2, 1, 5, 1.0, new byte[32], null,
        null).roster[1]);
    Map<String, Object> task = new LinkedHashMap<>();  // as Json.parse reads integers: Long
    task.put("round_id", 4L);
    task.put("roster", Arrays.asList(2L, 5L, 9L));
    task.put("threshold", (1L << 32) + 2);  // an int cast would read 2
    task.put("neighbours", 2L);
    task.put("dimension", 5L);
    task.put("clip_range", 1.0);
    task.put("graph_seed", "AAAA");
    refused("4294967298 is not a count in [0, 2147483647]", () -> RoundSetup.fromTask(task));
    task.put("threshold", 2L);
    task.put("round_id", 1L << 31);
    refused(range, () -> RoundSetup.fromTask(task));
    task.put("round_id", 4.0);  // Python's setup_from_wire: an integer, not 4.0
    refused("4.0 is not an integer", () -> RoundSetup.fromTask(task));
  }
}
