package org.pflkit.core.secagg;

import static org.junit.Assert.assertEquals;
import static org.junit.Assert.assertThrows;
import static org.junit.Assert.assertTrue;

import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.util.HashMap;
import java.util.Map;
import java.util.TreeMap;
import org.junit.Test;

/**
 * Java devices among themselves: the pairwise masks cancel and the seed shares rebuild the
 * self-masks, so a full round's sum is the sum of the quantized updates; and the state machine
 * refuses replays and requests that would unmask one device.
 */
public class SecAggDeviceTest {
  private static final long[] ROSTER = {2, 5, 9, 11};

  private static RoundSetup setup() {
    return new RoundSetup(4, ROSTER, 3, 3, 6, 1.0, new byte[32], null, null);
  }

  private static Map<Long, SecAggDevice> devices(RoundSetup setup) {
    Map<Long, SecAggDevice> out = new TreeMap<>();
    for (long id : setup.roster) {
      out.put(id, new SecAggDevice(id, setup));
    }
    return out;
  }

  @Test
  public void aFullRoundSumsTheQuantizedUpdates() {
    RoundSetup setup = setup();
    Map<Long, SecAggDevice> devices = devices(setup);
    Map<Long, byte[][]> keys = new TreeMap<>();
    devices.forEach((id, d) -> keys.put(id, d.advertiseKeys()));
    Map<Long, Map<Long, byte[]>> inbox = new TreeMap<>(); // receiver -> sender -> envelope
    devices.forEach((id, d) -> {
      Map<Long, byte[][]> others = new TreeMap<>(keys);
      others.remove(id);
      d.shareKeys(others).forEach((to, blob) ->
          inbox.computeIfAbsent(to, k -> new TreeMap<>()).put(id, blob));
    });
    int[] sum = new int[setup.dimension];
    int[] expected = new int[setup.dimension];
    for (Map.Entry<Long, SecAggDevice> e : devices.entrySet()) {
      double[] update = new double[setup.dimension];
      for (int i = 0; i < update.length; i++) {
        update[i] = 0.1 * i - 0.01 * e.getKey();
      }
      int[] plain = Quantizer.quantize(update, setup.clipRange, ROSTER.length);
      int[] masked = words(e.getValue().maskedInput(inbox.get(e.getKey()), update));
      for (int i = 0; i < sum.length; i++) {
        sum[i] += masked[i];
        expected[i] += plain[i];
        assertTrue("masked", masked[i] != plain[i]);
      }
    }
    Map<Long, Map<Integer, byte[]>> seedShares = new HashMap<>(); // owner -> x -> share
    for (Map.Entry<Long, SecAggDevice> e : devices.entrySet()) {
      Map<Long, byte[]> shares = e.getValue().unmask(ROSTER, new long[0]).get("seed_shares");
      for (Map.Entry<Long, byte[]> s : shares.entrySet()) {
        int x = indexOf(NeighbourGraph.holders(setup, s.getKey()), e.getKey()) + 1;
        seedShares.computeIfAbsent(s.getKey(), k -> new TreeMap<>()).put(x, s.getValue());
      }
    }
    for (long owner : ROSTER) {
      SecAggCrypto.addMask(sum, Shamir.combine(seedShares.get(owner),
          SecAggCrypto.SEED_BYTES), -1);
    }
    for (int i = 0; i < sum.length; i++) {
      assertEquals("coordinate " + i, expected[i], sum[i]);
    }
  }

  @Test
  public void repliesOutOfOrderAndUnmaskingOneDeviceAreRefused() {
    RoundSetup setup = setup();
    SecAggDevice device = new SecAggDevice(2, setup);
    assertThrows(SecAggException.class, () -> device.maskedInput(new TreeMap<>(),
        new double[setup.dimension]));
    device.advertiseKeys();
    assertThrows(SecAggException.class, device::advertiseKeys);
    Map<Long, byte[][]> notNeighbour = new TreeMap<>();
    notNeighbour.put(3L, new byte[][] {new byte[32], new byte[32]});
    assertThrows(SecAggException.class, () -> device.shareKeys(notNeighbour));
    Map<Long, byte[][]> reused = new TreeMap<>();
    byte[][] same = new byte[][] {
        X25519.generate().publicBytes(), X25519.generate().publicBytes()};
    reused.put(5L, same);
    reused.put(9L, same);
    assertThrows(SecAggException.class, () -> device.shareKeys(reused));
    Map<Long, byte[][]> one = new TreeMap<>();
    one.put(5L, same);
    assertThrows("fewer than t - 1 neighbours", SecAggException.class,
        () -> device.shareKeys(one));
    assertThrows(SecAggException.class, () -> new SecAggDevice(3, setup));
  }

  @Test
  public void anUnmaskRequestNamingADeviceAsSurvivorAndDroppedIsRefused() {
    RoundSetup setup = setup();
    Map<Long, SecAggDevice> devices = devices(setup);
    Map<Long, byte[][]> keys = new TreeMap<>();
    devices.forEach((id, d) -> keys.put(id, d.advertiseKeys()));
    Map<Long, Map<Long, byte[]>> inbox = new TreeMap<>();
    devices.forEach((id, d) -> {
      Map<Long, byte[][]> others = new TreeMap<>(keys);
      others.remove(id);
      d.shareKeys(others).forEach((to, blob) ->
          inbox.computeIfAbsent(to, k -> new TreeMap<>()).put(id, blob));
    });
    SecAggDevice device = devices.get(2L);
    device.maskedInput(inbox.get(2L), new double[setup.dimension]);
    assertThrows(SecAggException.class, () -> device.unmask(ROSTER, new long[] {9}));
    assertThrows("below t survivors", SecAggException.class,
        () -> device.unmask(new long[] {2, 5}, new long[] {9, 11}));
    Map<String, Map<Long, byte[]>> answer = device.unmask(new long[] {2, 5, 9},
        new long[] {11});
    assertEquals(3, answer.get("seed_shares").size());
    assertEquals(1, answer.get("key_shares").size());
    assertThrows("once", SecAggException.class, () -> device.unmask(ROSTER, new long[0]));
  }

  private static int[] words(byte[] raw) {
    int[] out = new int[raw.length / 4];
    ByteBuffer.wrap(raw).order(ByteOrder.LITTLE_ENDIAN).asIntBuffer().get(out);
    return out;
  }

  private static int indexOf(long[] ids, long id) {
    for (int i = 0; i < ids.length; i++) {
      if (ids[i] == id) {
        return i;
      }
    }
    throw new AssertionError(id + " is not a holder");
  }
}
