"""Compile (and, below sm90, autotune) the chosen attention kernels before the first sampling step.

Two kinds compile on first use: our Triton kernels and flash-attn-4 (CuTe DSL, `COMPILED_AT_PLANNED_SHAPE`).

Triton compiles a kernel once per process, device and specialisation: its constexpr arguments, and for integer
arguments whether each equals 1 or is divisible by 16 (pointers: 16-byte alignment). A Sol or exact-kernel call
over the plan's shapes (the first and the ragged last query chunk, each head-group size) therefore compiles every
variant the steps will launch. Heads change the variant only through that rule (the head count and strides that are
multiples of it), so the warm calls use the fewest heads with the same residue mod 16 and stay small: K/V of 8
heads (for 56) at 109k keys are 448 MB. Below
compute capability 9.0 Sol autotunes on its first call and keeps the pick per key (heads are not in the key), so
there the warm call uses the planned heads where free memory allows. Sol's tau is not a kernel argument at all
(routing runs in torch), so changing tau never recompiles. Compiled kernels go to Triton's on-disk cache
(~/.triton/cache, or TRITON_CACHE_DIR) and a later process loads instead of compiling; autotune picks are cached on
disk too where this Triton supports `cache_results` (kernels/sol_attention.py).

flash-attn-4 keys its compiled kernels on a config its heuristics pick from the call's heads, rows, keys and the
card (tile sizes, split-KV on Blackwell), so its warm calls run the planned shapes themselves: every head group at
the first and the last query chunk against all keys. Each costs one attention call at full length; without them
step 1 pays the compile (4.2-4.6 s over the steady step at full depth on an H100, docs/lab/2026-12-05-speed-goals.md).
Where those K/V would not leave half of the free memory, step 1 compiles it in the plan's own memory, and the note
says so.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import torch

from .registry import BackendRegistry, BuildContext

TRITON_BACKENDS = frozenset({"sol", "qstream_triton", "qstream_triton_int8"})
"""Our Triton backends: their kernels compile on their first shape and specialise as `specialisation_heads` says."""
COMPILED_AT_PLANNED_SHAPE = frozenset({"flash4"})
"""Backends that compile on their first call, for a config picked from the whole call shape: warmed at that shape.
(The SDPA kernels compile nothing: cuDNN builds its plan in the speed timing or the first model call.)"""
WARMED_BACKENDS = TRITON_BACKENDS | COMPILED_AT_PLANNED_SHAPE
AUTOTUNED_BELOW = (9, 0)
"""Sol autotunes below this compute capability (kernels/sol_attention.py); from it, one fixed config runs."""


@dataclass(frozen=True)
class Warmup:
    """What ran before the first step: the calls (backend, q_offset, rows, keys, heads) and the seconds they took."""

    seconds: float
    calls: tuple[tuple[str, int, int, int, int], ...]
    note: str = ""

    def lines(self) -> tuple[str, ...]:
        if not self.calls:
            return (f"kernel warm-up: none ({self.note})",) if self.note else ()
        shapes = "; ".join(f"{name} rows {a}:{a + rows} of {keys} keys x {heads} heads"
                           for name, a, rows, keys, heads in self.calls)
        line = f"kernel warm-up before the first step: {self.seconds:.2f} s ({shapes})"
        return (line + (f"; {self.note}" if self.note else ""),)


def specialisation_heads(heads: int) -> int:
    """The fewest heads Triton specialises like `heads`: the same residue mod 16 (so every stride that is a multiple
    of the head count, the routing mask's batch stride among them, is divisible by 16 exactly when the real one is),
    and 1 only where `heads` is 1. 56 heads warm as 8, 48 as 16, 17 as 17."""
    h = heads % 16 or 16
    return heads if h == 1 and heads != 1 else h


def query_calls(seq_len: int, query_chunk: int) -> tuple[tuple[int, int], ...]:
    """(q_offset, rows) of the executor's first and last query chunk (the middle ones specialise like the first)."""
    step = query_chunk if 0 < query_chunk < seq_len else seq_len
    last = ((seq_len - 1) // step) * step
    calls = [(0, min(step, seq_len))]
    if last > 0:
        calls.append((last, seq_len - last))
    return tuple(calls)


def head_groups(heads: int, group: int) -> tuple[int, ...]:
    """Distinct heads per call: the group size and a smaller last group (ultra_low_vram)."""
    g = group if 0 < group < heads else heads
    return tuple(sorted({g} | ({heads % g} if heads % g else set()), reverse=True))


def _views(rows: int, heads: int, head_dim: int, dtype: torch.dtype, device: torch.device, seed: int):
    """[1, heads, rows, head_dim] views of a [rows, heads * head_dim] buffer, as the executor's q, K and V."""
    g = torch.Generator(device=device).manual_seed(seed)
    buf = torch.randn(rows, heads * head_dim, generator=g, device=device, dtype=dtype)
    return buf.view(1, rows, heads, head_dim)[0].transpose(0, 1).unsqueeze(0)  # as streamed_block._query_rows


def warm_up(names: tuple[str, ...], registry: BackendRegistry, *, seq_len: int, query_chunk: int, heads: int,
            group: int, head_dim: int, dtype: torch.dtype, device: torch.device | str,
            capability: tuple[int, int] | None, free_bytes: int | None = None,
            sync: Callable[[], None] | None = None) -> Warmup:
    """Run each backend of `names` that compiles on first use once per planned call shape on random inputs; nothing
    is kept."""
    device = torch.device(device)
    wanted = tuple(n for n in dict.fromkeys(names) if n in WARMED_BACKENDS)
    if not wanted:
        return Warmup(0.0, (), "")
    if device.type != "cuda" and sync is None:
        return Warmup(0.0, (), "no CUDA device")
    sync = sync if sync is not None else (lambda: torch.cuda.synchronize(device))
    autotuned = capability is not None and tuple(capability) < AUTOTUNED_BELOW and "sol" in wanted
    notes: list[str] = []
    calls, start = [], time.perf_counter()
    try:
        _run(wanted, registry, calls, seq_len=seq_len, query_chunk=query_chunk, heads=heads, group=group,
             head_dim=head_dim, dtype=dtype, device=device, autotuned=autotuned, free_bytes=free_bytes, notes=notes)
    except torch.OutOfMemoryError as err:  # named: no room now; step 1 compiles what is left, in its planned memory
        notes.append(f"stopped for want of memory ({str(err).splitlines()[0][:120]}): step 1 compiles the rest")
    sync()
    return Warmup(time.perf_counter() - start, tuple(calls), "; ".join(notes))


def _run(wanted: tuple[str, ...], registry: BackendRegistry, calls: list, *, seq_len: int, query_chunk: int,
         heads: int, group: int, head_dim: int, dtype: torch.dtype, device: torch.device, autotuned: bool,
         free_bytes: int | None, notes: list[str]) -> None:
    """The warm calls of `warm_up`, each appended to `calls` once it ran."""
    for size in head_groups(heads, group):
        by_heads: dict[int, list[str]] = {}
        for name in wanted:
            h = _warm_heads(name, size, seq_len=seq_len, query_chunk=query_chunk, head_dim=head_dim, dtype=dtype,
                            autotuned=autotuned, free_bytes=free_bytes, notes=notes)
            if h is not None:
                by_heads.setdefault(h, []).append(name)
        for h, names in by_heads.items():
            k = _views(seq_len, h, head_dim, dtype, device, 1)
            v = _views(seq_len, h, head_dim, dtype, device, 2)
            for name in names:
                fn = registry.build(name, BuildContext(tau=1.0 if name == "sol" else None))
                for a, rows in query_calls(seq_len, query_chunk):
                    q = _views(rows, h, head_dim, dtype, device, 3)
                    fn(q, k, v, q_offset=a)
                    calls.append((name, a, rows, seq_len, h))
                    del q
            del k, v


def _warm_heads(name: str, size: int, *, seq_len: int, query_chunk: int, head_dim: int, dtype: torch.dtype,
                autotuned: bool, free_bytes: int | None, notes: list[str]) -> int | None:
    """The heads `name` warms on for a head group of `size`, or None where it cannot warm now (said in `notes`)."""
    if name in COMPILED_AT_PLANNED_SHAPE:
        rows = max(r for _, r in query_calls(seq_len, query_chunk))
        need = (2 * seq_len + 2 * rows) * size * head_dim * dtype.itemsize  # K, V, q and the output
        if free_bytes is not None and need >= free_bytes // 2:
            notes.append(f"{name} not warmed: its call at the planned shape needs {need / 2**30:.2f} GiB, more than "
                         f"half of {free_bytes / 2**30:.2f} GiB free; step 1 compiles it")
            return None
        return size
    if name == "sol" and autotuned:
        need = 2 * seq_len * size * head_dim * dtype.itemsize * 3
        if free_bytes is None or need < free_bytes // 2:
            return size
        notes.append(f"Sol autotunes on {specialisation_heads(size)} heads, not {size}: {need / 2**30:.2f} GiB would "
                     f"not leave half of {free_bytes / 2**30:.2f} GiB free")
    return specialisation_heads(size)
