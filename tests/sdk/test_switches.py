"""The executor's on/off settings: off by default, on only inside the block that turns them."""

from pflkit.sdk.switches import Switch


def test_a_switch_is_on_only_within_its_block_and_nests():
    switch = Switch("example")
    assert not switch.on
    with switch.turned(True):
        assert switch.on
        with switch.turned(False):
            assert not switch.on
        assert switch.on
    assert not switch.on
