"""The ranks of a sequence-parallel run: rank 0 is the ComfyUI process, every other rank a worker process.

Lifetime: the workers live for one Sampler run (one pass). `SPRanks.start` spawns one worker per extra device
(torch.multiprocessing, spawn), forms the group (file:// rendezvous in a temporary folder, or the env://
rendezvous of a multi-host launch whose other ranks were started on their hosts with
`python -m longmedia.comfy.sp.worker_entry`), sends each worker what to load and how to run, waits until every rank
holds its model, and measures the link. Each worker loads the same checkpoint through ComfyUI's own loader (the
patcher's `cached_patcher_init`, which ComfyUI's loaders register and its own multi-GPU clones use) onto its
device, takes the same weight patches (LoRAs), installs the same sequence-parallel blocks, and then runs one
`BaseModel.apply_model` per model call rank 0 makes, with the inputs rank 0 hands it (`call`).
`close` ends them: an exit message, a bounded join, then a kill of any still alive; no process outlives a run.

Cancel while they start (issue 49): rank 0 waits for its spawned workers' imports (torch, ComfyUI: seconds) and
for every worker's model load in waits that poll `cancel` (ComfyUI's interrupt check), so a Cancel there ends the
run within a poll, its workers killed, instead of after the whole start (5 to 10 s on CPU for the tiny model).

Cancel and failures on rank 0: ComfyUI's own ops raise its interrupt wherever rank 0 is (inside a block too,
while the workers wait in a collective), so a run that ends by an exception terminates its workers rather than
messaging them. Failure: a worker that raises reports its error on a queue and exits; its peers' next collective raises at
once (gloo; on NCCL the group timeout bounds the wait), and rank 0 turns that into `LongMediaWorkerError`
naming the rank, its device, its exit code and its last words, after ending every worker. Where
rank 0 sees the interrupt before a block, the ranks agree to stop there (`sp.block`).
"""

from __future__ import annotations

import dataclasses
import os
import pickle
import queue
import runpy
import shutil
import sys
import tempfile
import time
import traceback
import uuid
from pathlib import Path
from typing import Callable

import torch

from ...execution.chunks import ChunkSizes
from ...parallel.group import POLL_S, RankGroup, Rendezvous, measure_link_gbps, open_group

# transformer_options entries that are rank 0's own machinery (each rank installs its own), never sent
LOCAL_OPTION_KEYS = ("patches", "patches_replace", "wrappers", "callbacks", "optimized_attention_override")
JOIN_S = 10.0
START_TIMEOUT_S = 600.0


class LongMediaWorkerError(RuntimeError):
    """A sequence-parallel worker failed or vanished: the prompt fails with this, and no worker is left running."""


def worker_start(loader: tuple, patches: dict, chunks: ChunkSizes, query_chunk: int, link_megabytes: int = 16) -> dict:
    """What rank 0 tells every worker once, as plain values (a worker imports the pack under another name, so no
    class of the pack crosses the boundary): how to load the model (the patcher's cached_patcher_init: ComfyUI's
    loader function and its arguments), its weight patches (LoRAs), and how to run the blocks."""
    return {"loader": loader, "patches": patches, "chunks": dataclasses.asdict(chunks), "query_chunk": query_chunk,
            "link_megabytes": link_megabytes}


def _pack_origin() -> tuple[str | None, str | None]:
    """(the package name ComfyUI imported the pack under, its folder) where the pack is not a top-level package."""
    marker = ".longmedia.comfy."
    if marker not in __name__:
        return None, None
    name = __name__.split(marker)[0]
    root = str(Path(os.path.abspath(__file__)).parents[3])  # this file: <pack>/longmedia/comfy/sp/ranks.py
    return name, root


def to_device(obj, device):
    """Tensors in `obj` (nested lists, tuples, dicts; ComfyUI's NestedTensor) moved to `device`."""
    if isinstance(obj, torch.Tensor) or type(obj).__name__ == "NestedTensor":
        return obj.to(device)
    if isinstance(obj, (list, tuple)):
        return type(obj)(to_device(v, device) for v in obj)
    if isinstance(obj, dict):
        return {k: to_device(v, device) for k, v in obj.items()}
    return obj


