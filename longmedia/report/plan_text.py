"""An `ExecutionPlan` as the CLI's text table, in one unit family: GiB for memory, MiB for thresholds.

VRAM is shown in its parts so that a plan whose elastic weights fill the card does not read as "no headroom":
the budget (free VRAM less the reserve), the activation peak (what has to fit), the resident weights (the
block in flight plus what dynamic VRAM keeps because it fits) and the headroom between the peak and the budget.
"""

from __future__ import annotations

from typing import Sequence

from ..h3.profiles import gib, mib
from ..planning.types import ExecutionPlan
from ..units import GIB, MIB


def size(n_bytes: int) -> str:
    """Bytes in GiB, or in MiB below one GiB (so that a small shortfall never reads 0.00 GiB)."""
    return gib(n_bytes) if abs(n_bytes) >= GIB else f"{n_bytes / MIB:.0f} MiB"


def _gb(n_bytes: int) -> str:
    """A marketed size in GB (1 GB = 1 GiB for cards and RAM sticks) and its exact GiB."""
    return f"{n_bytes / GIB:g} GB ({gib(n_bytes)})"


def memory_rows(p: ExecutionPlan) -> list[tuple[str, str]]:
    """budget, activations, weights and headroom rows, each in GiB."""
    mem, d = p.memory, p.device
    reserve_kind = "manual" if "vram_activation_reserve_mb" in p.manual_fields else "auto"
    extra = mem.resident_weight_bytes - mem.min_weight_bytes
    headroom = p.usable_bytes - mem.activation_need_bytes
    streamed = mem.streamed_weight_bytes
    return [
        ("vram budget", f"{gib(p.budget_bytes)} free of the {gib(d.vram_total_bytes)} card - {gib(p.activation_reserve_bytes)} "
                        f"reserve ({reserve_kind}) = {gib(p.usable_bytes)} usable"),
        ("activations", f"{gib(mem.activation_need_bytes)} needed at the peak, with the {gib(mem.min_weight_bytes)} "
                        f"of block weights a block needs in VRAM and {gib(mem.outside_torch_bytes)} outside torch's "
                        "count"),
        ("weights", f"{gib(mem.resident_weight_bytes)} resident of {gib(mem.model_weight_bytes)} ("
                    f"{gib(mem.min_weight_bytes)} in use + {gib(extra)} elastic, kept because they fit)"
                    + (f"; {gib(streamed)} travel from host every model call (pinned RAM, page cache or disk: host RAM)" if streamed else "; nothing streams")),
        ("headroom", (f"{size(headroom)} between the activation peak and usable VRAM"
                      + (f" (lent to the {size(extra)} of elastic weights)" if extra else "")
                      if headroom >= 0 else f"short by {size(-headroom)}: the activation peak is over usable VRAM")),
    ]


def segments_row(p: ExecutionPlan) -> str:
    g = p.geometry
    passes = "one pass" if g.segment_count == 1 else \
        f"{g.segment_count} segments (longest pass {g.seconds:.3f} s with {g.context_frames} context frames)"
    tip = p.segment_suggestion
    if tip is None:
        return passes
    if tip.largest_fitting_seconds is None:
        return f"{passes}; no segment length fits either (see reasons)"
    return f"{passes}; try segment_seconds {tip.seconds:g}"


def render_plan(p: ExecutionPlan, notes: Sequence[str] = (), warnings: Sequence[str] = ()) -> str:
    """The plan as a readable table; `notes` (what was snapped, and why) and `warnings` come from the caller."""
    g, m, d, c, gd = p.geometry, p.model, p.device, p.chunks, p.guards
    seg = " | ".join(f"{s.kind} {s.rows}" for s in g.row_spans)
    heads = c.group_heads(m.dims.heads)
    total = g.total_frames or g.frames
    rows = [
        ("model", f"{m.name}: {m.param_count / 1e9:.1f} B params, {gib(m.weight_bytes)} of weights, {m.quantization}"),
        ("machine", f"{_gb(d.vram_total_bytes)} card, {_gb(d.ram_total_bytes)} RAM, {d.os_name}, dynamic VRAM "
                    f"{'on' if d.dynamic_vram else 'off'}"),
        ("job", f"{g.canvas_width}x{g.canvas_height}, {total / 24:.3f} s ({total} frames), "
                f"{'one pass' if g.segment_count == 1 else f'{g.segment_count} segments'}, "
                f"reference budget {g.reference_budget.name}"),
        ("sequence", f"{g.seq_len} rows: {seg}"),
        ("memory mode", f"{p.memory_mode} (requested {p.requested_memory_mode})"),
        ("attention", f"{p.attention.backend} ({'exact' if p.attention.exact else 'approximate'}, "
                      f"mode {p.attention.mode}, {p.attention.source})"),
        ("chunks", f"qkv {c.qkv_chunk_tokens} | out-proj {c.out_proj_chunk_tokens} | mlp {c.mlp_chunk_tokens} | "
                   f"heads per K/V group {heads if heads < m.dims.heads else 'all'}   (0 = stock path)"),
        ("reserve", f"{mib(p.activation_reserve_bytes)} MiB"),
        ("guards", f"inter-block {gd.inter_block_vram_guard_mb} MiB, cooldown {gd.inter_block_guard_cooldown_blocks} "
                   f"blocks, emergency {gd.inter_block_guard_emergency_mb} MiB, late from block "
                   f"{gd.late_block_guard_start} -> {gd.late_block_guard_target_mb} MiB, step cleanup "
                   f"{gd.step_boundary_cleanup_mb} MiB"),
        ("prefetch", "on" if p.prefetch else "off"),
        ("pinning", f"{p.pinning.mode} ({gib(p.pinning.pinned_bytes)} of RAM)"),
        *([("host RAM", p.host_ram.verdict)] if p.host_ram is not None else []),
        *memory_rows(p),
        ("segments", segments_row(p)),
    ]
    if p.manual_fields:
        rows.append(("manual", ", ".join(p.manual_fields)))
    width = max(len(k) for k, _ in rows)
    out = ["LongMedia plan"] + [f"  {k.ljust(width)}  {v}" for k, v in rows]
    if notes:
        out += ["", "as planned:"] + [f"  - {n}" for n in notes]
    out += ["", "reasons:"] + [f"  - {r}" for r in p.reasons]
    every_warning = list(warnings) + list(p.warnings)
    if every_warning:
        out += ["", "warnings:"] + [f"  ! {w}" for w in every_warning]
    return "\n".join(out)
