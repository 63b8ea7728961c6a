"""bench.block_profile's tally: a torch.profiler run read into time per kernel and category, its tables, its rows.

On CUDA the time is each kernel's (memcpy's, memset's) own device time: the device events of the profile, each
categorised with the ops it ran inside (the op that launched it, found by the profiler's correlation id, and that
op's callers). On the CPU it is each op's self CPU time, categorised with its callers. `total_us` is the profiler's
own total, read separately from its averages (`key_averages`) the way torch's table sums it, so the categories can be
checked against it (they add up to it unless events were lost or counted twice).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from bench._kernel_categories import CATEGORIES, LABELS, category_of

TOP = 5
NAME_CHARS = 300  # of a kernel's name kept in the rows (C++ template names run to thousands)


@dataclass(frozen=True)
class KernelTime:
    """One kernel (or op) name in one category: launches and time over all profiled calls."""

    name: str
    category: str
    launches: int
    us: float


@dataclass(frozen=True)
class PathProfile:
    """One path's profile over `calls` block calls. timer: "self CUDA" or "self CPU"."""

    path: str
    timer: str
    calls: int
    total_us: float
    kernels: tuple[KernelTime, ...]
    wall_ms: float = float("nan")      # median per call, timed outside the profiler
    rel_err: float = float("nan")      # output against the stock path's (0 for stock)
    facts: dict = field(default_factory=dict, compare=False)  # what ran: chunks, attention, weights

    def category_ms(self, category: str) -> float:
        """Per call."""
        return sum(k.us for k in self.kernels if k.category == category) / self.calls / 1e3

    @property
    def total_ms(self) -> float:
        """The profiler's total per call."""
        return self.total_us / self.calls / 1e3

    def top(self, category: str, n: int = TOP) -> list[KernelTime]:
        return sorted((k for k in self.kernels if k.category == category), key=lambda k: -k.us)[:n]


def _is_device(event) -> bool:
    return getattr(event.device_type, "name", str(event.device_type)) != "CPU"


def _scopes(op) -> list[str]:
    """`op`'s name and its callers' names, innermost first (none for no op)."""
    out = []
    while op is not None:
        out.append(op.name)
        op = op.cpu_parent
    return out


def tally(events: Iterable, averages: Iterable, *, device: bool) -> tuple[tuple[KernelTime, ...], float]:
    """(kernel times, the profiler's total in us) of one profile: `events` = prof.events(), `averages` =
    prof.key_averages(). device: time the device events (CUDA) or the CPU ops (the CPU)."""
    events = [e for e in events if not e.is_async]
    acc: dict[tuple[str, str], list] = {}

    def add(name: str, scopes: Sequence[str], us: float) -> None:
        slot = acc.setdefault((name, category_of(name, scopes)), [0, 0.0])
        slot[0] += 1
        slot[1] += us

    if device:
        # the frontend (torch op and record_function) events by correlation id: a device event's
        # linked_correlation_id is the id of the op that launched it (CUDA runtime calls carry one too)
        ops = {e.id: e for e in events if not _is_device(e) and getattr(e, "linked_correlation_id", 0) == 0}
        for e in events:
            if _is_device(e) and not getattr(e, "is_user_annotation", False):
                add(e.name, _scopes(ops.get(getattr(e, "linked_correlation_id", 0))), float(e.self_device_time_total))
        total = sum(float(a.self_device_time_total) for a in averages
                    if _is_device(a) and not getattr(a, "is_user_annotation", False))
    else:
        for e in events:
            if not _is_device(e):
                add(e.name, _scopes(e.cpu_parent), float(e.self_cpu_time_total))
        total = sum(float(a.self_cpu_time_total) for a in averages if not _is_device(a))
    kernels = tuple(KernelTime(name, cat, n, us) for (name, cat), (n, us) in acc.items())
    return kernels, total


