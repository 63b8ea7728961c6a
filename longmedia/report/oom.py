"""The OOM fact report: what memory looked like when a phase ran out, and the one thing to change next.

`phase(name, ...)` wraps an executor phase; a torch out-of-memory error inside it becomes a
`LongMediaOOM` (still a `torch.OutOfMemoryError`, so ComfyUI's own OOM handling applies) carrying an
`OOMReport`. Memory is read through an injectable reader, so tests need no GPU.
"""

from __future__ import annotations

import contextlib
from dataclasses import asdict, dataclass, field
from typing import Callable, Iterator

import torch

from ..execution.chunks import ChunkSizes
from ..planning.types import ExecutionPlan
from ..units import GIB, MIB
from .memory import MemorySnapshot, read_memory

PHASES = ("before_block_0", "qkv", "attention", "mlp", "final_output", "prefetch_transport", "job_latent",
          "latent_upscale")
_MIN_CHUNK = 512
# ComfyUI's launch flag with no offload streams: its block prefetch queue is then never made (comfy/model_prefetch.py)
PREFETCH_OFF_FLAG = "--disable-async-offload"
# What releasing resident weight pages costs (comfy-aimdo's ModelVBAR.free_memory, measured by the project's probe):
# the watermark drops and faults fail until ComfyUI resets the limits after the node, so the released weights are
# cast through the offload buffers on every later use in this run.
RELEASE_COST = ("those weights then stay out of VRAM until the node ends: they are copied in through ComfyUI's "
                "cast buffers each time a block uses them, for the rest of the run, which is slower")


class UnknownPhaseError(ValueError):
    """`phase()` was given a name outside PHASES."""


MemoryReading = Callable[[], MemorySnapshot]
"""() -> memory now: how a phase reads memory when it fails (`longmedia.comfy.host.memory.comfy_reading` gives
ComfyUI's and comfy-aimdo's facts too); None reads torch alone."""


@dataclass(frozen=True)
class OOMContext:
    """What the executor knows about the job when a phase runs."""

    attention_backend: str = "unknown"
    memory_mode: str = "unknown"
    chunks: ChunkSizes | None = None
    heads: int = 0
    seq_len: int = 0
    row_spans: tuple[tuple[str, int], ...] = ()     # (kind, rows) of the packed sequence
    prefetch: bool = False
    late_block_guard_target_mb: int | None = None
    one_segment: bool = False                       # the phase ran on one segment of Setup's segmented job

    @classmethod
    def from_plan(cls, plan: ExecutionPlan) -> "OOMContext":
        """What the plan says about the pass."""
        g = plan.geometry
        return cls(attention_backend=plan.attention.backend, memory_mode=plan.memory_mode, chunks=plan.chunks,
                   heads=plan.model.dims.heads, seq_len=g.seq_len,
                   row_spans=tuple((s.kind, s.rows) for s in g.row_spans), prefetch=plan.prefetch,
                   late_block_guard_target_mb=plan.guards.late_block_guard_target_mb)


@dataclass(frozen=True)
class OOMReport:
    """The facts of one out-of-memory failure and the single pressure point to change next."""

    phase: str
    block_index: int | None
    readings: MemorySnapshot
    context: OOMContext
    pressure_point: str
    next_step: str
    error: str = field(default="", repr=False)

    def summary(self) -> str:
        r = self.readings

        def gb(v: int | None) -> str:
            return "n/a" if v is None else f"{v / GIB:.2f} GiB"

        where = f"phase {self.phase}" + (f", block {self.block_index}" if self.block_index is not None else "")
        c = self.context
        rows = " | ".join(f"{k} {n}" for k, n in c.row_spans) or "unknown"
        memory = "CPU RAM (torch's CPU allocator)" if _is_cpu_oom(self.error) else "GPU memory"
        return (f"LongMedia ran out of {memory} in {where}.\n"
                f"  GPU: {gb(r.free_bytes)} free of {gb(r.total_bytes)}; torch allocated "
                f"{gb(r.allocated_bytes)}, reserved {gb(r.reserved_bytes)}; dynamic VRAM usage "
                f"{gb(r.aimdo_vram_usage_bytes)}, resident weights {gb(r.vbar_resident_bytes)}; pinned RAM "
                f"{gb(r.pinned_ram_bytes)}\n"
                f"  job: {c.seq_len} packed rows ({rows}); memory mode {c.memory_mode}; attention "
                f"{c.attention_backend}; chunks {c.chunks}\n"
                f"  change next: {self.pressure_point}: {self.next_step}")

    def to_dict(self) -> dict:
        return {"kind": "oom"} | asdict(self)


