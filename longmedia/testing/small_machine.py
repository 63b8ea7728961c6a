"""A stand-in machine for host-RAM tests: RAM available and ComfyUI's pins, which `free_pins` turns back into
available RAM, as ComfyUI's `model_management.free_pins` does (`facts()` is what `comfy/host/ram.py` reads)."""

from __future__ import annotations

from dataclasses import dataclass, field

from ..report.memory import RamFacts


@dataclass
class SmallMachine:
    available: int
    pinned: int
    read: int | None = 0
    asked: list[int] = field(default_factory=list)   # every free_pins request, in order

    def free_pins(self, wanted: int) -> int:
        self.asked.append(wanted)
        freed = min(wanted, self.pinned)
        self.pinned -= freed
        self.available += freed
        return freed

    def facts(self) -> RamFacts:
        return RamFacts(available=lambda: self.available, pinned=lambda: self.pinned, free_pins=self.free_pins,
                        read_bytes=lambda: self.read)
