"""Device memory at one moment (`MemorySnapshot`), and the one way to read it (`read_memory`).

The residency boundary, a segment's baseline and the OOM report all hold a `MemorySnapshot`. torch's facts are
read here; the host's (comfy-aimdo's VRAM and VBAR pages, ComfyUI's pinned RAM) come in through `HostMemory`,
whose readings `longmedia/comfy/` supplies. A host reading that raises `ReadingFailed` is recorded on the
snapshot's `failures` and reads None: never a crash, never silent.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class MemorySnapshot:
    """Device memory at one moment; None where the device or the install cannot say."""

    device: str
    allocated_bytes: int | None               # live tensors (torch allocator)
    reserved_bytes: int | None                # held by the torch allocator, live or cached
    free_bytes: int | None                    # free on the device outside torch's cache
    total_bytes: int | None
    aimdo_vram_usage_bytes: int | None = None   # comfy-aimdo's VRAM usage (dynamic VRAM)
    aimdo_vbar_reclaimable_bytes: int | None = None   # weight pages comfy-aimdo's VBARs could give back
    vbar_resident_bytes: int | None = None    # model weights resident through comfy-aimdo's VBARs
    pinned_ram_bytes: int | None = None       # page-locked RAM ComfyUI holds
    failures: tuple[str, ...] = ()            # host readings that raised (their value is then None)

    @property
    def cached_bytes(self) -> int | None:
        """Held by torch's allocator but not handed out: fragmentation when large."""
        if self.reserved_bytes is None or self.allocated_bytes is None:
            return None
        return self.reserved_bytes - self.allocated_bytes


class ReadingFailed(RuntimeError):
    """A host reading raised (comfy-aimdo 0.6+ raises where older versions failed silently); the message is the
    reason `read_memory` records."""


@dataclass(frozen=True)
class HostMemory:
    """The host's readings, each optional (None: the host cannot say); each may raise `ReadingFailed`."""

    aimdo_usage: Callable[[], int | None] | None = None
    vbar_reclaimable: Callable[[torch.device], int | None] | None = None
    vbar_resident: Callable[[], int | None] | None = None
    pinned_ram: Callable[[], int | None] | None = None


@dataclass(frozen=True)
class RamFacts:
    """How a run reads and frees host RAM: `available()` (bytes; None: unknown), `pinned()` (ComfyUI's pinned
    bytes; None outside ComfyUI), `free_pins(bytes) -> freed` and `read_bytes()` (this process's bytes read from
    disk so far; None where the OS does not say)."""

    available: Callable[[], int | None]
    pinned: Callable[[], int | None]
    free_pins: Callable[[int], int]
    read_bytes: Callable[[], int | None]


Reader = Callable[[object], MemorySnapshot]
"""device -> its snapshot: what the residency boundary and a segment's baseline read with (tests hand in theirs)."""


def read_memory(device: object = None, host: HostMemory = HostMemory()) -> MemorySnapshot:
    """A snapshot of `device` (None: the current CUDA device, else the CPU); torch's figures are None off CUDA
    (there is no device memory to read), the host's are read wherever it gives them."""
    if device is None:
        dev = torch.device("cuda", torch.cuda.current_device()) if torch.cuda.is_available() else torch.device("cpu")
    else:
        dev = torch.device(device)
    alloc = reserved = free = total = None
    if dev.type == "cuda":
        free, total = (int(v) for v in torch.cuda.mem_get_info(dev))
        alloc, reserved = int(torch.cuda.memory_allocated(dev)), int(torch.cuda.memory_reserved(dev))
    failures: list[str] = []
    return MemorySnapshot(str(dev), alloc, reserved, free, total,
                          _host(host.aimdo_usage, failures), _host(host.vbar_reclaimable, failures, dev),
                          _host(host.vbar_resident, failures), _host(host.pinned_ram, failures), tuple(failures))


def _host(reading: Callable[..., int | None] | None, failures: list[str], *args: object) -> int | None:
    if reading is None:
        return None
    try:
        value = reading(*args)
    except ReadingFailed as error:  # named reason: recorded on the snapshot and logged
        failures.append(str(error))
        logging.warning("LongMedia memory reading: %s", error)
        return None
    return None if value is None else int(value)