def call_options(transformer_options: dict) -> dict:
    """The entries of a call's transformer_options a worker needs: plain values, not rank 0's machinery."""
    out = {}
    for key, value in transformer_options.items():
        if key in LOCAL_OPTION_KEYS:
            continue
        try:
            pickle.dumps(value)
        except (pickle.PicklingError, TypeError, AttributeError):  # named: unpicklable entries stay on rank 0
            continue
        out[key] = to_device(value, "cpu")
    return out


class SPRanks:
    """Rank 0's handle on its workers and the group (one per run)."""

    def __init__(self, devices: tuple[torch.device, ...], backend: str, init_method: str | None = None,
                 timeout_s: float = START_TIMEOUT_S, timed: bool = False, cancel: Callable[[], None] | None = None):
        """cancel: called while rank 0 waits for the workers to start; it raises to stop the start (ComfyUI's
        interrupt on rank 0), and the caller then `close`s the ranks."""
        self.devices, self.backend, self.timed = devices, backend, timed
        self.cancel = cancel
        self.timeout_s = timeout_s
        self.init_method = init_method
        self.procs: list = []
        self.group: RankGroup | None = None
        self.errors = None
        self.link_gbps: float | None = None
        self._tmp: str | None = None

    @property
    def world(self) -> int:
        return len(self.devices)

    def start(self, patcher, chunks: ChunkSizes, query_chunk: int = 0) -> "SPRanks":
        import torch.multiprocessing as mp

        loader = getattr(patcher, "cached_patcher_init", None)
        if loader is None:
            from ...errors import LongMediaInputError

            raise LongMediaInputError("model", "a model from a loader without cached_patcher_init",
                                      "a model loaded by a ComfyUI core loader (UNETLoader, CheckpointLoaderSimple)",
                                      "Sequence-parallel workers load the same checkpoint through ComfyUI's loader; "
                                      "load the model with a core loader.")
        ctx = mp.get_context("spawn")
        self.errors = ctx.Queue()
        init = self.init_method
        if init is None:
            self._tmp = tempfile.mkdtemp(prefix="longmedia_sp_")
            init = f"file://{os.path.join(self._tmp, 'rendezvous')}"
        rdv = Rendezvous(init, self.world, self.backend, self.timeout_s)
        if self.init_method is None:
            name, root = _pack_origin()
            bootstrap = os.path.join(os.path.dirname(os.path.abspath(__file__)), "bootstrap.py")
            for rank in range(1, self.world):
                plain = (rank, rdv.init_method, rdv.world, rdv.backend, rdv.timeout_s, str(self.devices[rank]),
                         self.errors)
                spec = {"WORKER_MODULE": __name__, "PACK_NAME": name, "PACK_ROOT": root, "WORKER_ARGS": plain}
                p = ctx.Process(target=runpy.run_path, args=(bootstrap, spec, "__longmedia_sp_worker__"),
                                name=f"longmedia-sp-rank{rank}", daemon=True)
                p.start()
                self.procs.append(p)
            self._await_ready()
        try:
            self.group = open_group(rdv, 0, self.devices[0], timed=self.timed)
            self.group.broadcast_object(worker_start(loader, dict(getattr(patcher, "patches", {}) or {}),
                                                     chunks, query_chunk))
            self.group.any_rank(False, poll=self.cancel)  # every rank holds its model (a load may take minutes)
            self.link_gbps = measure_link_gbps(self.group, 16)
        except RuntimeError as error:  # named: a collective failing because a worker died or never came
            raise self.failure(error) from error
        return self

    def _await_ready(self) -> None:
        """Wait until every spawned worker has imported the pack and ComfyUI and is about to join the group (the
        wait polls `cancel`); a worker that ends first (it could not import, say) fails the run here instead of
        leaving rank 0 at the rendezvous."""
        ready, deadline, words = set(), time.monotonic() + self.timeout_s, []
        while len(ready) < len(self.procs):
            if self.cancel is not None:
                self.cancel()
            try:
                kind, value = self.errors.get(timeout=POLL_S)
                if kind == "ready":
                    ready.add(value)
                else:
                    words.append(value)
            except queue.Empty:
                pass
            if self.dead() or words or time.monotonic() > deadline:
                for text in words:
                    self.errors.put(("error", text))
                raise self.failure(RuntimeError("a worker ended before joining the group" if self.dead() or words
                                                else f"the workers did not start within {self.timeout_s:g} s"))

    def call(self, args: tuple, kwargs: dict, transformer_options: dict) -> None:
        """Hand every worker this model call's inputs (rank 0 then runs the same call itself)."""
        try:
            self.group.broadcast_object(("call", to_device(args, "cpu"), to_device(kwargs, "cpu"),
                                         call_options(transformer_options)))
        except RuntimeError as error:  # named: the control group failing because a worker died
            raise self.failure(error) from error

    def link_line(self, blocks: int, calls: int) -> str | None:
        """Rank 0's all-to-all time per block (when the group was built timed), for the run's notes."""
        clock = self.group.clock if self.group is not None else None
        if clock is None or not clock.seconds or blocks * calls == 0:
            return None
        per_block = clock.total_seconds() / (blocks * calls)
        return (f"all-to-all on rank 0: {len(clock.seconds)} calls, {clock.total_seconds():.3f} s in all, "
                f"{per_block * 1e3:.2f} ms per block ({sum(clock.bytes) / 1e9:.2f} GB sent and kept); "
                "timed with a device sync around each call")

    def dead(self) -> list:
        return [p for p in self.procs if p.exitcode is not None and p.exitcode != 0]

    def settled_failure(self, error: BaseException, wait_s: float = 3.0) -> bool:
        """Whether `error` came from a rank leaving: a worker has ended (waited for up to `wait_s`, as the
        collective can report the closed connection before the process is reaped), or the backend says so."""
        import time

        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline and not self.dead():
            for p in self.procs:
                p.join(0.1)
        text = str(error)
        return bool(self.dead()) or "Connection closed by peer" in text or "NCCL" in text

    def failure(self, error: BaseException) -> LongMediaWorkerError:
        """The run's clear error: which worker ended and how (every worker is ended first)."""
        self.kill()
        words = []
        deadline = time.monotonic() + 1.0  # a queue's feeder thread may still be delivering the last words
        while self.errors is not None and time.monotonic() < deadline:
            try:
                kind, value = self.errors.get(timeout=0.1)
            except (queue.Empty, OSError, ValueError):  # named: nothing more queued, or the queue is gone
                if words:
                    break
                continue
            if kind == "error":
                words.append(value)
        ended = [f"rank {i + 1} ({self.devices[i + 1]}) " + (f"killed by signal {-p.exitcode}" if p.exitcode < 0
                                                              else f"exited with code {p.exitcode}")
                 for i, p in enumerate(self.procs) if p.exitcode not in (None, 0)]
        what = "; ".join(ended) or "a rank left the group"
        detail = ("\n" + "\n".join(words)) if words else ""
        return LongMediaWorkerError(f"sequence-parallel worker failed ({what}); the prompt is stopped and every "
                                    f"worker ended. The collective reported: {error}{detail}")

    def kill(self) -> None:
        for p in self.procs:
            if p.is_alive():
                p.kill()
        for p in self.procs:
            p.join(JOIN_S)

    def close(self, clean: bool = True) -> None:
        """End the workers and drop the group; safe to call twice.

        clean: the run ended between model calls (every rank waits for rank 0's next message), so an exit message
        ends the workers. Otherwise (an exception, ComfyUI's Cancel: ComfyUI's own ops raise its interrupt on rank 0
        wherever it is, possibly inside a block while the workers wait in a collective) they are terminated."""
        if clean and self.group is not None and all(p.is_alive() for p in self.procs):
            try:
                self.group.broadcast_object(("exit",))
            except RuntimeError:  # named: the group is already broken; the kill below ends the workers
                pass
            for p in self.procs:
                p.join(JOIN_S)
        for p in self.procs:
            if p.is_alive():
                p.terminate()
        self.kill()
        self.group = None
        if self.errors is not None:
            self.errors.close()
            self.errors.join_thread()
            self.errors = None
        if self._tmp is not None:
            shutil.rmtree(self._tmp, ignore_errors=True)
            self._tmp = None


