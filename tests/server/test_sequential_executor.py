"""The sequential executor on a device: a round's results cross to the host together (issue 22).

Moved after each fit, every client cost host synchronizations (its loss, each tensor of its
update) that left the GPU idle while the next client was prepared.
"""

from dataclasses import replace

import torch
from device_runs import device_config
from fake_cuda import FakeCuda, _caller, on_device

from pflkit.server.simulator import Simulation

T = torch.Tensor


class CountingCuda(FakeCuda):
    """The fake device, also recording each device-to-host copy (a host synchronization)."""

    def __init__(self) -> None:
        super().__init__()
        self.copies: list[str] = []

    def __torch_function__(self, func, types, args=(), kwargs=None):  # noqa: ANN001
        kwargs = kwargs or {}
        targets = [*args[1:], kwargs.get("device")]
        to_host = func is T.cpu or (func is T.to and any(
            isinstance(d, str | torch.device) and torch.device(d).type == "cpu" for d in targets))
        if (to_host and on_device(args[0])) or \
                (func is T.copy_ and on_device(args[1]) and not on_device(args[0])):
            self.copies.append(f"{getattr(func, '__name__', func)} at {_caller()}")
        return super().__torch_function__(func, types, args, kwargs)


def config(device, clients):
    cfg = device_config("fedavg", "", device)
    return replace(cfg, training=replace(cfg.training, clients_per_round=clients))


def test_a_sequential_round_reads_the_device_a_fixed_number_of_times_whatever_the_clients(
        tmp_path):
    reads, rows = {}, {}
    for clients in (2, 4):
        want = Simulation(config("cpu", clients), tmp_path / f"cpu{clients}", progress=False)
        want_row = want.run_round()
        with CountingCuda() as fake:
            sim = Simulation(config("cuda", clients), tmp_path / f"cuda{clients}",
                             progress=False)
            fake.syncs.clear(), fake.copies.clear()
            rows[clients] = sim.run_round()
        reads[clients] = fake.syncs + fake.copies
        names = sim.coordinator.global_state.keys()
        assert all(torch.equal(sim.coordinator.global_state[k], want.coordinator.global_state[k])
                   for k in names)
        assert rows[clients]["train_loss"] == want_row["train_loss"]
    # however many clients: per tensor name one copy of the updates and one of the sum the
    # GPU fold made, one check for NaN/Inf, one read of the round's losses
    assert len(reads[4]) == len(reads[2]) <= 2 * len(names) + 2, reads
