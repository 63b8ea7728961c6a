"""`plan(model, device, geometry, request) -> ExecutionPlan`: the memory mode, chunk sizes, guards and why.

The decision is made from the predicted peak of the real packed sequence, never from a model-size to
VRAM ratio: `auto` takes the least constrained of normal / low_vram / ultra_low_vram whose peak
(block executor bytes from `execution.memory`, the stock tensors around the blocks from
`plan_memory`, the weights a block needs, a workspace) fits the budget minus the activation reserve.
Weights beyond that are elastic: dynamic VRAM keeps as many resident as the rest of the budget holds.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from ..errors import LongMediaInputError, check_int
from ..execution.chunks import ChunkSizes
from ..execution.memory import BlockMemory, block_memory
from ..h3.geometry import Geometry
from ..h3.profiles import DeviceProfile, ModelProfile, gib, gib_pair, mib
from ..parallel.cost import exchange_buffer_bytes, rank_rows
from ..units import MIB
from . import around_blocks as pm
from .attention_path import resolve_attention_path
from .host_ram import HostRamPlan, pass_latent_bytes, plan_host_ram, stage_latent_bytes
from .policy import (
    GUARD_MB_FIELDS,
    auto_guards,
    auto_reserve,
    idle_control_warnings,
    is_16gb_int8,
    manual_warnings,
    pinning,
    prefetch_decision,
    segment_suggestion,
)
from .sp_cost import describe as describe_sp
from .sp_cost import rank_device, sp_share
from .types import MODE_ORDER, AttentionPath, ExecutionPlan, MemoryBreakdown, PlanRequest

LADDER = (16384, 8192, 4096, 2048, 1024, 512)
ULTRA_LADDER = (4096, 2048, 1024, 512)

__all__ = ["plan", "LADDER", "Candidate", "evaluate_mode", "pass_host_ram"]


@dataclass(frozen=True)
class Candidate:
    """One memory mode's chunk sizes and what the pass needs with them."""

    mode: str
    chunks: ChunkSizes
    memory: MemoryBreakdown
    usable_bytes: int

    @property
    def fits(self) -> bool:
        return self.memory.activation_need_bytes <= self.usable_bytes


def _group_ladder(heads: int) -> tuple[int, ...]:
    """Heads per K/V group for ultra_low_vram: divisors of `heads` below it, even ones first, largest first."""
    divisors = [g for g in range(heads - 1, 0, -1) if heads % g == 0]
    return tuple([g for g in divisors if g % 2 == 0] + [g for g in divisors if g % 2 == 1]) or (1,)