def merged(parts: Sequence[tuple[tuple[KernelTime, ...], float]]) -> tuple[tuple[KernelTime, ...], float]:
    """Several profiles' tallies (one per call) as one."""
    acc: dict[tuple[str, str], list] = {}
    for kernels, _ in parts:
        for k in kernels:
            slot = acc.setdefault((k.name, k.category), [0, 0.0])
            slot[0] += k.launches
            slot[1] += k.us
    return (tuple(KernelTime(n, c, a, us) for (n, c), (a, us) in acc.items()), sum(t for _, t in parts))


def _short(name: str, n: int = 110) -> str:
    name = " ".join(name.split()).replace("|", "/")
    return name if len(name) <= n else name[: n - 3] + "..."


def tables(profiles: Sequence[PathProfile]) -> list[str]:
    """The category table (ms per call and share of the path's total) and each category's top kernels."""
    head = "| path | " + " | ".join(LABELS[c] for c in CATEGORIES) + " | total (timer) | wall ms/call | rel err |"
    lines = [head, "|" + "---|" * (len(CATEGORIES) + 4)]
    for p in profiles:
        cells = []
        for c in CATEGORIES:
            ms = p.category_ms(c)
            cells.append(f"{ms:.3f} ({100 * ms / p.total_ms if p.total_ms else 0:.1f}%)")
        lines.append(f"| {p.path} | " + " | ".join(cells) + f" | {p.total_ms:.3f} ({p.timer}) | {p.wall_ms:.3f} | "
                     f"{p.rel_err:.1e} |")
    lines += ["", f"Top {TOP} kernels per category (ms and launches per call):", "",
              "| path | category | kernel | launches | ms |", "|---|---|---|---|---|"]
    for p in profiles:
        for c in CATEGORIES:
            for k in p.top(c):
                lines.append(f"| {p.path} | {LABELS[c]} | `{_short(k.name)}` | {k.launches / p.calls:g} | "
                             f"{k.us / p.calls / 1e3:.3f} |")
    return lines


def row(p: PathProfile, meta: dict) -> dict:
    """One JSON row per path: the figures per call, the top kernels per category, and what ran (`meta`)."""
    return {"kind": "block_profile", **meta, **p.facts, "path": p.path, "timer": p.timer, "calls": p.calls,
            "total_ms": round(p.total_ms, 4), "wall_ms": round(p.wall_ms, 4), "rel_err": p.rel_err,
            "categories_ms": {c: round(p.category_ms(c), 4) for c in CATEGORIES},
            "top": {c: [[k.name[:NAME_CHARS], round(k.launches / p.calls, 2), round(k.us / p.calls / 1e3, 4)]
                        for k in p.top(c)] for c in CATEGORIES}}


def read_rows(path) -> list[dict]:
    with open(path, encoding="utf-8") as f:
        return [r for r in (json.loads(line) for line in f if line.strip()) if r.get("kind") == "block_profile"]


def compare(before: Sequence[dict], after: Sequence[dict]) -> list[str]:
    """Before/after per path present in both: ms per call per category and the total, and after / before."""
    lines = ["| path | category | before ms | after ms | after / before |", "|---|---|---|---|---|"]
    after_by = {r["path"]: r for r in after}
    for b in before:
        a = after_by.get(b["path"])
        if a is None:
            continue
        pairs = [(LABELS[c], b["categories_ms"][c], a["categories_ms"][c]) for c in CATEGORIES]
        pairs.append((f"total ({b['timer']})", b["total_ms"], a["total_ms"]))
        pairs.append(("wall", b["wall_ms"], a["wall_ms"]))
        for label, x, y in pairs:
            ratio = f"{y / x:.3f}" if x else "-"
            lines.append(f"| {b['path']} | {label} | {x:.3f} | {y:.3f} | {ratio} |")
    missing = sorted({r["path"] for r in before} ^ set(after_by))
    if missing:
        lines += ["", "in one file only: " + ", ".join(missing)]
    return lines


__all__ = ["KernelTime", "PathProfile", "compare", "merged", "read_rows", "row", "tables", "tally"]
