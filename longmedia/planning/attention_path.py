"""The planner's one coupling to the attention dispatcher, and the documented default without it.

`resolve_attention_path` calls `longmedia.attention.dispatcher.resolve_attention` (which needs torch)
with the job's facts and the bytes the plan leaves for attention, then `longmedia.attention.choice.call_extra_bytes`
for one call's bytes beyond q/k/v/out and `call_held_bytes` for the part of them kept until the block call returns.
`default_attention_path` checks no backend's availability: it records the requested mode and assumes ComfyUI's installed
attention is a fused exact kernel (flash / PyTorch SDPA: no score matrix), which is what the planner's byte formula
uses.
The CLI uses the default so it stays torch-free and fast; it plans for a card that is not here anyway.
"""

from __future__ import annotations

from types import ModuleType

from ..execution.chunks import ChunkSizes
from ..h3.geometry import Geometry
from ..h3.profiles import DeviceProfile, ModelProfile
from .types import AttentionPath, PlanRequest

DEFAULT_BACKEND = "existing"


def default_attention_path(request: PlanRequest, geometry: Geometry, model: ModelProfile, device: DeviceProfile,
                           chunks: ChunkSizes, budget_bytes: int, why: str = "not consulted") -> AttentionPath:
    """No probing: `auto`/`existing` run ComfyUI's installed attention (assumed fused and exact)."""
    mode = request.attention_mode
    host = request.host_attention
    installed = "ComfyUI's installed attention" if host is None else f"ComfyUI's {host.label}"
    note = (f"attention dispatcher {why}: planned with {installed}, assumed a fused exact "
            "kernel (flash / PyTorch SDPA, no score matrix)")
    if mode in ("sol", "scheduled_sol"):
        return AttentionPath(mode, "sol (unresolved)", False, 0, "default",
                             (note, f"attention_mode={mode} is resolved to a Sol backend when the job runs"))
    return AttentionPath(mode, DEFAULT_BACKEND, True, 0, "default", (note,))


def _dispatcher() -> ModuleType | None:
    try:
        from ..attention import dispatcher  # needs torch: imported on first use so the CLI stays torch-free
        return dispatcher
    except ImportError:  # the dispatcher or torch is missing here: the documented default applies
        return None


def resolve_attention_path(request: PlanRequest, geometry: Geometry, model: ModelProfile, device: DeviceProfile,
                           chunks: ChunkSizes, budget_bytes: int) -> AttentionPath:
    """The dispatcher's AttentionChoice for this job, or the default when the dispatcher is not installed."""
    mod = _dispatcher()
    if mod is None:
        return default_attention_path(request, geometry, model, device, chunks, budget_bytes, "not installed")
    import torch  # present: the dispatcher imported it

    from ..attention.choice import call_extra_bytes, call_held_bytes

    heads = chunks.group_heads(model.dims.heads)
    # No exact attention over int8 K/V here. The executor holds K/V in bf16, so an int8-K/V backend would
    # quantise a second copy per call. Holding int8 K/V instead would not pay either. Per token, int8 K/V
    # of every head plus x take ~25.5 KB; head groups (ultra_low_vram) take 21.5 KB + 0.5 KB per grouped
    # head (the same at 8 heads, less below), stay exact and keep cuDNN, about twice the int8 kernel's
    # speed (docs/lab/2026-12-02-executor-kernels-planner.md).
    choice = mod.resolve_attention(request.attention_mode, seq_len=geometry.seq_len, heads=heads,
                                   head_dim=model.dims.head_dim, dtype=torch.bfloat16,
                                   device_capability=device.compute_capability,
                                   budget_bytes_for_attention=int(budget_bytes), sol_settings=request.sol,
                                   int8_kv_storage=False, host_attention=request.host_attention,
                                   streamed=chunks.streams_attention, speeds=request.attention_speeds)
    rows = chunks.qkv_chunk_tokens or geometry.seq_len  # the executor's query rows per call
    extra = call_extra_bytes(choice, query_rows=rows, heads=heads, head_dim=model.dims.head_dim, dtype=torch.bfloat16)
    held = call_held_bytes(choice, heads=heads, head_dim=model.dims.head_dim, dtype=torch.bfloat16)
    return AttentionPath(mode=choice.mode, backend=choice.backend, exact=bool(choice.exact),
                         query_chunk_tokens=int(choice.query_chunk_tokens), source="dispatcher",
                         reasons=tuple(choice.reasons), working_bytes=int(choice.working_bytes),
                         extra_bytes=int(extra), held_bytes=int(held), choice=choice)