def worker_main(rank: int, init_method: str, world: int, backend: str, timeout_s: float, device: str,
                messages) -> None:
    """A worker's life: join, load, then run every model call rank 0 hands over until told to exit. `messages`:
    rank 0's queue for ("ready", rank) and ("error", last words); None for a worker started by hand."""
    try:
        _import_comfy(torch.device(device))  # the slow part of a start, before "ready": rank 0 polls that wait
        if messages is not None:
            messages.put(("ready", rank))
        _serve(rank, Rendezvous(init_method, world, backend, timeout_s), torch.device(device))
    except BaseException as error:  # noqa: BLE001 - the worker's last words, for rank 0's error; then it exits
        words = f"rank {rank} ({device}): {type(error).__name__}: {error}\n{traceback.format_exc(limit=8)}"
        if messages is not None:
            messages.put(("error", words))
            messages.close()
            messages.join_thread()
        else:  # a worker started by hand (sp.worker_entry): its own stderr
            print(words, file=sys.stderr, flush=True)
        os._exit(1)


def _import_comfy(device: torch.device) -> None:
    """ComfyUI imported in this worker with its settings for `device` (ComfyUI on the CPU, as rank 0, for a CPU
    rank), and the module of ComfyUI's loaders (`comfy.sd`), which the start message names."""
    if device.type == "cuda":
        torch.cuda.set_device(device)
    import comfy.cli_args

    if device.type == "cpu":
        comfy.cli_args.args.cpu = True  # this worker process's own settings: ComfyUI on the CPU, as rank 0
    import comfy.model_management  # noqa: F401 - imported once, with the settings above
    import comfy.sd  # noqa: F401 - the loaders' module: the start message's loader unpickles without an import


