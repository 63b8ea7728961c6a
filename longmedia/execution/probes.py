"""Diagnostics of a streamed run: observers the executor calls at each phase and for each weight it holds.

The executor calls an `Observer` at the edges of every phase (`run_block`: "stock_attention" or
"streamed_attention", then "stock_mlp" or "streamed_mlp"; `chunked_final_forward`: "final layer") and the
ComfyUI adapter tells it where each held weight came from (`comfy/patching/weight_origin.py`: resident, vbar, cast_buffer).
None of this runs by default (`NO_OBSERVER`). Two probes are the product's own, switched on by name
(`probes_named`, read from LONGMEDIA_PROBES by `comfy/diagnostics_env.py`):

- "nan" (`FiniteProbe`): the first phase whose packed sequence stops being finite (a device sync per phase edge);
- "weights" (`WeightOriginProbe`): how many held weights came from where, and whether two held cast-buffer
  weights ever shared one offload stream.

Several observers compose (`Observers`). What they saw is `ProbeReport`, which the run report carries.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Protocol

import torch

from ..errors import LongMediaInputError

FINAL_PHASE = "final layer"
ORIGINS = ("resident", "vbar", "cast_buffer")
Say = Callable[[str], None]


class Observer(Protocol):
    """What the executor tells a diagnostic; every method returns nothing and must not change the tensors."""

    def phase_in(self, phase: str, x: torch.Tensor) -> None: ...

    def phase_out(self, phase: str, x: torch.Tensor, *outputs: torch.Tensor) -> None: ...

    def weight_held(self, origin: str, stream: int | None, module) -> None: ...

    def weight_released(self, origin: str, stream: int | None, module) -> None: ...

    def lines(self) -> tuple[str, ...]: ...


class Quiet:
    """The default observer: sees nothing, says nothing (subclass it to watch one thing)."""

    def phase_in(self, phase: str, x: torch.Tensor) -> None:
        pass

    def phase_out(self, phase: str, x: torch.Tensor, *outputs: torch.Tensor) -> None:
        pass

    def weight_held(self, origin: str, stream: int | None, module) -> None:
        pass

    def weight_released(self, origin: str, stream: int | None, module) -> None:
        pass

    def lines(self) -> tuple[str, ...]:
        return ()


NO_OBSERVER: Observer = Quiet()


@dataclass(frozen=True)
class Observers:
    """Several observers as one, called in order."""

    members: tuple[Observer, ...]

    def phase_in(self, phase: str, x: torch.Tensor) -> None:
        for m in self.members:
            m.phase_in(phase, x)

    def phase_out(self, phase: str, x: torch.Tensor, *outputs: torch.Tensor) -> None:
        for m in self.members:
            m.phase_out(phase, x, *outputs)

    def weight_held(self, origin: str, stream: int | None, module) -> None:
        for m in self.members:
            m.weight_held(origin, stream, module)

    def weight_released(self, origin: str, stream: int | None, module) -> None:
        for m in self.members:
            m.weight_released(origin, stream, module)

    def lines(self) -> tuple[str, ...]:
        return tuple(line for m in self.members for line in m.lines())


@dataclass(frozen=True)
class ProbeReport:
    """What the run's probes saw, one line each (what a user pastes into a bug report)."""

    lines: tuple[str, ...]


def _finite(t: torch.Tensor) -> bool:
    return bool(torch.isfinite(t).all())


def _quiet(line: str) -> None:
    pass


class FiniteProbe(Quiet):
    """The first executor phase (and, apart, the first final-layer call) whose input or output holds NaN or inf.

    Each phase edge is checked (a device sync each) until the first finding; `say` hears a finding when it is
    made (e.g. the log), `lines()` repeats it with the count of phase calls checked."""

    def __init__(self, say: Say = _quiet):
        self.say = say
        self.calls = self.final_calls = 0
        self.finding: str | None = None
        self.final_finding: str | None = None
        self._before = True

    def phase_in(self, phase: str, x: torch.Tensor) -> None:
        if phase == FINAL_PHASE:
            self.final_calls += 1
        elif self.finding is None:
            self.calls += 1
            self._before = _finite(x)

    def phase_out(self, phase: str, x: torch.Tensor, *outputs: torch.Tensor) -> None:
        if phase == FINAL_PHASE:
            if self.final_finding is None and not all(_finite(t) for t in (x, *outputs)):
                parts = ", ".join(f"{name} {_finite(t)}" for name, t in zip(("video", "audio"), outputs))
                self.final_finding = (f"NAN PROBE: final layer call {self.final_calls}: input finite {_finite(x)}, "
                                      f"{parts}")
                self.say(self.final_finding)
            return
        if self.finding is not None:
            return
        after = _finite(x)
        if not (self._before and after):
            amax = float(x.float().abs().nan_to_num(0, 0, 0).max())
            self.finding = (f"NAN PROBE: phase {phase} call {self.calls}: input finite {self._before}, output finite "
                            f"{after}, finite max |x| {amax:.4g}, rows {x.shape[0]}")
            self.say(self.finding)

    def lines(self) -> tuple[str, ...]:
        found = tuple(f for f in (self.finding, self.final_finding) if f is not None)
        return found + (f"NAN PROBE: {self.calls} phase calls checked, non-finite seen: {self.finding is not None}",)


class WeightOriginProbe(Quiet):
    """Where each weight the executor held came from (`ORIGINS`), and how often a cast-buffer weight was taken while
    another one held on the same offload stream (`shared_stream`: the pair could overwrite each other)."""

    def __init__(self, say: Say = _quiet):
        self.say = say
        self.counts = {**{origin: 0 for origin in ORIGINS}, "shared_stream": 0}
        self._held: list[tuple[str, int | None]] = []

    def weight_held(self, origin: str, stream: int | None, module) -> None:
        if origin == "cast_buffer" and ("cast_buffer", stream) in self._held:
            self.counts["shared_stream"] += 1
            if self.counts["shared_stream"] == 1:
                self.say(f"WEIGHT PROBE: two held cast-buffer weights on one offload stream ({type(module).__name__} "
                         f"{tuple(module.weight.shape)})")
        self.counts[origin] = self.counts.get(origin, 0) + 1
        self._held.append((origin, stream))

    def weight_released(self, origin: str, stream: int | None, module) -> None:
        if (origin, stream) in self._held:
            self._held.remove((origin, stream))

    def lines(self) -> tuple[str, ...]:
        return (f"WEIGHT PROBE: {self.counts}",)


PROBES: tuple[tuple[str, Callable[[Say], Observer]], ...] = (("nan", FiniteProbe), ("weights", WeightOriginProbe))


def probe_names(text: str) -> tuple[str, ...]:
    """Probe names from a comma-separated text ("nan,weights"; "all" for every one), checked."""
    names = tuple(n.strip() for n in text.split(",") if n.strip())
    known = tuple(name for name, _ in PROBES)
    if names == ("all",):
        return known
    unknown = [n for n in names if n not in known]
    if unknown:
        raise LongMediaInputError("LONGMEDIA_PROBES", text, "comma-separated probe names from " + ", ".join(known)
                                  + " (or all)", f"Remove {', '.join(unknown)}, or unset LONGMEDIA_PROBES.")
    return names


def probes_named(names: tuple[str, ...], say: Say = _quiet) -> Observers:
    """The named product probes composed, each telling `say` its findings as they happen."""
    made = dict(PROBES)
    return Observers(tuple(made[n](say) for n in names))
