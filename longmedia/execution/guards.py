"""VRAM guards of one sampling run: inter-block (with cooldown, hysteresis and an emergency level),
late-block and step-boundary clean-ups, each recorded as a frozen `GuardEvent`.

Memory is read through an injectable `reader() -> free bytes` and released through an injectable
`cleanup()`; `cuda_free_reader` / `cuda_cleanup` are the defaults on a CUDA device. The emergency and
late-block guards also take an optional `release(bytes) -> bytes` (the host's way to give back resident
weights: comfy-aimdo's VBAR pages) for when an emptied cache still leaves too little free. The reading that
matters is the device's free memory outside PyTorch's cache (`torch.cuda.mem_get_info`): what a
clean-up can give back and what weight streaming, cuBLAS and comfy-aimdo allocate from.

State lives on one `Guards` object per sampling run, never at module level.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from ..errors import check_int
from ..limits import MAX_MB
from ..units import MIB

MAX_BLOCKS = 1024

Reader = Callable[[], int]       # () -> free bytes on the device
Cleanup = Callable[[], None]     # synchronize + empty the allocator cache
Release = Callable[[int], int]   # (bytes wanted) -> bytes of resident weights released (comfy-aimdo VBAR pages)

class ReleaseFailed(RuntimeError):
    """The host could not release resident weights (e.g. comfy-aimdo 0.6+ raised from `free_memory`); its message
    is the reason. A guard records it on its event and goes on: never a crash, never silent."""


RELEASING = ("emergency", "late_block")
"""Guards that, when emptying the cache is not enough, also release resident weights (when a `release` is given)."""

KINDS = ("emergency", "late_block", "inter_block", "step_boundary")


@dataclass(frozen=True)
class GuardSettings:
    """When the guards act (the plan's `guards`; field names match the manual controls); megabytes, 0 = off.

    inter_block_vram_guard_mb: after a block, clean up when less than this is free.
    inter_block_guard_cooldown_blocks: blocks skipped after any block clean-up.
    inter_block_guard_hysteresis_mb: after it fires, the inter-block guard re-arms only once this
        much more than its threshold is free again (0 = re-arm at the threshold).
    inter_block_guard_emergency_mb: below this, clean up whatever the cooldown and arming say.
    inter_block_guard_emergency_cooldown_blocks: blocks skipped after an emergency clean-up (0 = none).
    late_block_guard_start / late_block_guard_target_mb: from that block index on, clean up whenever
        less than the target is free (the final layer and decode need it); off when the target is 0.
    step_boundary_cleanup_mb: at each sampler step boundary, clean up when less than this is free.
    """

    inter_block_vram_guard_mb: int = 0
    inter_block_guard_cooldown_blocks: int = 0
    inter_block_guard_hysteresis_mb: int = 0
    inter_block_guard_emergency_mb: int = 0
    inter_block_guard_emergency_cooldown_blocks: int = 0
    late_block_guard_start: int = 0
    late_block_guard_target_mb: int = 0
    step_boundary_cleanup_mb: int = 0

    def __post_init__(self) -> None:
        for name in ("inter_block_vram_guard_mb", "inter_block_guard_hysteresis_mb", "inter_block_guard_emergency_mb",
                     "late_block_guard_target_mb", "step_boundary_cleanup_mb"):
            check_int(name, getattr(self, name), 0, MAX_MB, "Give megabytes; 0 turns this guard off.", zero_ok=True)
        for name in ("inter_block_guard_cooldown_blocks", "inter_block_guard_emergency_cooldown_blocks",
                     "late_block_guard_start"):
            check_int(name, getattr(self, name), 0, MAX_BLOCKS, "Give a block count or index.", zero_ok=True)

    @property
    def block_guards_on(self) -> bool:
        return (self.inter_block_vram_guard_mb > 0 or self.inter_block_guard_emergency_mb > 0
                or self.late_block_guard_target_mb > 0)

    @property
    def any_on(self) -> bool:
        return self.block_guards_on or self.step_boundary_cleanup_mb > 0


@dataclass(frozen=True)
class GuardEvent:
    """One clean-up: which guard, where, what was free before (and after) and the threshold it crossed."""

    kind: str                       # one of KINDS
    block: int | None               # block index; None at a step boundary
    step: int                       # sampler step the block belongs to / the step that just ended
    free_mb: float                  # free before the clean-up
    threshold_mb: int
    free_after_mb: float | None = None
    released_mb: float = 0.0        # resident weights released (comfy-aimdo VBAR pages) beyond the emptied cache
    release_failure: str | None = None  # why the host's release raised (ReleaseFailed), else None

    @property
    def recovered_mb(self) -> float | None:
        return None if self.free_after_mb is None else self.free_after_mb - self.free_mb


@dataclass(frozen=True)
class GuardReport:
    """What the guards did in one run."""

    settings: GuardSettings
    events: tuple[GuardEvent, ...]
    blocks_seen: int
    steps_seen: int

    def count(self, kind: str) -> int:
        return sum(1 for e in self.events if e.kind == kind)

    @property
    def lines(self) -> tuple[str, ...]:
        return tuple(f"{e.kind} at step {e.step}" + ("" if e.block is None else f" block {e.block}")
                     + f": {e.free_mb:.0f} MB free < {e.threshold_mb} MB"
                     + ("" if e.free_after_mb is None else f", {e.free_after_mb:.0f} MB after")
                     + (f" ({e.released_mb:.0f} MB of resident weights released: they are copied in through the "
                        "cast buffers for the rest of the run)" if e.released_mb else "")
                     + (f"; releasing resident weights failed: {e.release_failure}" if e.release_failure else "")
                     for e in self.events)


class Guards:
    """The guards of one sampling run; call `on_block_end` after each block and `on_step_end` after each step."""

    def __init__(self, settings: GuardSettings, reader: Reader, cleanup: Cleanup, release: Release | None = None) -> None:
        self.settings = settings
        self._read = reader
        self._cleanup = cleanup
        self._release = release
        self._events: list[GuardEvent] = []
        self._blocks_seen = 0           # running block count across steps: cooldowns count these
        self._step = 0
        self._steps_seen = 0
        self._cooldown_left = 0         # blocks the inter-block guard still skips
        self._emergency_cooldown_left = 0
        self._armed = True              # inter-block hysteresis

    @property
    def events(self) -> tuple[GuardEvent, ...]:
        return tuple(self._events)

    @property
    def armed(self) -> bool:
        return self._armed

    @property
    def cooldown_left(self) -> int:
        return self._cooldown_left

    def report(self) -> GuardReport:
        return GuardReport(self.settings, self.events, self._blocks_seen, self._steps_seen)

    def _rearm_level_mb(self) -> int:
        return self.settings.inter_block_vram_guard_mb + self.settings.inter_block_guard_hysteresis_mb

    def _fire(self, kind: str, block: int | None, free: int, threshold_mb: int) -> GuardEvent:
        self._cleanup()
        after = self._read()
        released, failure = 0, None
        if self._release is not None and kind in RELEASING and after < threshold_mb * MIB:
            try:
                released = self._release(threshold_mb * MIB - after)
            except ReleaseFailed as error:  # named reason: the host's release raised; recorded on the event
                failure = str(error)
            after = self._read()
        if self.settings.inter_block_vram_guard_mb > 0:
            self._armed = after >= self._rearm_level_mb() * MIB
        event = GuardEvent(kind, block, self._step, free / MIB, threshold_mb, after / MIB, released / MIB, failure)
        self._events.append(event)
        return event

    def on_block_end(self, index: int, *, step: int | None = None) -> GuardEvent | None:
        """After block `index`: at most one clean-up (emergency, then late-block, then inter-block)."""
        s = self.settings
        if step is not None:
            self._step = step
        self._blocks_seen += 1
        in_cooldown = self._cooldown_left > 0
        in_emergency_cooldown = self._emergency_cooldown_left > 0
        self._cooldown_left = max(0, self._cooldown_left - 1)
        self._emergency_cooldown_left = max(0, self._emergency_cooldown_left - 1)
        if not s.block_guards_on:
            return None
        free = self._read()
        if s.inter_block_vram_guard_mb > 0 and free >= self._rearm_level_mb() * MIB:
            self._armed = True
        if s.inter_block_guard_emergency_mb > 0 and free < s.inter_block_guard_emergency_mb * MIB \
                and not in_emergency_cooldown:
            self._emergency_cooldown_left = s.inter_block_guard_emergency_cooldown_blocks
            self._cooldown_left = s.inter_block_guard_cooldown_blocks
            return self._fire("emergency", index, free, s.inter_block_guard_emergency_mb)
        if s.late_block_guard_target_mb > 0 and index >= s.late_block_guard_start \
                and free < s.late_block_guard_target_mb * MIB:
            self._cooldown_left = s.inter_block_guard_cooldown_blocks
            return self._fire("late_block", index, free, s.late_block_guard_target_mb)
        if s.inter_block_vram_guard_mb > 0 and free < s.inter_block_vram_guard_mb * MIB \
                and self._armed and not in_cooldown:
            self._cooldown_left = s.inter_block_guard_cooldown_blocks
            return self._fire("inter_block", index, free, s.inter_block_vram_guard_mb)
        return None

    def on_step_end(self, step: int) -> GuardEvent | None:
        """After sampler step `step`: clean up when less than `step_boundary_cleanup_mb` is free."""
        self._step = step
        self._steps_seen += 1
        threshold = self.settings.step_boundary_cleanup_mb
        event = None
        if threshold > 0:
            free = self._read()
            if free < threshold * MIB:
                event = self._fire("step_boundary", None, free, threshold)
        self._step = step + 1
        return event


def cuda_free_reader(device) -> Reader:
    """Free bytes on a CUDA `device` outside PyTorch's cache."""
    import torch

    def read() -> int:
        return int(torch.cuda.mem_get_info(device)[0])

    return read


def cuda_cleanup(device) -> Cleanup:
    """Synchronize `device` and hand PyTorch's cached blocks back to the driver."""
    import torch

    def cleanup() -> None:
        torch.cuda.synchronize(device)
        torch.cuda.empty_cache()

    return cleanup


def guards_for_device(settings: GuardSettings, device, release: Release | None = None) -> Guards:
    """Guards reading and cleaning a CUDA device; on any other device they never fire (nothing to read).

    release: how the emergency and late-block guards give back resident weights when emptying the cache is
    not enough (the host's: comfy-aimdo's VBAR pages of the sampled model); None = they only empty the cache.
    """
    import torch

    dev = torch.device(device)
    if dev.type == "cuda":
        return Guards(settings, cuda_free_reader(dev), cuda_cleanup(dev), release)
    return Guards(GuardSettings(), lambda: 0, lambda: None)
