"""What the planner takes (`PlanRequest`) and gives (`ExecutionPlan` and its parts), as frozen values."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, fields
from typing import TYPE_CHECKING, Any

from ..attention.host import HostAttention
from ..attention.schedule import SolSettings
from ..attention.speeds import MeasuredSpeeds
from ..errors import LongMediaInputError, check_choice, check_float, check_int
from ..execution.chunks import ChunkSizes
from ..execution.guards import GuardSettings
from ..h3.geometry import Geometry
from ..h3.profiles import DeviceProfile, ModelProfile
from ..h3.references import REFERENCE_BUDGETS
from ..limits import MAX_LINK_GBPS, MAX_MB, MAX_SP_DEGREE
from .host_ram import DEFAULT_DISK_GBPS, DISK_GBPS_BASIS, HostRamPlan

if TYPE_CHECKING:  # the dispatcher needs torch; the plan types stay torch-free
    from ..attention.choice import AttentionChoice

MEMORY_MODES = ("auto", "normal", "low_vram", "ultra_low_vram")
ATTENTION_MODES = ("auto", "existing", "sol", "scheduled_sol")
MODE_ORDER = ("normal", "low_vram", "ultra_low_vram")   # least to most constrained
MAX_CHUNK_TOKENS = 1 << 20
MIN_CHUNK_TOKENS = 64

# (name, low, high, zero allowed, what to change) for each of the ten manual controls; None = auto.
_TOKENS_FIX = "Use 0 for the stock path of that phase or a row count such as 4096; leave unset for auto."
_MB_FIX = "Give megabytes; leave unset for auto."
MANUAL_CONTROLS: tuple[tuple[str, int, int, bool, str], ...] = (
    ("mlp_chunk_tokens", MIN_CHUNK_TOKENS, MAX_CHUNK_TOKENS, True, _TOKENS_FIX),
    ("sol_qkv_chunk_tokens", MIN_CHUNK_TOKENS, MAX_CHUNK_TOKENS, True, _TOKENS_FIX),
    ("sol_out_proj_chunk_tokens", MIN_CHUNK_TOKENS, MAX_CHUNK_TOKENS, True, _TOKENS_FIX),
    ("vram_activation_reserve_mb", 0, MAX_MB, False, _MB_FIX),
    ("inter_block_vram_guard_mb", 0, MAX_MB, False, _MB_FIX),
    ("inter_block_guard_cooldown_blocks", 0, 1024, False, "Give a block count; leave unset for auto."),
    ("inter_block_guard_emergency_mb", 0, MAX_MB, False, _MB_FIX),
    ("late_block_guard_start", 0, 1024, False, "Give a block index; leave unset for auto."),
    ("late_block_guard_target_mb", 0, MAX_MB, False, _MB_FIX),
    ("step_boundary_cleanup_mb", 0, MAX_MB, False, _MB_FIX),
)
MANUAL_FIELDS = tuple(c[0] for c in MANUAL_CONTROLS)


@dataclass(frozen=True)
class PlanRequest:
    """The user's choices: memory and attention modes, and ten manual controls (None = auto).

    host_attention: the attention the user runs ComfyUI with (detected by longmedia/comfy/host/attention.py;
    None = unknown, e.g. the CLI): attention_mode=auto keeps it where it can run in the planned path.
    reference_budget: the job's (LongMedia Setup's reference_budget) when a job is connected; None = no job: the
    stock nodes' references are uncapped ("max").
    attention_speeds: the exact backends' speeds measured on the device (longmedia/comfy/host/attention_speeds.py);
    None = not measured (the CLI): the static rank orders them.
    disk_gbps: the disk's sustained read in GB/s, for weights that stream from the checkpoint file (default
    DEFAULT_DISK_GBPS: a mid-range NVMe SSD's sustained read; SATA SSDs read about 0.5); pinned_memory: False where
    ComfyUI runs with --disable-pinned-memory.
    """

    memory_mode: str = "auto"
    attention_mode: str = "auto"
    mlp_chunk_tokens: int | None = None
    sol_qkv_chunk_tokens: int | None = None
    sol_out_proj_chunk_tokens: int | None = None
    vram_activation_reserve_mb: int | None = None
    inter_block_vram_guard_mb: int | None = None
    inter_block_guard_cooldown_blocks: int | None = None
    inter_block_guard_emergency_mb: int | None = None
    late_block_guard_start: int | None = None
    late_block_guard_target_mb: int | None = None
    step_boundary_cleanup_mb: int | None = None
    sol: SolSettings | None = None  # for sol / scheduled_sol; None = SolSettings' defaults
    host_attention: HostAttention | None = None
    reference_budget: str | None = None
    attention_speeds: MeasuredSpeeds | None = None
    sp_degree: int = 1                  # sequence-parallel ranks (Ulysses): 1 = one device
    sp_link_gbps: float | None = None   # the rank-to-rank link, GB/s, measured or declared; None = assumed
    sp_link_measured: bool = False      # sp_link_gbps was measured on the ranks' own group (else declared)
    disk_gbps: float = DEFAULT_DISK_GBPS
    pinned_memory: bool = True
    patch_host_bytes: int = 0           # the model's LoRA tensors, held in RAM beside it (`planning/patches.PatchBytes`)

    def __post_init__(self) -> None:
        check_choice("memory_mode", self.memory_mode, MEMORY_MODES, "Use auto unless you know the mode you need.")
        if self.reference_budget is not None:
            check_choice("reference_budget", self.reference_budget, tuple(REFERENCE_BUDGETS),
                         "Connect LongMedia Setup's job, which carries its reference_budget.")
        check_choice("attention_mode", self.attention_mode, ATTENTION_MODES, "Use auto for exact attention that fits.")
        for name, low, high, zero_ok, fix in MANUAL_CONTROLS:
            value = getattr(self, name)
            if value is not None:
                check_int(name, value, low, high, fix, zero_ok=zero_ok)
        check_int("sp_degree", self.sp_degree, 1, MAX_SP_DEGREE, "Give the number of devices, 1 for one device.")
        if self.sp_link_gbps is not None:
            check_float("sp_link_gbps", self.sp_link_gbps, 0.001, MAX_LINK_GBPS,
                        "Give the measured rank-to-rank GB/s, or leave it unset.")
        check_float("disk_gbps", self.disk_gbps, 0.01, 100.0,
                    f"Give the disk's sustained read in GB/s ({DISK_GBPS_BASIS}).")
        if self.sp_degree > 1 and self.attention_mode in ("sol", "scheduled_sol"):
            raise LongMediaInputError("attention_mode", self.attention_mode, "auto or existing with sp_degree > 1",
                                      "Sequence parallelism gathers queries of every rank into one attention "
                                      "call, which only exact attention allows: use auto or existing.")

    @property
    def manual_fields(self) -> tuple[str, ...]:
        return tuple(name for name in MANUAL_FIELDS if getattr(self, name) is not None)


@dataclass(frozen=True)
class PinningDecision:
    """Whether the weights that stream from RAM are page-locked, and how much."""

    mode: str                  # full / partial / none
    pinned_bytes: int
    ram_headroom_bytes: int    # RAM left free after pinning (the rule's floor is in the reason)
    reason: str


@dataclass(frozen=True)
class AttentionPath:
    """The attention decision as the plan records it; `choice` is the dispatcher's AttentionChoice, if any."""

    mode: str
    backend: str
    exact: bool
    query_chunk_tokens: int
    source: str                # dispatcher / default
    reasons: tuple[str, ...]
    working_bytes: int = 0
    extra_bytes: int = 0       # a call's allocations beyond q/k/v/out (scores, Sol's workspace), per query chunk
    held_bytes: int = 0        # the part of extra_bytes kept until the block call returns (Sol's key summaries)
    choice: AttentionChoice | None = field(default=None, compare=False, repr=False)  # the dispatcher's, when asked


