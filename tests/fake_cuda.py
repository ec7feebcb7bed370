"""A CUDA device on the CPU, for testing device plumbing where CI has no GPU.

Inside :class:`FakeCuda`, ``torch.cuda.is_available()`` is True and every tensor sent to
``"cuda"`` (``.to``, ``.cuda()``, a factory's ``device=``) is a CPU copy marked as living on the
device; what is computed from a marked tensor is marked too, and a marked tensor says
``device(type='cuda', index=0)``. The rules real CUDA enforces then hold on the CPU:

- ``.numpy()`` / ``np.asarray`` of a device tensor raise the TypeError CUDA raises (the class
  histogram bug of issue 22 crashed at simulation start on an H100 this way);
- an op mixing a device tensor with a host tensor of one or more dimensions raises CUDA's
  "same device" RuntimeError (indexing with host indices is allowed, as on CUDA);
- ``.cpu()`` / ``.to("cpu")`` of a device tensor is an unmarked copy, as on CUDA, and so is a
  host tensor ``copy_`` from one (``pin_memory=True`` gives a plain host tensor here).

Host synchronizations of device tensors (``.item()``, ``.tolist()``, ``bool``/``float``/``int``,
``nonzero``/``masked_select``/``unique``; boolean-mask indexing is not seen) are allowed, as on
CUDA, and recorded in :attr:`FakeCuda.syncs` as "name at module:line" of the innermost pflkit
frame: the batched step's tests count them. Device-to-host copies (``.cpu()``, ``.to("cpu")``,
a host tensor's ``copy_`` from a device one) wait for the device too: they are recorded the
same way in :attr:`FakeCuda.downloads`.

``nn.Parameter(t)`` and a parameter's deepcopy are no torch calls: both are wrapped to keep
the mark. Functorch's vmap hands its function fresh batched tensors and returns fresh ones: every
``vmap`` a pflkit module imported is wrapped to carry the mark in and out. Not covered:
torch internals that call CUDA themselves once ``is_available()`` is True (torch.export's
lowering, so ``personalize_on = "executorch"``), whatever runs in other processes (Ray), and
CUDA graphs: under the fake no step segment is long enough to be captured
(:data:`pflkit.sdk.step_capture.MIN_SEGMENT` raised), so every batched step runs eagerly.
"""

from __future__ import annotations

import sys
from typing import Any

import torch
from torch import nn
from torch.overrides import TorchFunctionMode
from torch.utils._pytree import tree_flatten

MARK = "_pflkit_fake_cuda"
CUDA = torch.device("cuda", 0)
HOST = torch.device("cpu")
T = torch.Tensor
FORBIDDEN = {T.numpy, T.__array__}
SYNCS = {T.item, T.tolist, T.__bool__, T.__float__, T.__int__, T.__index__, T.nonzero,
         torch.nonzero, T.masked_select, torch.masked_select, torch.unique, T.unique}
DEVICE, IS_CUDA, SET_DATA = T.device.__get__, T.is_cuda.__get__, T.data.__set__  # compare with ==
MIXED_ALLOWED = {T.__getitem__, T.__setitem__, T.copy_, T.index_put_, SET_DATA,
                 torch._has_compatible_shallow_copy_type}


def on_device(t: object) -> bool:
    """Whether ``t`` is a tensor that lives on the fake device."""
    return isinstance(t, torch.Tensor) and getattr(t, MARK, False)


class _Stream:
    """``torch.cuda.current_stream()``: the fake device's work is done when it returns."""

    def synchronize(self) -> None:
        """Nothing to wait for."""


def _mark(value: Any) -> Any:
    for t in tree_flatten(value)[0]:
        if isinstance(t, torch.Tensor):
            setattr(t, MARK, True)
    return value


def _is_cuda(device: object) -> bool:
    if isinstance(device, torch.Tensor):
        return on_device(device)
    if isinstance(device, str | torch.device):
        try:
            return torch.device(device).type == "cuda"
        except RuntimeError:  # a dtype name or another argument
            return False
    return False


def _is_host(device: object) -> bool:
    if isinstance(device, torch.Tensor):
        return not on_device(device)
    return isinstance(device, str | torch.device) and torch.device(device).type == "cpu"


def _download(func, args: tuple, kwargs: dict) -> bool:  # noqa: ANN001 - a torch function
    """Whether ``func(*args, **kwargs)`` copies a tensor from the device to the host."""
    if not args:
        return False
    if func is T.copy_:  # into its first argument, from its second
        return not on_device(args[0]) and on_device(args[1])
    return on_device(args[0]) and (func is T.cpu or func is T.to and any(
        _is_host(d) for d in (*args[1:], kwargs.get("device"))))


def _caller() -> str:
    """module:line of the innermost pflkit frame on the stack (where a sync was asked for)."""
    frame = sys._getframe(1)
    while frame is not None and not frame.f_globals.get("__name__", "").startswith("pflkit"):
        frame = frame.f_back
    return "?" if frame is None else f"{frame.f_globals['__name__']}:{frame.f_lineno}"


def _marking(make):  # noqa: ANN001, ANN202 - wraps Parameter's constructor and deepcopy
    """``make(owner, source, ...)`` whose result is marked when ``source`` is (neither is a torch
    function, so the mode does not see them)."""
    def wrapped(owner, source=None, *args, **kwargs):  # noqa: ANN001, ANN202
        out = make(owner, source, *args, **kwargs)
        if on_device(source) or on_device(owner):
            setattr(out, MARK, True)
        return out
    return staticmethod(wrapped) if make is nn.Parameter.__new__ else wrapped