class _Pass:
    """The fixed facts of one pass the candidates are measured against."""

    def __init__(self, model: ModelProfile, device: DeviceProfile, g: Geometry, request: PlanRequest,
                 reserve: int, prefetch: bool) -> None:
        d, dt = model.dims, model.compute_dtype_bytes
        self.model, self.g, self.request, self.d, self.dt = model, g, request, d, dt
        self.int8 = model.is_int8
        self.usable = device.usable_vram_bytes - reserve
        self.held = pm.held_outside_bytes(g, d, dt)
        self.workspace = pm.workspace_bytes(g, model)
        self.pre = pm.pre_block_bytes(g, d, dt) + pm.WORKSPACE_FIXED
        # ranks > 1: the one gather after the last block (every rank's rows, then the cut full sequence)
        gather = 2 * rank_rows(g.seq_len, request.sp_degree) * request.sp_degree * d.hidden * dt \
            if request.sp_degree > 1 else 0
        self.final = pm.final_bytes(g, d, dt) + self.workspace + gather
        self.final_chunked = pm.chunked_final_bytes(g, d, dt) + self.workspace + gather  # streamed modes chunk it too
        self.min_weights = model.block_weight_bytes * (2 if prefetch else 1)
        self.fixed = self.held + self.workspace + self.min_weights
        self.dynamic_vram = device.dynamic_vram
        self.degree = request.sp_degree
        self.rows = rank_rows(g.seq_len, self.degree)  # a rank's rows (all rows on one device)

    def block(self, c: ChunkSizes) -> BlockMemory:
        """One rank's block activations: the block at its rows, plus the Ulysses exchange buffers."""
        bm = block_memory(self.rows, self.d, c, self.dt, int8_linears=self.int8)
        extra = exchange_buffer_bytes(self.g.seq_len, self.degree, self.d, c, self.dt)
        return replace(bm, attention_bytes=bm.attention_bytes + extra)

    def outside(self, torch_bytes: int, stock_path: bool = False) -> int:
        """What a phase of `torch_bytes` (must-have weights included) costs beside torch's allocated count."""
        return pm.outside_torch_bytes(torch_bytes - self.min_weights, self.model, self.dynamic_vram, stock_path)

    def need(self, torch_bytes: int) -> int:
        """Device bytes a streamed phase of `torch_bytes` needs, outside torch's count too."""
        return torch_bytes + self.outside(torch_bytes)

    def manual(self, chunks: ChunkSizes) -> ChunkSizes:
        r = self.request
        overlay = {"mlp_chunk_tokens": r.mlp_chunk_tokens, "qkv_chunk_tokens": r.sol_qkv_chunk_tokens,
                   "out_proj_chunk_tokens": r.sol_out_proj_chunk_tokens}
        return replace(chunks, **{k: v for k, v in overlay.items() if v is not None})

    def attention_fits(self, c: ChunkSizes) -> bool:
        return self.need(self.fixed + self.block(c).attention_bytes) <= self.usable

    def mlp_fits(self, c: ChunkSizes) -> bool:
        return self.need(self.fixed + self.block(c).mlp_bytes) <= self.usable

    def candidate(self, mode: str, chunks: ChunkSizes, attention_extra: int = 0, attention_held: int = 0) -> Candidate:
        """attention_extra: what each attention call allocates beyond q/k/v/out (Sol's workspace); attention_held:
        the part of it the block's AttentionFn keeps until the block returns (Sol's key summaries), so live in the
        MLP phase as well."""
        bm = self.block(chunks)
        act = max(bm.attention_bytes + attention_extra, bm.mlp_bytes + attention_held)
        mem = MemoryBreakdown(block_activation_bytes=act, held_outside_bytes=self.held,
                              workspace_bytes=self.workspace, pre_block_bytes=self.pre,
                              final_bytes=self.final if chunks.is_stock else self.final_chunked,
                              min_weight_bytes=self.min_weights, resident_weight_bytes=self.min_weights,
                              model_weight_bytes=self.model.weight_bytes)
        mem = replace(mem, outside_torch_bytes=self.outside(mem.torch_need_bytes, chunks.is_stock))
        spare = self.usable - mem.activation_need_bytes
        extra = max(0, min(spare, self.model.weight_bytes - self.min_weights))
        return Candidate(mode, chunks, replace(mem, resident_weight_bytes=self.min_weights + extra), self.usable)


def _largest(ladder: tuple[int, ...], fits, make) -> int:
    """The largest ladder value whose chunks fit (the smallest when none does)."""
    for value in ladder:
        if fits(make(value)):
            return value
    return ladder[-1]


def _search_streamed(p: _Pass, base: ChunkSizes, ladder: tuple[int, ...]) -> ChunkSizes:
    r = p.request
    c = p.manual(base)
    if r.sol_qkv_chunk_tokens is None:
        q = _largest(ladder, p.attention_fits, lambda v: p.manual(replace(c, qkv_chunk_tokens=v, out_proj_chunk_tokens=0)))
        c = replace(c, qkv_chunk_tokens=q)
    if r.sol_out_proj_chunk_tokens is None and c.qkv_chunk_tokens and not p.attention_fits(c):
        sub = tuple(v for v in ladder if v < c.qkv_chunk_tokens) or (c.qkv_chunk_tokens,)
        c = replace(c, out_proj_chunk_tokens=_largest(sub, p.attention_fits,
                                                      lambda v: replace(c, out_proj_chunk_tokens=v)))
    if r.mlp_chunk_tokens is None:
        c = replace(c, mlp_chunk_tokens=_largest(ladder, p.mlp_fits, lambda v: replace(c, mlp_chunk_tokens=v)))
    return c


def evaluate_mode(p: _Pass, mode: str) -> Candidate:
    """The least constrained chunk sizes of `mode` that fit (its most constrained ones when none do)."""
    if mode == "normal":
        return p.candidate(mode, p.manual(ChunkSizes()))
    if mode == "low_vram":
        return p.candidate(mode, _search_streamed(p, ChunkSizes(), LADDER))
    best = None
    for group in _group_ladder(p.d.heads):
        best = p.candidate(mode, _search_streamed(p, ChunkSizes(heads_per_group=group), ULTRA_LADDER))
        if best.fits:
            return best
    return best