@dataclass(frozen=True)
class SegmentSuggestion:
    """A segment length to try when one pass cannot fit or is needlessly slow."""

    seconds: float
    frames: int
    field_range_seconds: tuple[float, float] | None
    largest_fitting_seconds: float | None
    why: str


@dataclass(frozen=True)
class MemoryBreakdown:
    """Predicted VRAM of one pass, by what holds it."""

    block_activation_bytes: int       # the block executor's peak (hidden state included), memory.py
    held_outside_bytes: int           # stock tensors live across the blocks: embeddings, rope table, latents
    workspace_bytes: int              # cuBLAS workspaces, allocator slack, per-phase dequantised weights
    pre_block_bytes: int              # stock embedding phase before block 0
    final_bytes: int                  # stock final layer
    min_weight_bytes: int             # weights that must sit in VRAM while a block runs
    resident_weight_bytes: int        # weights the plan lets stay in VRAM (min + what else fits)
    model_weight_bytes: int
    outside_torch_bytes: int = 0      # beside torch's allocated bytes: cast buffers past one block, pool slack

    @property
    def blocks_phase_bytes(self) -> int:
        return self.block_activation_bytes + self.held_outside_bytes + self.workspace_bytes + self.min_weight_bytes

    @property
    def torch_need_bytes(self) -> int:
        """The largest phase's bytes in torch's allocator (with the must-have weights)."""
        return max(self.blocks_phase_bytes, self.pre_block_bytes, self.final_bytes)

    @property
    def activation_need_bytes(self) -> int:
        """Peak with only the must-have weights resident, the bytes outside torch's count included: what has
        to fit."""
        return self.torch_need_bytes + self.outside_torch_bytes

    @property
    def predicted_peak_bytes(self) -> int:
        return self.activation_need_bytes + (self.resident_weight_bytes - self.min_weight_bytes)

    def torch_allocated_bytes(self, weights_outside_torch: bool) -> int:
        """The most torch's allocator hands out (its allocated count, not its pool): the torch need less the block's
        weights when dynamic VRAM keeps weights outside torch (comfy-aimdo's VBAR pages), else the predicted peak,
        resident weights included; the bytes outside torch's count (cast buffers, pool slack) never."""
        if weights_outside_torch:
            return self.torch_need_bytes - self.min_weight_bytes
        return self.predicted_peak_bytes - self.outside_torch_bytes

    @property
    def streamed_weight_bytes(self) -> int:
        """Weights that travel from RAM on every model call."""
        return max(0, self.model_weight_bytes - self.resident_weight_bytes)


