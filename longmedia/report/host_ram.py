"""What one run did with host RAM: ComfyUI's pins kept within the plan's budget, the room LongMedia made before its
own large host allocations, and the weights read ahead from disk. A frozen report, serialised into the run report
as its `host_ram` object."""

from __future__ import annotations

from dataclasses import asdict, dataclass

from ..units import GIB


@dataclass(frozen=True)
class RoomEvent:
    """One time LongMedia freed ComfyUI's pins: before a pass (to the plan's pin budget) or before a host
    allocation of its own (`what`, `wanted_bytes`), with RAM available before and after and the pins freed."""

    what: str
    wanted_bytes: int
    available_before_bytes: int
    available_after_bytes: int
    freed_pin_bytes: int

    def line(self) -> str:
        return (f"{self.what}: {self.freed_pin_bytes / GIB:.2f} GiB of ComfyUI's pins freed, RAM available "
                f"{self.available_before_bytes / GIB:.2f} -> {self.available_after_bytes / GIB:.2f} GiB")


@dataclass(frozen=True)
class HostRamReport:
    """pins_*: ComfyUI's page-locked weight copies (TOTAL_PINNED_MEMORY) when the pass started and ended;
    pin_budget_bytes: the plan's (None: no plan for host RAM); disk_read_bytes: what this process read from disk
    during the pass (/proc/self/io; None where the OS does not say); prefetch_*: the weights read ahead into the page
    cache (`execution/disk_prefetch.py`); model_calls: to state the reads per call."""

    pin_budget_bytes: int | None
    pins_at_start_bytes: int | None
    pins_at_end_bytes: int | None
    available_at_start_bytes: int | None
    available_at_end_bytes: int | None
    events: tuple[RoomEvent, ...] = ()
    disk_read_bytes: int | None = None
    prefetch_advised_bytes: int = 0
    prefetch_blocks: int = 0
    model_calls: int = 0
    notes: tuple[str, ...] = ()

    @property
    def freed_pin_bytes(self) -> int:
        return sum(e.freed_pin_bytes for e in self.events)

    @property
    def disk_read_per_call_bytes(self) -> int | None:
        if self.disk_read_bytes is None or not self.model_calls:
            return None
        return self.disk_read_bytes // self.model_calls

    def lines(self) -> tuple[str, ...]:
        out = []
        if self.pins_at_end_bytes is not None:
            budget = "" if self.pin_budget_bytes is None else f" (plan's budget {self.pin_budget_bytes / GIB:.2f} GiB)"
            out.append(f"host RAM: ComfyUI's pins {_g(self.pins_at_start_bytes)} at the start, "
                       f"{_g(self.pins_at_end_bytes)} at the end{budget}; RAM available {_g(self.available_at_start_bytes)}"
                       f" -> {_g(self.available_at_end_bytes)}")
        out.extend(e.line() for e in self.events if e.freed_pin_bytes)
        if self.disk_read_bytes is not None:
            per = self.disk_read_per_call_bytes
            out.append(f"read from disk during the pass: {self.disk_read_bytes / GIB:.2f} GiB"
                       + (f" over {self.model_calls} model calls ({per / GIB:.2f} GiB a call on average; the first "
                          "also reads every weight ComfyUI loads)" if per is not None else ""))
        if self.prefetch_blocks:
            out.append(f"read ahead into the page cache while blocks ran: {self.prefetch_advised_bytes / GIB:.2f} GiB "
                       f"over {self.prefetch_blocks} block reads")
        out.extend(self.notes)
        return tuple(out)

    def to_dict(self) -> dict:
        return asdict(self) | {"freed_pin_bytes": self.freed_pin_bytes,
                               "disk_read_per_call_bytes": self.disk_read_per_call_bytes}


def _g(n: int | None) -> str:
    return "n/a" if n is None else f"{n / GIB:.2f} GiB"


__all__ = ["HostRamReport", "RoomEvent"]