def _marking_vmap(fn, *options, **named):  # noqa: ANN001, ANN202 - torch.func.vmap's signature
    """``torch.func.vmap`` whose function sees, and whose caller gets, marked tensors."""
    state = {"marked": False}

    def inner(*args, **kwargs):  # noqa: ANN202
        if state["marked"]:
            _mark((args, kwargs))
        return fn(*args, **kwargs)

    batched = torch.func.vmap(inner, *options, **named)

    def call(*args, **kwargs):  # noqa: ANN202
        state["marked"] = any(on_device(t) for t in tree_flatten((args, kwargs))[0])
        out = batched(*args, **kwargs)
        return _mark(out) if state["marked"] else out

    return call


class FakeCuda(TorchFunctionMode):
    """Run the block as if this machine had one CUDA GPU (see the module docstring)."""

    def __init__(self) -> None:
        super().__init__()
        self.syncs: list[str] = []
        self.downloads: list[str] = []
        self._patched: list[tuple[Any, str, Any]] = []

    def __enter__(self) -> FakeCuda:
        users = [m for n, m in list(sys.modules.items())
                 if n.startswith("pflkit") and getattr(m, "vmap", None) is torch.func.vmap]
        from pflkit.sdk import step_capture
        for owner, name, value in ((torch.cuda, "is_available", lambda: True),
                                   (torch.cuda, "current_stream", lambda device=None: _Stream()),
                                   (step_capture, "MIN_SEGMENT", sys.maxsize),
                                   (torch.cuda, "device_count", lambda: 1),
                                   (nn.Parameter, "__new__", _marking(nn.Parameter.__new__)),
                                   (nn.Parameter, "__deepcopy__",
                                    _marking(nn.Parameter.__deepcopy__)),
                                   *((m, "vmap", _marking_vmap) for m in users)):
            self._patched.append((owner, name, getattr(owner, name)))
            setattr(owner, name, value)
        return super().__enter__()

    def __exit__(self, *exc: object) -> None:
        super().__exit__(*exc)
        for owner, name, value in reversed(self._patched):
            setattr(owner, name, value)
        self._patched.clear()

    def __torch_function__(self, func, types, args=(), kwargs=None):  # noqa: ANN001
        kwargs = kwargs or {}
        self_ = args[0] if args else None
        if func == DEVICE and on_device(self_):
            return CUDA
        if func == IS_CUDA and on_device(self_):
            return True
        if func in FORBIDDEN and on_device(self_):
            raise TypeError("can't convert cuda:0 device type tensor to numpy. Use Tensor.cpu() "
                            "to copy the tensor to host memory first.")
        if func in SYNCS and any(on_device(t) for t in tree_flatten((args, kwargs))[0]):
            self.syncs.append(f"{func.__name__} at {_caller()}")
        if _download(func, args, kwargs):
            self.downloads.append(f"{func.__name__} at {_caller()}")
        if func is T.cuda:
            return self._copy(func(self_), self_, True)
        if func is T.cpu:
            return self._copy(func(self_), self_, False)
        if func is T.to:
            targets = [*args[1:], kwargs.get("device")]
            if any(_is_cuda(d) for d in targets):
                to_host = [HOST if _is_cuda(a) else a for a in args[1:]]
                k = {**kwargs, "device": HOST} if "device" in kwargs else kwargs
                return self._copy(func(self_, *to_host, **k), self_, True)
            if any(_is_host(d) for d in targets):
                return self._copy(func(*args, **kwargs), self_, False)
        if kwargs.get("pin_memory"):  # page-locked host memory: a plain host tensor here
            kwargs = {**kwargs, "pin_memory": False}
        if func is T.copy_:  # the destination stays where it is (a host buffer: a download)
            out = func(*args, **kwargs)
            return _mark(out) if on_device(self_) else out
        if "device" in kwargs and _is_cuda(kwargs["device"]):
            return _mark(func(*args, **{**kwargs, "device": HOST}))
        tensors = [t for t in tree_flatten((args, kwargs))[0] if isinstance(t, torch.Tensor)]
        marked = [on_device(t) for t in tensors]
        if any(marked) and func not in MIXED_ALLOWED and not all(marked):
            host = [t for t, m in zip(tensors, marked, strict=True) if not m and t.dim() > 0]
            if host:
                raise RuntimeError(f"{getattr(func, '__name__', func)}: Expected all tensors "
                                   "to be on the same device, but found at least two devices, "
                                   "cuda:0 and cpu!")
        out = func(*args, **kwargs)
        if func == SET_DATA:  # param.data = value: the parameter moves where value is
            if on_device(args[1]):
                _mark(self_)
            elif on_device(self_):
                delattr(self_, MARK)
        elif any(marked):
            _mark(out)
        return out

    @staticmethod
    def _copy(out: torch.Tensor, source: torch.Tensor, device: bool) -> torch.Tensor:
        """A transfer's result: a new tensor (the CPU returns ``source`` itself), marked or not."""
        if device and on_device(source):
            return source  # already there: CUDA returns the tensor itself
        if out is source or (on_device(out) and not device):
            out = out.clone()
        if device:
            setattr(out, MARK, True)
        elif on_device(out):
            delattr(out, MARK)
        return out
