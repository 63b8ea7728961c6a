"""Host RAM during a run, through ComfyUI's own pin API: the pins kept within the plan's budget before each pass,
room made before LongMedia's own large host allocations, the next blocks' weights read ahead from disk, and what
the process read from disk.

ComfyUI (Dynamic VRAM) maps the checkpoint and copies the weights it streams into pinned host buffers while RAM is
available (`comfy.pinned_memory.pin_memory` -> `model_management.ensure_pin_budget`: it keeps 2 GiB free). On a
16-32 GB machine those pins fill RAM, and a host allocation of ours inside a node (the latent leaving the device,
a decode chunk) then meets the kernel's OOM killer. Pins are freed only through `model_management.free_pins`, the
call ComfyUI's own RAM pressure uses (other models' pins first, the active model's last). Every ComfyUI name is
feature-detected; nothing is patched. `RamFacts` is injectable so that tests can stand in a small machine.
"""

from __future__ import annotations

import inspect
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ...execution.disk_prefetch import DiskPrefetch, FileSlice
from ...planning.host_ram import PIN_BUDGET_FLOOR_BYTES
from ...report.host_ram import HostRamReport, RoomEvent
from ...report.memory import RamFacts
from ...units import GIB

PIN_SUBSETS = ("weights", "weights-loaded")  # ComfyUI's per-module pin slots for weights (comfy/pinned_memory.py)
PROC_IO = Path("/proc/self/io")


def available_ram() -> int | None:
    """RAM available as ComfyUI sees it: `comfy.system_memory.virtual_memory_available()` where this ComfyUI has it
    (container limits, v0.35+), else psutil's `available` (what 0.33 reads); None without either."""
    system_memory = sys.modules.get("comfy.system_memory")
    reader = getattr(system_memory, "virtual_memory_available", None)
    if callable(reader):
        return int(reader())
    try:
        import psutil
    except ImportError:  # named reason: psutil is ComfyUI's requirement, not ours
        return None
    return int(psutil.virtual_memory().available)


def comfy_pinned_bytes() -> int | None:
    mm = sys.modules.get("comfy.model_management")
    value = getattr(mm, "TOTAL_PINNED_MEMORY", None) if mm is not None else None
    return int(value) if value is not None else None


def comfy_free_pins(wanted: int) -> int:
    """Free up to `wanted` bytes of ComfyUI's pins with its own `free_pins` (the active model's last); 0 where this
    ComfyUI has none."""
    mm = sys.modules.get("comfy.model_management")
    free_pins = getattr(mm, "free_pins", None)
    if not callable(free_pins) or wanted <= 0:
        return 0
    try:
        takes_active = "evict_active" in inspect.signature(free_pins).parameters
    except (TypeError, ValueError):  # named reason: not introspectable
        takes_active = False
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_available() and torch.cuda.is_initialized():
        torch.cuda.synchronize()   # the active model's pins may feed copies still in flight on the offload stream
    freed = free_pins(int(wanted), evict_active=True) if takes_active else free_pins(int(wanted))
    return int(freed or 0)


def process_read_bytes(path: Path = PROC_IO) -> int | None:
    """`read_bytes` of /proc/self/io: bytes this process caused to be read from storage; None elsewhere."""
    try:
        text = path.read_text()
    except OSError:  # named reason: not Linux, or /proc not mounted
        return None
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key.strip() == "read_bytes":
            return int(value.strip())
    return None


def comfy_ram_facts() -> RamFacts:
    return RamFacts(available=available_ram, pinned=comfy_pinned_bytes, free_pins=comfy_free_pins,
                    read_bytes=process_read_bytes)


def _pinned(module: Any) -> bool:
    pins = module.__dict__.get("_pins") or {}
    return any((pins.get(subset) or {}).get("pin") is not None for subset in PIN_SUBSETS)


def _resident(module: Any) -> bool:
    prefetch = module.__dict__.get("_prefetch")
    return isinstance(prefetch, dict) and bool(prefetch.get("resident"))