def _choose(p: _Pass, requested: str) -> tuple[Candidate, list[str]]:
    if requested != "auto":
        cand = evaluate_mode(p, requested)
        notes = [f"memory_mode={requested} (manual)"]
        if not cand.fits:
            better = next((m for m in MODE_ORDER if evaluate_mode(p, m).fits), None)
            need, usable = gib_pair(cand.memory.activation_need_bytes, p.usable)
            notes.append(f"{requested} does not fit: needs {need} of {usable} usable"
                         + (f"; auto would pick {better}" if better else ""))
        return cand, notes
    tried = []
    for mode in MODE_ORDER:
        cand = evaluate_mode(p, mode)
        if cand.fits:
            head = f"auto picked {mode}: the least constrained mode whose predicted peak fits"
            if mode == "ultra_low_vram":
                head = "auto fell back to ultra_low_vram, the last resort: " + "; ".join(tried)
            return cand, [head] + (tried if mode != "ultra_low_vram" else [])
        tried.append("{} needs {} > {} usable".format(mode, *gib_pair(cand.memory.activation_need_bytes, p.usable)))
    return cand, ["auto: no mode fits one pass, not even ultra_low_vram (" + "; ".join(tried) + ")"]


def _validate(model: ModelProfile, device: DeviceProfile, geometry: Geometry, request: PlanRequest) -> None:
    for name, value, kind in (("model", model, ModelProfile), ("device", device, DeviceProfile),
                              ("geometry", geometry, Geometry), ("request", request, PlanRequest)):
        if not isinstance(value, kind):
            raise LongMediaInputError(name, type(value).__name__, f"a {kind.__name__}",
                                      f"Build it with longmedia.{kind.__module__.rsplit('.', 1)[-1]}.{kind.__name__}.")
    last = model.dims.num_blocks - 1
    if request.late_block_guard_start is not None:
        check_int("late_block_guard_start", request.late_block_guard_start, 0, last,
                  f"Give a block index of this {model.dims.num_blocks}-block model.")
    if request.inter_block_guard_cooldown_blocks is not None:
        check_int("inter_block_guard_cooldown_blocks", request.inter_block_guard_cooldown_blocks, 0,
                  model.dims.num_blocks, "Give at most the model's block count.")
    if device.usable_vram_bytes <= 0:
        raise LongMediaInputError("device", device.name, "a device with free VRAM",
                                  "Run on a CUDA GPU, or plan for one with DeviceProfile.card(vram_gb=...).")
    budget_mb = device.usable_vram_bytes // MIB
    if request.vram_activation_reserve_mb is not None:
        check_int("vram_activation_reserve_mb", request.vram_activation_reserve_mb, 0, budget_mb - 1,
                  f"The reserve is kept out of the {budget_mb} MiB of VRAM usable for the job on "
                  f"the {device.name} ({gib(device.vram_total_bytes)} in all); leave it unset (-1 on the nodes) for "
                  f"auto ({mib(auto_reserve(device))} MiB here).")
    card_mb = device.vram_total_bytes // MIB
    for name in GUARD_MB_FIELDS:
        value = getattr(request, name)
        if value is not None:
            check_int(name, value, 0, card_mb, f"A free-VRAM threshold above the card's {card_mb} MiB would act "
                                               "before every block; leave it unset for auto.")


def _describe_chunks(c: ChunkSizes, heads: int) -> str:
    if c.is_stock:
        return "stock block math (one fused QKV, one attention call, whole-sequence MLP)"
    parts = []
    if c.streams_attention:
        n = c.group_heads(heads)
        groups = f", K/V held for {n} of {heads} heads at a time" if n < heads else ""
        out = c.out_proj_chunk_tokens or c.qkv_chunk_tokens
        parts.append(f"attention streamed in {c.qkv_chunk_tokens}-row query chunks (out-proj {out} rows){groups}")
    else:
        parts.append("stock attention")
    parts.append(f"MLP in {c.mlp_chunk_tokens}-row chunks" if c.streams_mlp else "stock MLP")
    return "; ".join(parts)


