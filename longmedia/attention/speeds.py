"""How fast each exact backend ran on this device, as a plain fact: `MeasuredSpeeds` (measured by speed_timing.py).

auto orders the exact backends that fit by these timings where they cover the job (the same head_dim, dtype and
length class); backends the timing did not cover follow the timed ones in the registry's static `speed_rank`. Where
no timing could run (CPU, the timing refused or switched off) the fact carries only why (`refused`), and the static
rank alone orders them. The dispatcher reads the fact; it never measures. Torch-free.
"""

from __future__ import annotations

from dataclasses import dataclass

LENGTH_CLASSES = (("short", 16384, 8192), ("medium", 65536, 32768), ("long", None, 65536))
"""(class, keys below this bound (None: any), rows timed for the class)."""


def length_class(seq_len: int) -> str:
    """The class a call over `seq_len` keys falls in ("short" < 16384 <= "medium" < 65536 <= "long")."""
    for name, below, _ in LENGTH_CLASSES:
        if below is None or seq_len < below:
            return name
    raise AssertionError("the last length class has no bound")


def timing_rows(cls: str) -> int:
    """Keys (and query rows) timed for a length class."""
    for name, _, rows in LENGTH_CLASSES:
        if name == cls:
            return rows
    raise ValueError(f"length class must be one of {', '.join(c[0] for c in LENGTH_CLASSES)}, got {cls!r}")


@dataclass(frozen=True)
class MeasuredSpeeds:
    """Seconds per timed call of each exact backend timed on one device, for one (head_dim, dtype, length class).

    device: what ran it ("NVIDIA H200 sm90, torch 2.9.0, CUDA 12.8"). seconds: (backend, seconds per call),
    fastest first. skipped: (backend, why it was not timed). rows / heads: the timed shape (q rows = keys).
    cached: read back from the on-disk cache. refused: non-empty = no timing ran, and why (then seconds is
    empty and auto keeps the static rank). probe_s: wall seconds the probe ran in this process to give these
    timings (compilation and JIT of every candidate included); 0 when the cache held them all. It runs before the
    first model call, so a sampler step's clock does not see it, and a clock that starts at the node does.
    """

    device: str
    head_dim: int
    dtype: str
    length_class: str
    rows: int = 0
    heads: int = 0
    seconds: tuple[tuple[str, float], ...] = ()
    skipped: tuple[tuple[str, str], ...] = ()
    cached: bool = False
    refused: str = ""
    probe_s: float = 0.0

    def __post_init__(self) -> None:
        if self.length_class not in {c[0] for c in LENGTH_CLASSES}:
            raise ValueError(f"MeasuredSpeeds.length_class must be a length class, got {self.length_class!r}")
        if not self.probe_s >= 0:
            raise ValueError(f"MeasuredSpeeds.probe_s must be >= 0 s, got {self.probe_s!r}")
        for name, value in self.seconds:
            if not isinstance(value, (int, float)) or not value > 0:
                raise ValueError(f"MeasuredSpeeds.seconds of {name!r} must be > 0, got {value!r}")
        object.__setattr__(self, "seconds", tuple(sorted(self.seconds, key=lambda item: item[1])))

    @classmethod
    def none(cls, why: str, *, device: str = "", head_dim: int = 0, dtype: str = "", seq_len: int = 1
             ) -> "MeasuredSpeeds":
        """No timing ran (`why`): the static rank orders the exact backends."""
        return cls(device=device, head_dim=head_dim, dtype=dtype, length_class=length_class(seq_len), refused=why)

    def covers(self, *, head_dim: int, dtype: str, seq_len: int) -> bool:
        """Whether these timings were taken for a job of this head_dim, dtype and length class."""
        return (not self.refused and bool(self.seconds) and self.head_dim == head_dim and self.dtype == dtype
                and self.length_class == length_class(seq_len))

    def seconds_of(self, name: str) -> float | None:
        return dict(self.seconds).get(name)

    @property
    def order(self) -> tuple[str, ...]:
        return tuple(name for name, _ in self.seconds)

    def summary(self) -> str:
        """One line for the plan's reasons."""
        if self.refused:
            return f"exact backends in the static rank (attention/backends.py): no speed timing ({self.refused})"
        skipped = "; ".join(f"{name} ({why})" for name, why in self.skipped)
        if not self.seconds:
            return (f"exact backends in the static rank (attention/backends.py): the speed timing on {self.device} "
                    f"timed none" + (f" ({skipped})" if skipped else " (no candidate installed)"))
        timed = ", ".join(f"{name} {s * 1e3:.3g} ms" for name, s in self.seconds)
        line = (f"exact backends ordered by speed measured on {self.device} (timed at head_dim {self.head_dim}, "
                f"{self.dtype}, {self.length_class} class, {self.rows} rows x {self.heads} heads): {timed}")
        if skipped:
            line += f"; not timed: {skipped}"
        if self.cached:
            line += "; read from the on-disk cache"
        elif self.probe_s:
            line += (f"; timed now, in {self.probe_s:.1f} s before the first model call (once per device, torch "
                     f"and CUDA version: kept on disk)")
        return line