@dataclass(frozen=True)
class SequenceParallelPlan:
    """One Ulysses rank's share of a pass, and the cost model's expected speedup over one device.

    Cost model (per block, no overlap of compute and link assumed): one device takes t1 = a*S + b*S^2 (the
    measured H3 block fit, `stage_times`); a rank takes a*L + b*S*L (its L = ceil(S/N) rows through the
    row-wise stages, H/N heads of all S queries against all S keys) plus link_bytes / link GB/s.
    """

    degree: int
    rows_per_rank: int
    heads_per_rank: tuple[int, ...]
    link_bytes_per_block: int
    link_gbps: float
    link_source: str                 # measured / declared / assumed
    block_seconds_single: float
    block_seconds_rank_compute: float
    block_seconds_link: float
    host_ram_bytes_per_rank: int     # each rank's own copy of the weights in RAM
    pinned_bytes_per_rank: int

    @property
    def expected_speedup(self) -> float:
        return self.block_seconds_single / max(1e-12, self.block_seconds_rank_compute + self.block_seconds_link)


@dataclass(frozen=True)
class ExecutionPlan:
    """Everything the executor, guards and adapters need for one job, and why."""

    memory_mode: str
    requested_memory_mode: str
    attention: AttentionPath
    chunks: ChunkSizes
    activation_reserve_bytes: int
    guards: GuardSettings
    prefetch: bool
    pinning: PinningDecision
    memory: MemoryBreakdown
    budget_bytes: int
    geometry: Geometry
    model: ModelProfile
    device: DeviceProfile
    manual_fields: tuple[str, ...]
    warnings: tuple[str, ...]
    reasons: tuple[str, ...]
    segment_suggestion: SegmentSuggestion | None = None
    sp: SequenceParallelPlan | None = None    # None: one device
    host_ram: HostRamPlan | None = None        # the pass's host RAM (`host_ram.plan_host_ram`)

    @property
    def predicted_peak_bytes(self) -> int:
        return self.memory.predicted_peak_bytes

    @property
    def resident_weight_budget_bytes(self) -> int:
        return self.memory.resident_weight_bytes

    @property
    def usable_bytes(self) -> int:
        """The budget minus the activation reserve: what the predicted peak must stay under."""
        return self.budget_bytes - self.activation_reserve_bytes

    @property
    def in_use_at_plan_bytes(self) -> int:
        """Device memory in use, outside the budget, when the plan read the device (`DeviceProfile.in_use_bytes`).
        The predicted peak is what the pass may add on top of it."""
        return self.device.in_use_bytes

    @property
    def fits(self) -> bool:
        return self.memory.activation_need_bytes <= self.usable_bytes

    def to_dict(self) -> dict:
        out = {"kind": "plan"} | {f.name: getattr(self, f.name) for f in fields(self)}
        out = {k: (v.to_dict() if hasattr(v, "to_dict") else v) for k, v in out.items()}
        for name in ("chunks", "guards", "pinning", "segment_suggestion", "sp"):
            value = getattr(self, name)
            out[name] = asdict(value) if value is not None else None
        att = self.attention
        out["attention"] = {f.name: getattr(att, f.name) for f in fields(att) if f.name != "choice"}
        out["memory"] = asdict(self.memory) | {
            "blocks_phase_bytes": self.memory.blocks_phase_bytes,
            "torch_need_bytes": self.memory.torch_need_bytes,
            "activation_need_bytes": self.memory.activation_need_bytes,
            "predicted_peak_bytes": self.memory.predicted_peak_bytes,
            "streamed_weight_bytes": self.memory.streamed_weight_bytes}
        if self.sp is not None:
            out["sp"]["expected_speedup"] = self.sp.expected_speedup
        out.update(predicted_peak_bytes=self.predicted_peak_bytes, usable_bytes=self.usable_bytes, fits=self.fits,
                   resident_weight_budget_bytes=self.resident_weight_budget_bytes,
                   in_use_at_plan_bytes=self.in_use_at_plan_bytes)
        return out

    def to_json(self, indent: int | None = None) -> str:
        return json.dumps(self.to_dict(), indent=indent, default=_json_default)


def _json_default(value: Any) -> Any:
    if isinstance(value, (tuple, set, frozenset)):
        return list(value)
    return str(value)
