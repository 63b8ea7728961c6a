"""A torch.distributed process group (gloo on the CPU, NCCL on GPUs) and the collectives this floor uses.

The group is built from a rendezvous URL (`file://`, `tcp://host:port`, `env://`: torch's own `rendezvous`)
straight into a `ProcessGroupGloo`/`ProcessGroupNCCL` object, never into torch's default group: the rank-0
process is ComfyUI, whose other nodes may use torch.distributed themselves, and a failed run must be able to
drop its group and build a new one. Control messages (the agreed stop before each block, the call inputs
handed to workers) always travel on a gloo group beside the data group.

A rank that fails leaves the group by ending its process (a worker) or by closing the group (rank 0): its
peers' next collective then raises at once on gloo ("Connection closed by peer"); on NCCL the group's
timeout bounds the wait.
"""

from __future__ import annotations

import datetime
import io
import pickle
import time
from dataclasses import dataclass, field
from typing import Callable

import torch
import torch.distributed as dist

BACKENDS = ("gloo", "nccl")
POLL_S = 0.02  # how often a polled wait (`RankGroup.any_rank`'s poll) looks up from its collective


@dataclass
class LinkClock:
    """Seconds and bytes spent in all-to-alls, per call (filled only when a group is built with `timed=True`)."""

    seconds: list[float] = field(default_factory=list)
    bytes: list[int] = field(default_factory=list)

    def total_seconds(self) -> float:
        return float(sum(self.seconds))


class RankGroup:
    """One rank's view of the group: its rank, the world size, and the collectives on flat tensors."""

    def __init__(self, data, control, rank: int, world: int, device: torch.device, timed: bool = False):
        self.data, self.control = data, control
        self.rank, self.world, self.device = rank, world, device
        self.clock = LinkClock() if timed else None

    def _sync(self, t: torch.Tensor) -> None:
        if t.is_cuda:
            torch.cuda.synchronize(t.device)

    def all_to_all(self, out: torch.Tensor, inp: torch.Tensor, out_splits: list[int], in_splits: list[int]) -> None:
        """`inp` (1-D) cut into `in_splits` pieces, piece j to rank j; rank i's piece lands in `out` (1-D) at
        `out_splits` offsets."""
        start = None
        if self.clock is not None:
            self._sync(inp)
            start = time.perf_counter()
        self.data.alltoall_base(out, inp, list(out_splits), list(in_splits), dist.AllToAllOptions()).wait()
        if start is not None:
            self._sync(out)
            self.clock.seconds.append(time.perf_counter() - start)
            self.clock.bytes.append(int(inp.numel() * inp.element_size()))

    def all_gather(self, t: torch.Tensor) -> list[torch.Tensor]:
        """Every rank's `t` (same shape on every rank), in rank order."""
        t = t.contiguous()
        outs = [torch.empty_like(t) for _ in range(self.world)]
        self.data.allgather([outs], [t]).wait()
        return outs

    def any_rank(self, flag: bool, poll: Callable[[], None] | None = None) -> bool:
        """True on every rank when `flag` is True on any rank (one small all-reduce on the control group).

        poll: called every `POLL_S` while the peers have not answered (a rank waiting for its peers to load a
        model, say); it may raise to stop waiting (rank 0's Cancel), after which the caller ends the group."""
        t = torch.tensor([1 if flag else 0], dtype=torch.int32)
        opts = dist.AllreduceOptions()
        opts.reduceOp = dist.ReduceOp.MAX
        work = self.control.allreduce([t], opts)
        while poll is not None and not work.is_completed():
            poll()
            time.sleep(POLL_S)
        work.wait()
        return bool(t.item())

    def broadcast_object(self, obj=None, root: int = 0):
        """`obj` pickled on `root`, returned on every rank (tensors inside travel as CPU copies)."""
        if self.rank == root:
            buf = io.BytesIO()
            pickle.dump(obj, buf, protocol=pickle.HIGHEST_PROTOCOL)
            payload = torch.frombuffer(bytearray(buf.getvalue()), dtype=torch.uint8)
            size = torch.tensor([payload.numel()], dtype=torch.int64)
        else:
            size = torch.zeros(1, dtype=torch.int64)
        opts = dist.BroadcastOptions()
        opts.rootRank = root
        self.control.broadcast([size], opts).wait()
        if self.rank != root:
            payload = torch.empty(int(size.item()), dtype=torch.uint8)
        self.control.broadcast([payload], opts).wait()
        if self.rank == root:
            return obj
        return pickle.loads(payload.numpy().tobytes())  # noqa: S301 - our own ranks, one job


@dataclass(frozen=True)
class Rendezvous:
    """Where the ranks meet: a torch rendezvous URL, the world size, the backend and the group timeout."""

    init_method: str
    world: int
    backend: str = "gloo"
    timeout_s: float = 300.0
    prefix: str = "longmedia"

    def __post_init__(self) -> None:
        if self.backend not in BACKENDS:
            raise ValueError(f"backend must be one of {BACKENDS}, got {self.backend!r}")
        if self.world < 1:
            raise ValueError(f"world must be >= 1, got {self.world}")
        if not self.init_method.startswith(("file://", "tcp://", "env://")):
            raise ValueError(f"init_method must be file://, tcp:// or env://, got {self.init_method!r}")


def open_group(rdv: Rendezvous, rank: int, device: torch.device | str = "cpu", timed: bool = False) -> RankGroup:
    """Join the rendezvous as `rank` (for env://, -1 reads RANK from the environment) and build the groups."""
    timeout = datetime.timedelta(seconds=rdv.timeout_s)
    if rdv.init_method.startswith("env://") and rank < 0:
        store, rank, world = next(dist.rendezvous(rdv.init_method, timeout=timeout))
    else:
        store, rank, world = next(dist.rendezvous(rdv.init_method, rank, rdv.world, timeout=timeout))
    if world != rdv.world:
        raise ValueError(f"the rendezvous reports {world} ranks, the run expects {rdv.world}")
    control = dist.ProcessGroupGloo(dist.PrefixStore(f"{rdv.prefix}/control", store), rank, world, timeout)
    device = torch.device(device)
    if rdv.backend == "nccl":
        torch.cuda.set_device(device)
        options = dist.ProcessGroupNCCL.Options()
        options._timeout = timeout
        data = dist.ProcessGroupNCCL(dist.PrefixStore(f"{rdv.prefix}/data", store), rank, world, options)
    else:
        data = dist.ProcessGroupGloo(dist.PrefixStore(f"{rdv.prefix}/data", store), rank, world, timeout)
    return RankGroup(data, control, rank, world, device, timed=timed)


def measure_link_gbps(group: RankGroup, megabytes: int = 64, repeats: int = 3) -> float:
    """GB/s one rank's all-to-all moves on this group (the best of `repeats`; every rank must call it)."""
    n = max(group.world, megabytes * (1 << 20) // 4 // group.world * group.world)
    inp = torch.ones(n, dtype=torch.float32, device=group.device)
    out = torch.empty_like(inp)
    splits = [n // group.world] * group.world
    best = float("inf")
    for _ in range(repeats):
        if inp.is_cuda:
            torch.cuda.synchronize(inp.device)
        start = time.perf_counter()
        group.data.alltoall_base(out, inp, splits, splits, dist.AllToAllOptions()).wait()
        if inp.is_cuda:
            torch.cuda.synchronize(inp.device)
        best = min(best, time.perf_counter() - start)
    sent = n * 4 * (group.world - 1) / group.world
    return sent / max(best, 1e-9) / 1e9