class LongMediaOOM(torch.OutOfMemoryError):
    """A torch OOM with LongMedia's fact report attached (`.report`)."""

    def __init__(self, report: OOMReport) -> None:
        super().__init__(report.summary())
        self.report = report


def _halve(value: int) -> int:
    return max(_MIN_CHUNK, value // 2)


def pressure_point(phase_name: str, readings: MemorySnapshot, ctx: OOMContext) -> tuple[str, str]:
    """(control, what to do with it): the single change most likely to get past this failure."""
    c = ctx.chunks or ChunkSizes()
    if phase_name == "prefetch_transport":
        return (PREFETCH_OFF_FLAG,
                "staging the next block's weights (block prefetch) ran out of room: start ComfyUI with "
                f"{PREFETCH_OFF_FLAG} (no offload streams, so no block prefetch; weights are cast when a block uses "
                "them, slower), or set memory_mode to low_vram or ultra_low_vram, whose smaller activations leave "
                "room for the staged block; the attention settings are not the cause")
    if phase_name == "job_latent":
        return ("seconds / width / height",
                "the job's latent (Setup's, or the segmented Sampler's assembled output and denoised copies) did not "
                "fit in RAM: shorten the job, lower the size, or close what else holds RAM")
    if phase_name == "latent_upscale":
        if ctx.one_segment:  # the job input is connected already: a shorter segment is the upscaler's smaller input
            return ("segment_seconds / scale / upscaler",
                    "Hi-Res's learned latent upscaler ran out of memory on one segment of the job: set Setup's "
                    "segment_seconds shorter (each segment is upscaled alone), lower scale, or leave upscaler "
                    "empty for the built-in resampler")
        return ("upscaler / scale",
                "Hi-Res's learned latent upscaler ran out of memory on the whole latent it was given: connect "
                "LongMedia Setup's segmented job to Hi-Res's job input (it then upscales one segment at a time), "
                "lower scale, or leave upscaler empty for the built-in resampler")
    idle = readings.cached_bytes
    total = readings.total_bytes or 0
    if idle is not None and idle > max(GIB, total // 4):
        # the step-boundary clean-up runs when less than step_boundary_cleanup_mb is free outside torch's
        # cache: a higher value makes it run more often. At this failure's reading it runs from free + idle up.
        at_least = -(-((readings.free_bytes or 0) + idle) // (256 * MIB)) * 256
        return ("step_boundary_cleanup_mb",
                f"{idle / GIB:.2f} GiB sat idle in torch's cache (fragmentation): raise step_boundary_cleanup_mb "
                f"to at least {at_least} MB (the clean-up runs when less than that is free, so a higher value "
                "hands the idle cache back more often) or set PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True")
    if phase_name == "before_block_0":
        refs = sum(n for k, n in ctx.row_spans if k in ("ref_img", "ref_audio"))
        if ctx.seq_len and refs * 4 > ctx.seq_len:
            return ("reference_budget", f"references are {refs} of {ctx.seq_len} rows: lower reference_budget")
        return ("segment_seconds", "the stock embedding phase before block 0 holds several copies of the sequence: "
                                   "set Setup's segment_seconds shorter")
    if phase_name == "final_output":
        if c.is_stock:  # no block is streamed: no block guard runs, and the final layer is the stock one
            return ("memory_mode", "the stock final layer runs over the whole sequence and no block guard runs in "
                                   "this mode: use low_vram (the final layer in row chunks, the late-block guard "
                                   "before it), or set Setup's segment_seconds shorter")
        target = ctx.late_block_guard_target_mb
        more = f" above {target} MB" if target is not None else ""
        return ("late_block_guard_target_mb", f"raise it{more} so the late-block guard empties torch's cache and, "
                                              "under dynamic VRAM, releases resident weight pages before the final "
                                              f"layer ({RELEASE_COST}), or set Setup's segment_seconds shorter")
    if phase_name in ("qkv", "attention"):
        if not c.streams_attention:
            return ("memory_mode", "stock attention holds Q, K and V for the whole sequence: use low_vram")
        if c.qkv_chunk_tokens > _MIN_CHUNK:
            return ("sol_qkv_chunk_tokens", f"lower it from {c.qkv_chunk_tokens} to {_halve(c.qkv_chunk_tokens)}")
        if ctx.heads and c.group_heads(ctx.heads) >= ctx.heads:
            return ("memory_mode", "K/V for all heads do not fit even with small query chunks: use ultra_low_vram")
        return ("segment_seconds", "K/V of one head group already has the smallest chunks: set Setup's "
                                   "segment_seconds shorter")
    if phase_name == "mlp":
        if not c.streams_mlp:
            return ("mlp_chunk_tokens", "the stock MLP holds 3x ffn per row for the whole sequence: set 4096")
        if c.mlp_chunk_tokens > _MIN_CHUNK:
            return ("mlp_chunk_tokens", f"lower it from {c.mlp_chunk_tokens} to {_halve(c.mlp_chunk_tokens)}")
        return ("segment_seconds", "the MLP already runs in the smallest chunks: set Setup's segment_seconds "
                                   "shorter")
    raise UnknownPhaseError(f"phase must be one of {', '.join(PHASES)}, got {phase_name!r}")


# allocation failures that surface as plain RuntimeErrors: cuBLAS / Triton / the driver, torch's CPU
# allocator ("[enforce fail at alloc_cpu.cpp:...] DefaultCPUAllocator: can't allocate memory") and comfy-aimdo's
# cast buffers ("VRAM grow failed: N bytes", "VRAM reservation failed": comfy_aimdo/vram_buffer.py; seen on the
# H200 by bench/cards/ (python -m bench.cards) when a phase left no room for the weights being streamed)
_OOM_TEXTS = ("out of memory", "cublas_status_alloc_failed", "defaultcpuallocator: can't allocate memory",
              "alloc_cpu.cpp", "vram grow failed", "vram reservation failed")


def is_oom(exc: BaseException) -> bool:
    """Whether `exc` is an allocation failure (GPU or CPU) rather than a bug."""
    if isinstance(exc, torch.OutOfMemoryError):
        return True
    text = str(exc).lower()
    return isinstance(exc, RuntimeError) and any(t in text for t in _OOM_TEXTS)


def _is_cpu_oom(error_text: str) -> bool:
    text = error_text.lower()
    return "defaultcpuallocator" in text or "alloc_cpu.cpp" in text


def report_for(phase_name: str, exc: BaseException, *, context: OOMContext = OOMContext(),
               reader: MemoryReading | None = None, block_index: int | None = None) -> OOMReport:
    readings = reader() if reader is not None else read_memory()
    point, step = pressure_point(phase_name, readings, context)
    return OOMReport(phase_name, block_index, readings, context, point, step, str(exc))


@contextlib.contextmanager
def phase(name: str, *, context: OOMContext = OOMContext(), reader: MemoryReading | None = None,
          block_index: int | None = None) -> Iterator[None]:
    """Run a phase; an allocation failure inside (GPU or CPU) becomes a LongMediaOOM with the report."""
    if name not in PHASES:
        raise UnknownPhaseError(f"phase must be one of {', '.join(PHASES)}, got {name!r}")
    try:
        yield
    except LongMediaOOM:
        raise
    except RuntimeError as exc:  # torch.OutOfMemoryError is a RuntimeError; other errors pass unchanged
        if not is_oom(exc):
            raise
        raise LongMediaOOM(report_for(name, exc, context=context, reader=reader, block_index=block_index)) from exc
