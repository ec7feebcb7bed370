"""The device's copy of a run's global state: downloaded once per hash, checked before use.

``global.safetensors`` in the state folder holds the newest one (its hash in ``cache.json``);
a stale or damaged copy is downloaded again. What the server sends is checked before anything
trains on it: its hash, the run's model layout, and finite values. A NaN or Inf global state is
the server's fault, not the device's: it is refused in one line naming it, so nothing is
trained on it, uploaded or committed (a fit from it would only look like local divergence).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from pathlib import Path

from pflkit.sdk.algorithms.base import State
from pflkit.sdk.device_files import CACHE, DeviceFiles
from pflkit.sdk.divergence import non_finite_tensor
from pflkit.sdk.tensorio import CorruptStateError, atomic_write_bytes, read_state_file

FILE = "global.safetensors"
Layout = dict[str, tuple[int, ...]]


class GlobalStates:
    """Global states by hash: cached in one file, fetched with ``download`` when it changes."""

    def __init__(self, state_dir: Path, files: DeviceFiles,
                 download: Callable[[str], bytes]) -> None:
        self.path = Path(state_dir) / FILE
        self.files = files
        self.download = download

    def get(self, digest: str) -> State:
        """The global state with this hash: cached, else downloaded and verified.

        Read from the file in about its size of memory: the downloaded bytes are written and
        dropped first, and the tensors are read from the very bytes that were hashed.
        """
        if self.path.is_file():
            try:
                return read_state_file(self.path, sha256=digest)[0]
            except CorruptStateError:
                pass  # stale or damaged: download it
        data = self.download(digest)
        if hashlib.sha256(data).hexdigest() != digest:
            raise CorruptStateError(f"downloaded global state does not hash to {digest}")
        atomic_write_bytes(self.path, data)
        del data  # not held beside the tensors
        self.files.write_json(CACHE, {**self.files.read_json(CACHE), "global_hash": digest})
        try:
            return read_state_file(self.path, sha256=digest)[0]
        except CorruptStateError as err:
            raise CorruptStateError(f"global state {digest}: {err}") from None

    def of_model(self, digest: str, layout: Layout) -> State:
        """The global state ``digest``, refused in one line unless in ``layout`` and finite."""
        state = self.get(digest)
        if (got := {k: tuple(v.shape) for k, v in state.items()}) != layout:
            name = min(set(got.items()) ^ set(layout.items()))[0]  # missing, unknown, reshaped
            raise ValueError(f"global state {digest}: not the run's model (tensor {name} is "
                             f"{got.get(name, 'missing')}, the model's {layout.get(name, 'none')})")
        if (name := non_finite_tensor(state)) is not None:
            raise ValueError(f"global state {digest}: the server's global state holds NaN or "
                             f"Inf (tensor {name}); nothing is trained on it or uploaded and "
                             "the device keeps its state: the run's operator must act")
        return state