def _file_slice(tensor: Any) -> FileSlice | None:
    data = getattr(tensor, "_qdata", tensor)  # comfy-kitchen's QuantizedTensor keeps its bytes in _qdata
    storage = getattr(data, "untyped_storage", None)
    info = getattr(storage(), "_comfy_tensor_file_slice", None) if callable(storage) else None
    if info is None or not info.size:
        return None
    ref = info.file_ref
    fd = ref if isinstance(ref, int) else getattr(ref, "fileno", lambda: None)()
    return None if fd is None else FileSlice(int(fd), int(info.offset), int(info.size))


def block_file_slices(block: Any) -> tuple[FileSlice, ...]:
    """The checkpoint ranges of `block`'s weights that a model call reads from the file: those neither pinned by
    ComfyUI nor resident on the device (ComfyUI's per-module state, read only); () for weights not mapped from a
    file (a model built in memory)."""
    out = []
    for module in block.modules():
        if _pinned(module) or _resident(module):
            continue
        for name in ("weight", "bias"):
            tensor = module.__dict__.get("_parameters", {}).get(name)
            found = _file_slice(tensor) if tensor is not None else None
            if found is not None:
                out.append(found)
    return tuple(out)


class HostRamGuard:
    """One pass's host RAM: `start()` brings ComfyUI's pins within the plan's budget, `make_room(bytes, what)` before
    each large host allocation of ours, `on_block(i)` reads the next blocks ahead and, where `watch` is set, frees
    pins when RAM available has fallen below half of ComfyUI's floor; `finish(calls)` the report.

    The watch is a safety net, not a margin: ComfyUI pins down to its own floor during a pass and stops there, but
    with `--fast-disk` its pin budget follows only its pinned-memory limit (a share of total RAM), and under a
    16 GiB limit on a larger machine the process was killed (docs/lab/2026-12-07-host-ram-limits.md). Freeing only
    below half the floor leaves ComfyUI's own steady state (about 1.8 GiB available) alone, so no pin is freed and
    read again on every block."""

    def __init__(self, facts: RamFacts, pin_budget: int | None, *, floor: int = PIN_BUDGET_FLOOR_BYTES,
                 prefetch: DiskPrefetch | None = None, watch: bool = False) -> None:
        self.facts, self.pin_budget, self.floor, self.prefetch = facts, pin_budget, floor, prefetch
        self.watch = watch
        self.events: list[RoomEvent] = []
        self.notes: list[str] = []
        self._start: tuple[int | None, int | None, int | None] = (None, None, None)
        self._watch_frees, self._watch_freed = 0, 0

    @property
    def hooks_blocks(self) -> bool:
        """Whether the pass must tell `on_block` when each block starts."""
        return self.prefetch is not None or self.watch

    def start(self) -> None:
        self._start = (self.facts.pinned(), self.facts.available(), self.facts.read_bytes())
        pinned = self._start[0]
        if self.pin_budget is not None and pinned is not None and pinned > self.pin_budget:
            self._free(pinned - self.pin_budget, "before the pass: pins brought within the plan's budget",
                       pinned - self.pin_budget)

    def make_room(self, wanted: int, what: str) -> RoomEvent | None:
        """Free pins until `wanted` bytes plus ComfyUI's own floor are available, before we allocate them."""
        available = self.facts.available()
        if available is None or wanted <= 0:
            return None
        shortfall = int(wanted) + self.floor - available
        if shortfall <= 0:
            return None
        return self._free(shortfall, f"before {what}", int(wanted))

    def _free(self, amount: int, what: str, wanted: int) -> RoomEvent:
        before = self.facts.available()
        freed = self.facts.free_pins(int(amount))
        after = self.facts.available()
        event = RoomEvent(what, int(wanted), int(before or 0), int(after or 0), int(freed))
        self.events.append(event)
        if freed < amount:
            self.notes.append(f"{what}: ComfyUI freed {freed / 2**30:.2f} of the {amount / 2**30:.2f} GiB of pins "
                              "asked for (what was left is not pinned by a model ComfyUI can release)")
        return event

    def on_block(self, index: int) -> None:
        if self.prefetch is not None:
            self.prefetch.on_block(index)
        if self.watch:
            self._watch_block(index)

    def _watch_block(self, index: int) -> None:
        available = self.facts.available()
        if available is None or available >= self.floor // 2:
            return
        wanted = self.floor - available
        freed = self.facts.free_pins(int(wanted))
        if not self._watch_frees:   # the first as an event; the rest counted (a churning pass would list hundreds)
            self.events.append(RoomEvent(f"block {index}: RAM available below half of ComfyUI's floor", int(wanted),
                                         int(available), int(self.facts.available() or 0), int(freed)))
        self._watch_frees += 1
        self._watch_freed += int(freed)

    def finish(self, model_calls: int) -> HostRamReport:
        if self.prefetch is not None:
            self.prefetch.close()
            self.notes.extend(self.prefetch.failures[:3])
        if self._watch_frees > 1:
            self.notes.append(f"RAM available fell below half of ComfyUI's floor at {self._watch_frees} block starts: "
                              f"{self._watch_freed / GIB:.2f} GiB of ComfyUI's pins freed in all (ComfyUI pinned "
                              "beyond the RAM available; started with --fast-disk?)")
        pinned0, available0, read0 = self._start
        read1 = self.facts.read_bytes()
        read = None if read0 is None or read1 is None else max(0, read1 - read0)
        p = self.prefetch
        return HostRamReport(self.pin_budget, pinned0, self.facts.pinned(), available0, self.facts.available(),
                             tuple(self.events), read, p.advised_bytes if p else 0, p.advised_blocks if p else 0,
                             int(model_calls), tuple(self.notes))