def plan(model: ModelProfile, device: DeviceProfile, geometry: Geometry, request: PlanRequest | None = None, *,
         attention_resolver=resolve_attention_path) -> ExecutionPlan:
    """The execution plan of one H3 pass; raises LongMediaInputError before any GPU work on bad input.

    attention_resolver(request, geometry, model, device, chunks, budget_bytes) -> AttentionPath: the
    dispatcher by default; the CLI passes `attention_path.default_attention_path` to stay torch-free.
    """
    request = PlanRequest() if request is None else request
    _validate(model, device, geometry, request)
    reserve_mb = request.vram_activation_reserve_mb
    reserve = reserve_mb * MIB if reserve_mb is not None else auto_reserve(device)  # _validate: < usable
    # The mode is chosen with one block of weights in VRAM; prefetch (a second block) is added only where
    # it fits beside that mode's activations, so it never makes the plan more constrained.
    p = _Pass(model, device, geometry, request, reserve, False)
    cand, reasons = _choose(p, request.memory_mode)
    all_resident = cand.memory.resident_weight_bytes >= model.weight_bytes
    disk_reads = pass_host_ram(model, rank_device(device, request.sp_degree), geometry,
                               cand.memory.streamed_weight_bytes, request).disk_bytes_per_call
    pref, pref_reason = prefetch_decision(model, device, all_resident, disk_reads)
    if pref and not all_resident:
        p2 = _Pass(model, device, geometry, request, reserve, True)
        cand2 = p2.candidate(cand.mode, cand.chunks)
        if cand2.fits:
            p, cand = p2, cand2
        else:
            pref, pref_reason = False, (f"block prefetch off: a second block ({gib(model.block_weight_bytes)}) "
                                        f"does not fit beside {cand.mode}'s activations")

    attn_budget = p.usable - p.fixed - p.rows * model.dims.hidden * model.compute_dtype_bytes
    attention_request = request
    if request.sp_degree > 1 and request.attention_mode == "auto":
        # a rank attends with every rank's queries in one call: exact attention only (PlanRequest refuses Sol)
        attention_request = replace(request, attention_mode="existing")
        reasons.append("sequence parallel: attention_mode auto runs the existing (exact) attention on each rank")
    attention: AttentionPath = attention_resolver(attention_request, geometry, model, device, cand.chunks,
                                                  max(0, attn_budget))
    chunks = cand.chunks
    if (chunks.streams_attention and attention.query_chunk_tokens
            and attention.query_chunk_tokens < chunks.qkv_chunk_tokens and request.sol_qkv_chunk_tokens is None):
        chunks = replace(chunks, qkv_chunk_tokens=attention.query_chunk_tokens,
                         out_proj_chunk_tokens=min(chunks.out_proj_chunk_tokens or attention.query_chunk_tokens,
                                                   attention.query_chunk_tokens))
        reasons.append(f"query chunks lowered to {chunks.qkv_chunk_tokens} rows: the attention backend's "
                       "working set needs it")
        cand = p.candidate(cand.mode, chunks)
    workspace_warning = None
    if attention.extra_bytes or attention.held_bytes:
        fitted = cand.fits
        cand = p.candidate(cand.mode, chunks, attention.extra_bytes, attention.held_bytes)
        reasons.append(f"{attention.backend} allocates {gib(attention.extra_bytes)} per attention call beyond "
                       "q/k/v (scores or Sol's key summaries, block lists, routing mask): counted in the block's "
                       "attention phase"
                       + (f"; {mib(attention.held_bytes)} MiB of it (Sol's key summaries, made once per K/V) stays "
                          "until the block returns: counted in its MLP phase too" if attention.held_bytes else ""))
        if fitted and not cand.fits:
            workspace_warning = (f"{attention.backend}'s {gib(attention.extra_bytes)} of per-call workspace takes "
                                 "the plan over the budget: lower sol_qkv_chunk_tokens or free VRAM")

    g = geometry
    reasons = [f"packed sequence: {g.seq_len} rows ({g.text_rows} text, {g.cond_rows} guide, {g.reference_rows} "
               f"reference, {g.audio_rows} audio, {g.video_rows} video = {g.latent_frames} latent frames x "
               f"{g.rows_per_latent_frame})"] + reasons
    reasons.append(_describe_chunks(chunks, model.dims.heads))
    mem = cand.memory
    need_text, usable_text = gib_pair(mem.activation_need_bytes, p.usable)
    reasons.append(f"needs {need_text} of {usable_text} usable ({gib(device.usable_vram_bytes)} "
                   f"budget - {gib(reserve)} reserve): block activations {gib(mem.block_activation_bytes)}, held "
                   f"around the blocks {gib(mem.held_outside_bytes)}, workspace {gib(mem.workspace_bytes)}, "
                   f"{gib(mem.min_weight_bytes)} of block weights, {gib(mem.outside_torch_bytes)} outside torch's count "
                   "(cast buffers past one block, allocator slack)")
    elastic = mem.resident_weight_bytes - mem.min_weight_bytes
    reasons.append(f"resident weights {gib(mem.resident_weight_bytes)} of {gib(model.weight_bytes)}: the "
                   f"{gib(mem.min_weight_bytes)} the block in use needs (counted in the predicted peak)"
                   + (f" and {gib(elastic)} elastic, kept in the room beside the peak and given up when "
                      "activations need it" if elastic > 0 else ""))
    reasons.append(peak_bound_text(mem, device))
    if mem.final_bytes > mem.blocks_phase_bytes:
        reasons.append(f"the stock final layer ({gib(mem.final_bytes)}) needs more than a block phase "
                       f"({gib(mem.blocks_phase_bytes)}): the late-block guard makes room before it")
    reasons.append(pref_reason)
    if is_16gb_int8(model, device) and not pref:
        reasons.append("16 GB-class card with native INT8 weights: blocks are faulted in on demand, and nothing "
                       "reserves room for the next block while the current block's activations are alive")
    if not device.dynamic_vram and model.weight_bytes > p.usable - mem.activation_need_bytes + mem.min_weight_bytes:
        reasons.append(f"dynamic VRAM is off and the {gib(model.weight_bytes)} of weights do not fit beside the "
                       f"activations: ComfyUI's estimate-based loader decides residency, which this plan cannot "
                       "steer; re-enable dynamic VRAM (the default: drop --disable-dynamic-vram / --highvram / "
                       "--gpu-only / --novram)")
    host_ram = pass_host_ram(model, rank_device(device, request.sp_degree), geometry, mem.streamed_weight_bytes, request,
                             pref)
    pin = pinning(model, rank_device(device, request.sp_degree), mem.streamed_weight_bytes, host_ram)
    reasons.append(pin.reason)
    sp = None
    if request.sp_degree > 1:
        sp = sp_share(model, device, geometry, request.sp_degree, request.sp_link_gbps,
                      "measured" if request.sp_link_measured else "declared", pin.pinned_bytes)
        reasons.append(describe_sp(sp, model.dims.num_blocks))
    if mem.streamed_weight_bytes:
        reasons.append(f"{gib(mem.streamed_weight_bytes)} of weights travel from host on every model call (pinned "
                       "RAM, page cache or disk: the host RAM line)")
    reasons.extend(f"attention: {r}" for r in attention.reasons)
    guards = auto_guards(request, model, device, mem, geometry)
    warnings = manual_warnings(request, cand, p.usable, guards, auto_guards(PlanRequest(), model, device, mem, geometry),
                               auto_reserve(device))
    warnings.extend(idle_control_warnings(request, not chunks.is_stock, cand.mode))
    if chunks.is_stock:
        reasons.append("block guards off: every block runs stock (not streamed), so only the step-boundary "
                       "clean-up runs")
    if cand.mode == "normal":
        reasons.append(normal_mode_differences(pref, guards))
    if attention.query_chunk_tokens and not chunks.streams_attention:
        warnings.append(f"the attention backend ({attention.backend}) needs query chunks of "
                        f"{attention.query_chunk_tokens} rows to fit, but this plan runs stock attention: use "
                        "memory_mode=low_vram or set sol_qkv_chunk_tokens")
    if workspace_warning:
        warnings.append(workspace_warning)
    if attention.working_bytes > max(0, attn_budget) and attention.source == "dispatcher":
        warnings.append(f"the attention backend's working set ({gib(attention.working_bytes)}) is over the "
                        f"{gib(max(0, attn_budget))} the plan leaves for attention")
    suggestion = segment_suggestion(model, device, geometry, cand,
                                    lambda g2: _fits_any(model, device, g2, request, reserve))
    if suggestion is not None:
        reasons.append(suggestion.why)
    reasons.extend(f"reference budget: {note}" for r in g.references for note in r.capped)
    return ExecutionPlan(memory_mode=cand.mode, requested_memory_mode=request.memory_mode, attention=attention,
                         chunks=chunks, activation_reserve_bytes=reserve, guards=guards, prefetch=pref, pinning=pin,
                         memory=mem, budget_bytes=device.usable_vram_bytes, geometry=geometry, model=model,
                         device=device, manual_fields=request.manual_fields, warnings=tuple(warnings),
                         reasons=tuple(reasons), segment_suggestion=suggestion, sp=sp, host_ram=host_ram)


