"""Train the clients of one round together: stacked parameters, one vmapped program per step.

Several clients that share an architecture run the same loop on different weights and data.
Here their weights are stacked along a new first dimension (K clients), the algorithm's own
per-client loss is vmapped over the stack, one backward gives every client's gradient (clients
do not interact), and one SGD call updates every client. Why the result equals training them
one by one, as :func:`pflkit.sdk.training.run_epochs` does (up to float rounding):

- Batch order: each client's rows come from its own generator, drawn exactly as
  :meth:`LabeledTensors.batches` draws them (one ``randperm`` per epoch, consecutive slices).
- Different sizes: client k takes T_k = E * ceil(n_k / B) steps. Clients are ordered by T_k,
  longest first, so at step t the clients still training are a prefix of the stack; the step
  updates that prefix in place and a finished client's weights, momentum and weight decay stop.
- Short batches: every batch is padded to B rows; real rows weigh 1/b (b = the batch's true
  size, smaller for an epoch's last batch) and padding rows 0, so :meth:`Batch.cross_entropy`
  is each client's mean over its own rows.
- SGD: torch's fused SGD kernel (the arithmetic of ``torch.optim.SGD``: d = g + wd w,
  buf = m buf + d, w -= lr buf). Buffers start at zero, and m * 0 + d = d is torch's first step.

Models whose training forward mixes rows of a batch or draws random numbers (batch norm,
dropout) cannot be padded or vmapped this way: :func:`batching_blocker` names them.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import torch
from torch import nn
from torch.func import vmap
from torch.nn.modules.batchnorm import _BatchNorm
from torch.nn.modules.dropout import _DropoutNd

from pflkit.sdk.conv_gemm import rewritten
from pflkit.sdk.data.tensors import LabeledTensors
from pflkit.sdk.phases import phase
from pflkit.sdk.step_capture import run_steps
from pflkit.sdk.switches import Switch
from pflkit.sdk.training import Batch, forward_autocast

Stacked = dict[str, torch.Tensor]  # name -> (K, ...) one slice per client
ClientLoss = Callable[[dict[str, torch.Tensor], Batch, dict[str, torch.Tensor]], torch.Tensor]
# training forward draws from torch's global generator (RReLU: a random slope per element)
RANDOM_DRAWS = (_DropoutNd, nn.RReLU)
ROW_DEPENDENT = (_BatchNorm, *RANDOM_DRAWS)  # training forward mixes rows or draws numbers
# the vmapped loss through torch.compile: inductor fuses the elementwise passes over the stacked
# weights that bound a batched step on the CPU (docs/benchmarks.md, "(b): why batched is not 2x")
COMPILED_LOSS = Switch("compile_loss")
compiled_loss = COMPILED_LOSS.turned
COMPILED_WIDTHS = 4  # step shapes a compiled loss is traced for, per count of clients
# torch's recompile limit (8) counts the shapes of every vmapped function of the process (one
# code object): FedRep's two programs at 5 shapes each (4 widths + the first step's layout)
# passed it in its first round, and every later step ran eagerly; raised while a loss compiles
COMPILED_SHAPES = 64


def compiled_width(active: int, count: int) -> int:
    """How many clients a compiled step computes: count, count/2, count/4 or count/8.

    The narrowest of these (rounded up) holding the ``active`` ones. Each step shape is one
    compile (seconds), and past torch's recompile limit (8) the loss runs eagerly: clients of
    different sizes leave up to ``count`` different active counts a round. Rounded up to these
    widths there are at most four shapes, for at most 2x the work of a step (or count/8
    clients more near a round's end; bench-scale's (a): 1.24x the client-steps); the finished
    clients computed only feed the loss: their results are dropped.
    """
    width = count
    for _ in range(COMPILED_WIDTHS - 1):
        half = -(-width // 2)
        if half < active:
            break
        width = half
    return width


def batching_blocker(model: nn.Module) -> str | None:
    """Why ``model`` cannot train batched (None: it can)."""
    for name, module in model.named_modules():
        # running statistics (InstanceNorm's too) are means over the batch's rows
        if isinstance(module, ROW_DEPENDENT) or getattr(module, "track_running_stats", False):
            return (f"layer '{name}' ({type(module).__name__}) depends on the whole batch or on "
                    "random draws in training")
    return None


@phase("stack")
def stack(states: Sequence[Mapping[str, torch.Tensor]]) -> Stacked:
    """Per-client tensors with the same names -> one (K, ...) tensor per name."""
    return {name: torch.stack([s[name].detach() for s in states]) for name in states[0]}


@phase("stack")
def repeat(state: Mapping[str, torch.Tensor], count: int) -> Stacked:
    """``count`` copies of one state (every client starts from the global weights)."""
    return {n: t.detach().unsqueeze(0).repeat(count, *(1,) * t.dim()) for n, t in state.items()}


@dataclass(frozen=True)
class BatchGrid:
    """Every client's mini-batches of one round on one padded (K, T, B) grid."""

    x: torch.Tensor  # (N, ...) the clients' rows, concatenated
    y: torch.Tensor  # (N,)
    rows: torch.Tensor  # (K, T, B) indices into x; padding repeats a real row of the client
    weight: torch.Tensor  # (K, T, B) 1/b on the b real rows of a batch, 0 on padding
    steps: tuple[int, ...]  # T_k: steps of client k this round

    @classmethod
    @phase("grid")
    def build(cls, datas: Sequence[LabeledTensors], epochs: int, batch_size: int,
              generators: Sequence[torch.Generator]) -> BatchGrid:
        """Draw each client's batch order from its generator, as sequential training does.

        One ``randperm`` per client and epoch (the draws); the grid is then laid out for every
        client at once (a per-client loop cost 1000 clients ~30 ms a round, issue 22).
        """
        sizes = [len(d) for d in datas]
        per_epoch = [-(-n // batch_size) for n in sizes]  # ceil(n / B) batches per epoch
        steps = tuple(epochs * s for s in per_epoch)
        count, width = len(datas), max(steps, default=0)
        n, s = torch.tensor(sizes, dtype=torch.long), torch.tensor(per_epoch, dtype=torch.long)
        first = n.cumsum(0) - n  # each client's first row in x
        drawn = [torch.randperm(size, generator=gen) for size, gen in
                 zip(sizes, generators, strict=True) for _ in range(epochs if size else 0)]
        # where each drawn row goes: client k, epoch e, position i -> (k * T + e * s_k) * B + i
        seg = n.repeat_interleave(epochs)  # (K * E,) rows per (client, epoch)
        base = (torch.arange(count).repeat_interleave(epochs) * width
                + torch.arange(epochs).repeat(count) * s.repeat_interleave(epochs)) * batch_size
        within = torch.arange(int(seg.sum())) - (seg.cumsum(0) - seg).repeat_interleave(seg)
        t = torch.arange(width)
        live = t < torch.tensor(steps, dtype=torch.long).view(-1, 1)  # (K, T)
        # padding repeats the client's first row
        rows = torch.where(live, first.view(-1, 1), 0).unsqueeze(2).repeat(1, 1, batch_size)
        if drawn:
            rows.view(-1)[base.repeat_interleave(seg) + within] = \
                torch.cat(drawn) + first.repeat_interleave(n * epochs)
        # position in the epoch's order: the b-th row of the epoch's (t mod s_k)-th batch
        at = (t % s.clamp_min(1).view(-1, 1)).unsqueeze(2) * batch_size + torch.arange(batch_size)
        last = (n - (s - 1) * batch_size).view(-1, 1, 1)  # rows in an epoch's last batch
        full = n.view(-1, 1, 1) - last  # rows in the epoch's full batches
        share = torch.where(at < full, 1.0 / batch_size,
                            torch.where(at < full + last, 1.0 / last.double(), 0.0))
        weight = torch.where(live.unsqueeze(2), share, 0.0).to(torch.float32)  # (K, T, B)
        x = torch.cat([d.x for d in datas])
        device = x.device
        return cls(x, torch.cat([d.y for d in datas]), rows.to(device), weight.to(device), steps)

    def joined(self, other: BatchGrid) -> BatchGrid:
        """One grid of these clients, then ``other``'s; both grids built from the same datas.

        Two loops of a client that do not depend on each other (Ditto's w and v) then run as
        one program of 2K clients: half the steps of running them one after the other.
        """
        width = max(self.rows.shape[1], other.rows.shape[1])

        def wide(t: torch.Tensor) -> torch.Tensor:  # (K, T, B) -> (K, width, B), zeros after
            return torch.nn.functional.pad(t, (0, 0, 0, width - t.shape[1]))

        return BatchGrid(self.x, self.y, torch.cat([wide(self.rows), wide(other.rows)]),
                         torch.cat([wide(self.weight), wide(other.weight)]),
                         self.steps + other.steps)

    def repeated(self, times: int) -> BatchGrid:
        """Each step's batch ``times`` times in a row (pFedMe's inner steps on one batch)."""
        return BatchGrid(self.x, self.y, self.rows.repeat_interleave(times, 1),
                         self.weight.repeat_interleave(times, 1),
                         tuple(times * s for s in self.steps))


def _sgd(weights: list[torch.Tensor], grads: list[torch.Tensor], buffers: list[torch.Tensor],
         lr: float, momentum: float, weight_decay: float) -> None:
    """torch.optim.SGD's fused kernel on the active clients' rows, in place.

    Called directly (torch.optim's wrapper regroups the tensors by device on every call). The
    kernel reads raw memory and ignores strides, so each gradient is first brought to its
    weight's layout (vmapped linear layers return transposed weight gradients; the stack
    adopts that layout after the first step, see :func:`_adopt_layout`).
    """
    grads = [g if g.stride() == w.stride() else torch.empty_like(w).copy_(g)
             for w, g in zip(weights, grads, strict=True)]
    torch._fused_sgd_(weights, grads, buffers if momentum else [], weight_decay=weight_decay,
                      momentum=momentum, lr=lr, dampening=0.0, nesterov=False, maximize=False,
                      is_first_step=False)


def _adopt_layout(stack: torch.Tensor, grad: torch.Tensor) -> torch.Tensor:
    """``stack`` (K, ...) re-laid out like ``grad`` (a, ...) row by row, when that is possible.

    Weights and gradients in one layout spare a copy per tensor per step.
    """
    first = grad[0]
    dense = torch.empty_like(first).stride() == first.stride()  # empty_like keeps dense layouts
    if not (dense and grad.stride()[0] == first.numel()) or grad.stride() == stack.stride():
        return stack
    return torch.empty_strided(stack.shape, grad.stride(), dtype=stack.dtype,
                               device=stack.device).copy_(stack)


@dataclass(frozen=True)
class PlainSGD:
    """Stacked parameters trained beside the main ones by plain gradient steps, w -= lr g.

    No momentum or weight decay, their own ``lr``, and each step's result clamped to
    ``bounds`` when given: APFL's mixing weight alpha in [0, 1] (Deng et al. 2020, Alg. 1).
    """

    params: Stacked
    lr: float
    bounds: tuple[float, float] | None = None


def train_together(loss_fn: ClientLoss, params: Stacked, grid: BatchGrid, lr: float,
                   momentum: float, weight_decay: float,
                   client_inputs: Mapping[str, torch.Tensor] | None = None,
                   step_inputs: Mapping[str, torch.Tensor] | None = None,
                   plain: PlainSGD | None = None) -> tuple[Stacked, torch.Tensor]:
    """Minimize every client's ``loss_fn`` over its batches of ``grid``.

    ``loss_fn(params, batch, inputs)`` is ONE client's loss (vmapped here); ``params`` holds
    the client's slice of ``params`` and of ``plain.params``; ``inputs`` holds its slice of
    ``client_inputs`` (K, ...) and, for the current step, of ``step_inputs`` (K, T, ...).
    Returns the trained (K, ...) parameters (both groups) and each client's mean batch loss
    (K,) float64 (NaN for a client without data), both in the clients' order.
    """
    count = len(grid.steps)
    order = sorted(range(count), key=lambda k: -grid.steps[k])  # longest first: active = prefix
    perm = torch.tensor(order, device=grid.rows.device)
    names = list(params)
    weights = [params[n].index_select(0, perm) for n in names]
    buffers = [torch.zeros_like(w) for w in weights]
    plain = plain or PlainSGD({}, 0.0)
    plain_names = list(plain.params)
    plain_weights = [plain.params[n].index_select(0, perm) for n in plain_names]
    per_client = {n: t.index_select(0, perm) for n, t in (client_inputs or {}).items()}
    per_step = {n: t.index_select(0, perm) for n, t in (step_inputs or {}).items()}
    rows, share = grid.rows.index_select(0, perm), grid.weight.index_select(0, perm)
    steps = [grid.steps[k] for k in order]
    totals = torch.zeros(count, dtype=torch.float64, device=grid.rows.device)
    ones = torch.ones(count, device=grid.rows.device)  # d(sum of the losses)/d(each loss)

    def client_loss(p: dict[str, torch.Tensor], x: torch.Tensor, y: torch.Tensor,
                    w: torch.Tensor, inputs: dict[str, torch.Tensor]) -> torch.Tensor:
        return loss_fn(p, Batch(x, y, w), inputs)

    losses_of = vmap(client_loss)
    if COMPILED_LOSS.on:  # compiled once per process and shape; later rounds reuse the code
        losses_of = torch.compile(losses_of, dynamic=False)  # static: the fast CPU kernels
    autocast = forward_autocast(grid.x.device)  # bf16 forward passes, as run_epochs has
    now = torch.zeros(1, dtype=torch.long, device=rows.device)  # the step, read on the device
    laid_out = False

    def step(active: int) -> None:
        """Step ``now`` of the first ``active`` clients; no host sync (it may be captured)."""
        nonlocal weights, buffers, laid_out
        span = compiled_width(active, count) if COMPILED_LOSS.on else active
        index = rows[:span].index_select(1, now).squeeze(1)  # (span, B)
        leaves = [w[:span].detach().requires_grad_() for w in weights + plain_weights]
        inputs = {n: v[:span] for n, v in per_client.items()}
        inputs |= {n: v[:span].index_select(1, now).squeeze(1) for n, v in per_step.items()}
        with autocast, rewritten():
            losses = losses_of(dict(zip(names + plain_names, leaves, strict=True)),
                               grid.x[index], grid.y[index],
                               share[:span].index_select(1, now).squeeze(1), inputs)
        # a parameter the loss does not reach has no gradient: torch's SGD skips it, as here
        grads = torch.autograd.grad(losses, leaves, ones[:span].to(losses.dtype),
                                    allow_unused=True)
        grads = [None if g is None else g[:active] for g in grads]  # finished clients stay
        grads, plain_grads, losses = grads[:len(names)], grads[len(names):], losses[:active]
        used = [k for k, g in enumerate(grads) if g is not None]
        with torch.no_grad():
            for w, g in zip(plain_weights, plain_grads, strict=True):
                if g is not None:
                    w[:active].sub_(plain.lr * g)
                    if plain.bounds:
                        w[:active].clamp_(*plain.bounds)
            if not laid_out:
                weights = [w if g is None else _adopt_layout(w, g)
                           for w, g in zip(weights, grads, strict=True)]
                buffers = [torch.zeros_like(w) for w in weights]
                laid_out = True
            totals[:active].add_(losses.detach())  # in place: ``+=`` on a slice copies back
            _sgd([weights[k][:active] for k in used], [grads[k] for k in used],
                 [buffers[k][:active] for k in used], lr, momentum, weight_decay)
            now.add_(1)

    # clients are sorted: at step t the active ones are those with more than t steps
    actives = [sum(s > t for s in steps) for t in range(max(steps, default=0))]
    with phase("steps"), (torch._dynamo.config.patch(recompile_limit=COMPILED_SHAPES)
                          if COMPILED_LOSS.on else contextlib.nullcontext()):
        run_steps(step, actives, rows.device)
    back = torch.empty_like(perm)
    back[perm] = torch.arange(count, device=perm.device)
    counts = torch.tensor(steps, dtype=torch.float64, device=totals.device)
    means = torch.where(counts > 0, totals / counts.clamp_min(1), torch.nan)
    trained = {n: w.index_select(0, back).contiguous()
               for n, w in zip(names + plain_names, weights + plain_weights, strict=True)}
    return trained, means.index_select(0, back)