def host_ram_guard(plan: Any, blocks: Sequence[Any], facts: RamFacts | None = None, *,
                   read_ahead_blocks: int | None = None) -> HostRamGuard:
    """The pass's guard from its plan (`plan.host_ram`: the pin budget, whether weights stream from disk and how many
    blocks to read ahead). read_ahead_blocks None: read ahead where the plan asks for it
    (`plan.host_ram.prefetch_blocks`, 0 by default: on an H100 with 32 GiB of host RAM it made the step 4 % slower
    and read 1.6 GiB more per model call, docs/lab/2026-12-07-host-ram.md); N: the next N blocks whatever the plan
    says (0: never)."""
    facts = facts if facts is not None else comfy_ram_facts()
    host = getattr(plan, "host_ram", None)
    # the pin budget is ComfyUI's dynamic-VRAM pin cache (free_pins reaches only dynamic models); without dynamic
    # VRAM the planner's PinningDecision applies, on the clone (clone_install)
    budget = host.pin_budget_bytes if host is not None and host.dynamic_vram else None
    if read_ahead_blocks is None:
        planned = host is not None and host.streams_from_disk
        read_ahead_blocks = host.prefetch_blocks if planned else 0
    if isinstance(read_ahead_blocks, bool) or int(read_ahead_blocks) < 0:
        raise ValueError(f"read_ahead_blocks is {read_ahead_blocks!r}: a count of blocks, 0 or more, or None")
    reader = None
    if blocks and read_ahead_blocks > 0:
        reader = DiskPrefetch(lambda i: block_file_slices(blocks[i]), len(blocks), int(read_ahead_blocks))
    # RAM is watched at each block where the plan says it is short (weights stream from disk) under dynamic VRAM
    watch = bool(blocks) and budget is not None and bool(getattr(host, "streams_from_disk", False))
    return HostRamGuard(facts, budget, prefetch=reader, watch=watch)


__all__ = ["HostRamGuard", "available_ram", "block_file_slices", "comfy_ram_facts", "host_ram_guard",
           "process_read_bytes"]