def pass_host_ram(model: ModelProfile, device: DeviceProfile, g: Geometry, streamed_weight_bytes: int,
                  request: PlanRequest, prefetch: bool = False) -> HostRamPlan:
    """A DiT pass's host RAM: its latents (the pass's and the job's copies), LongMedia's own largest allocation (the
    pass latents), the weights that travel every model call. Under dynamic VRAM that is every weight: ComfyUI pins
    each weight it casts, resident or not, and on a 16 GiB card few stay resident (H100, 50 blocks INT8, 43.78 GiB
    checkpoint: 43.75 GiB pinned with RAM to spare, 40.1 GiB moved per step where the plan kept 7.1 GiB resident;
    docs/lab/2026-12-07-host-ram.md). Counting every weight put the predicted RSS within 2.4 % of the measured one at
    all, 32 and 16 GiB of RAM, and the disk reads within 8 % at 32 GiB and 11 % over at 16 GiB."""
    weights = model.weight_bytes if device.dynamic_vram else streamed_weight_bytes
    return plan_host_ram(device, weights, model.block_weight_bytes, stage_latent_bytes(g),
                         own_alloc_bytes=pass_latent_bytes(g), pinned_memory=request.pinned_memory,
                         disk_gbps=request.disk_gbps, patch_bytes=request.patch_host_bytes, overlapped=prefetch)