def _serve(rank: int, rdv: Rendezvous, device: torch.device) -> None:
    import comfy.model_management as mm  # imported with this rank's settings already (`_import_comfy`)
    import comfy.model_patcher

    from ..patching.attention_override import existing_attention_fn
    from .block import RanksStopped, install_sp_blocks

    group = open_group(rdv, rank, device)
    start: dict = group.broadcast_object()
    loader = start["loader"]
    loaded = loader[0](*loader[1])
    patcher = (loaded[loader[2]] if len(loader) > 2 else loaded).clone()
    if start["patches"]:
        patcher.patches = {k: list(v) for k, v in start["patches"].items()}
        patcher.patches_uuid = uuid.uuid4()
    opts = comfy.model_patcher.create_model_options_clone(patcher.model_options)
    opts.setdefault("transformer_options", {})
    blocks = patcher.model.diffusion_model.blocks
    opts = install_sp_blocks(opts, blocks, group, ChunkSizes(**start["chunks"]), existing_attention_fn,
                             lambda: False, lambda: None, query_chunk=start["query_chunk"])
    mm.load_models_gpu([patcher])
    group.any_rank(False)  # ready
    measure_link_gbps(group, start["link_megabytes"])
    while True:
        message = group.broadcast_object()
        if message[0] == "exit":
            return
        _, args, kwargs, call_topts = message
        topts = {**opts["transformer_options"], **to_device(call_topts, device)}
        args, kwargs = to_device(args, device), to_device(kwargs, device)
        try:
            with torch.inference_mode():
                patcher.model.apply_model(*args, transformer_options=topts, **kwargs)
        except RanksStopped:
            continue