def peak_bound_text(mem: MemoryBreakdown, device: DeviceProfile) -> str:
    """What the predicted peak bounds, and what it does not: the reason the plan states it in."""
    elastic = mem.resident_weight_bytes - mem.min_weight_bytes
    what = ("activations, workspaces, the tensors around the blocks; the weights are comfy-aimdo's VBAR pages, "
            "outside torch" if device.dynamic_vram else "resident weights included")
    return (f"predicted peak {gib(mem.predicted_peak_bytes)} ({gib(mem.activation_need_bytes)} needed + "
            f"{gib(elastic)} of elastic weights): what the pass may add to the {gib(device.in_use_bytes)} the device "
            f"had in use when the plan read it (CUDA context, other processes); torch's allocated bytes peak at "
            f"{gib(mem.torch_allocated_bytes(device.dynamic_vram))} at most ({what})"
            + (f"; the room above the {gib(mem.activation_need_bytes)} needed is for elastic weights, kept while they "
               "fit and given up under pressure, not for activations" if elastic > 0 else ""))


def normal_mode_differences(prefetch: bool, guards) -> str:
    """What normal mode runs beside stock's block math, so that nobody reads it as stock's runtime."""
    return ("normal mode runs stock's block math but not exactly stock's runtime: "
            + ("block prefetch is off (stock leaves it on), " if not prefetch else "")
            + "and after every model call LongMedia reads free VRAM and torch's peak, and its step guard empties "
            f"torch's cache when less than {guards.step_boundary_cleanup_mb} MiB is free "
            + ("(0: the guard is off)" if guards.step_boundary_cleanup_mb == 0 else "(stock does neither)"))


def _fits_any(model: ModelProfile, device: DeviceProfile, g: Geometry, request: PlanRequest,
              reserve: int) -> str | None:
    """The least constrained mode in which geometry `g` fits (None = none), one block of weights resident."""
    p = _Pass(model, device, g, replace(request, memory_mode="auto"), reserve, False)
    return next((m for m in MODE_ORDER if evaluate_mode(p, m).fits), None)
