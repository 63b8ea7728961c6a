"""Retakes: a bounded cache of finished segments, keyed by everything a segment depends on, as a hash chain.

`RetakeCache` holds finished segments (a pass's output tensors and its record) in host RAM up to `ram_bytes`;
past that the least recently used ones spill to files in `spill_dir` (ComfyUI's temp folder, given by the
caller), and past `ram_bytes + disk_bytes` the least recently used ones are dropped. Its owner decides its
lifetime (the LongMedia Retakes node's output, held by ComfyUI's output cache; see docs/ARCHITECTURE.md); its
spill folder is removed when it is cleared or collected.

`RetakeChain` is one run's walk through the segments: segment i's key is sha256(key of segment i-1, the job's
digest, segment i's own digest), so a change to anything segment k depends on changes the keys of k and of
every later segment and of none before it. A hit is served only while every object its key knew by identity
(the `pins`, see `fingerprint.py`) is alive.
"""

from __future__ import annotations

import hashlib
import pickle
import shutil
import uuid
import weakref
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path

import torch

from ..errors import check_int
from ..units import MIB

__all__ = ["RetakeCache", "RetakeChain", "RetakeReport", "CachedSegment", "chain_key", "DEFAULT_RAM_MB",
           "DEFAULT_DISK_MB", "MAX_CACHE_MB"]

DEFAULT_RAM_MB = 2048
DEFAULT_DISK_MB = 16384
MAX_CACHE_MB = 1 << 20


def chain_key(previous: str | None, job: str, segment: str) -> str:
    """The key of a segment: the previous segment's key, the job's digest and the segment's own digest."""
    return hashlib.sha256(f"{previous or 'first'}|{job}|{segment}".encode()).hexdigest()


@dataclass(frozen=True)
class RetakeReport:
    """The cache after a run: what it holds, where, its bounds, and what this run took from it."""

    entries: int
    ram_bytes: int
    disk_bytes: int
    ram_bound_bytes: int
    disk_bound_bytes: int
    reused: tuple[int, ...] = ()          # segments served from the cache this run
    sampled: tuple[int, ...] = ()         # segments sampled this run
    spilled: int = 0                      # entries moved to disk, over the cache's life
    evicted: int = 0                      # entries dropped for the bound, over the cache's life
    off_reason: str | None = None         # why this run could not use the cache (it sampled everything)
    unreadable: int = 0                   # spill files missing or damaged: those segments sampled again
    spill_error: str | None = None        # why spilling stopped (a full temp folder): those entries were dropped

    def notes(self) -> tuple[str, ...]:
        out = ()
        if self.unreadable:
            out += (f"retakes: {self.unreadable} spilled segment file(s) were missing or damaged in the temp "
                    "folder; those segments were sampled again",)
        if self.spill_error:
            out += (f"retakes: could not spill to the temp folder ({self.spill_error}); segments past the RAM "
                    "bound were dropped, not cached",)
        return out

    def line(self) -> str:
        if self.off_reason and not self.reused:
            return f"retakes: not used this run ({self.off_reason}); every segment sampled"
        reused = ", ".join(str(i) for i in self.reused) or "none"
        sampled = ", ".join(str(i) for i in self.sampled) or "none"
        off = f"; later segments not cached ({self.off_reason})" if self.off_reason else ""
        return (f"retakes: reused segments {reused}; sampled {sampled}; cache {self.entries} segments, "
                f"{self.ram_bytes / MIB:.1f} MiB in RAM (bound {self.ram_bound_bytes / MIB:.0f} MiB) + "
                f"{self.disk_bytes / MIB:.1f} MiB in the temp folder (bound {self.disk_bound_bytes / MIB:.0f} MiB)"
                f"{off}")


@dataclass(frozen=True)
class CachedSegment:
    """A finished segment as the cache gives it back: its tensors and the record of the run that sampled it."""

    tensors: tuple[torch.Tensor, ...]
    record: object


@dataclass
class _Entry:
    tensors: tuple[torch.Tensor, ...] | None      # None once spilled
    path: Path | None
    nbytes: int
    record: object
    pins: tuple[weakref.ref, ...] = field(default_factory=tuple)


def _nbytes(tensors) -> int:
    return sum(t.numel() * t.element_size() for t in tensors)


class RetakeCache:
    """Finished segments by key, bounded: `ram_bytes` in RAM, then `disk_bytes` spilled to `spill_dir`."""

    def __init__(self, ram_bytes: int, disk_bytes: int, spill_dir: Path | str | None = None) -> None:
        self.ram_bound = check_int("ram_mb", ram_bytes // MIB, 0, MAX_CACHE_MB, "Give megabytes.") * MIB
        self.disk_bound = check_int("disk_mb", disk_bytes // MIB, 0, MAX_CACHE_MB, "Give megabytes.") * MIB
        self.spill_dir = Path(spill_dir) / f"longmedia_retakes_{uuid.uuid4().hex}" if spill_dir is not None else None
        self._entries: OrderedDict[str, _Entry] = OrderedDict()   # least recently used first
        self.spilled = 0
        self.evicted = 0
        self.unreadable = 0
        self.spill_error: str | None = None   # set by the first failed spill: no further spill is tried
        if self.spill_dir is not None:
            weakref.finalize(self, shutil.rmtree, self.spill_dir, True)

    def __len__(self) -> int:
        return len(self._entries)

    @property
    def ram_bytes(self) -> int:
        return sum(e.nbytes for e in self._entries.values() if e.tensors is not None)

    @property
    def disk_bytes(self) -> int:
        return sum(e.nbytes for e in self._entries.values() if e.path is not None)

    def get(self, key: str) -> CachedSegment | None:
        """The segment stored under `key` if every object its key knew by identity is still the same, else None."""
        entry = self._entries.get(key)
        if entry is None:
            return None
        if any(ref() is None for ref in entry.pins):
            self._drop(key)
            return None
        self._entries.move_to_end(key)
        if entry.tensors is not None:
            return CachedSegment(tuple(t.clone() for t in entry.tensors), entry.record)
        try:
            tensors = tuple(torch.load(entry.path, weights_only=True))
        except (OSError, RuntimeError, EOFError, pickle.UnpicklingError):  # named: a spill file deleted or cut short
            self._drop(key)                                                 # outside LongMedia: sample it again
            self.unreadable += 1
            return None
        return CachedSegment(tensors, entry.record)

    def put(self, key: str, tensors: tuple[torch.Tensor, ...], record: object,
            pins: tuple[weakref.ref, ...] = ()) -> None:
        """Store a finished segment (copies of its tensors on the CPU), then keep the bounds."""
        if key in self._entries:
            self._drop(key)
        kept = tuple(t.detach().to("cpu", copy=True).contiguous() for t in tensors)
        self._entries[key] = _Entry(kept, None, _nbytes(kept), record, tuple(pins))
        self._bound()

    def clear(self) -> None:
        for key in list(self._entries):
            self._drop(key)
        if self.spill_dir is not None:
            shutil.rmtree(self.spill_dir, ignore_errors=True)

    def report(self, reused: tuple[int, ...] = (), sampled: tuple[int, ...] = (),
               off_reason: str | None = None) -> RetakeReport:
        return RetakeReport(len(self._entries), self.ram_bytes, self.disk_bytes, self.ram_bound, self.disk_bound,
                            reused, sampled, self.spilled, self.evicted, off_reason, self.unreadable,
                            self.spill_error)

    def _drop(self, key: str) -> None:
        entry = self._entries.pop(key)
        if entry.path is not None:
            entry.path.unlink(missing_ok=True)

    def _bound(self) -> None:
        while self._entries and self.ram_bytes + self.disk_bytes > self.ram_bound + self.disk_bound:
            self._drop(next(iter(self._entries)))
            self.evicted += 1
        for key, entry in self._entries.items():   # oldest first
            if self.ram_bytes <= self.ram_bound:
                break
            if entry.tensors is None:
                continue
            if self.spill_dir is None or self.disk_bytes + entry.nbytes > self.disk_bound:
                continue
            if self.spill_error is not None:
                break
            path = self.spill_dir / f"{key}.pt"
            try:
                self.spill_dir.mkdir(parents=True, exist_ok=True)
                torch.save(list(entry.tensors), path)
            except (OSError, RuntimeError) as error:  # named: a full or unwritable temp folder (torch's writer
                path.unlink(missing_ok=True)         # raises RuntimeError): no partial file, no further spill
                self.spill_error = str(error).splitlines()[0][:160] if str(error) else type(error).__name__
                break
            entry.tensors, entry.path = None, path
            self.spilled += 1
        while self._entries and self.ram_bytes > self.ram_bound:   # nowhere to spill: drop the oldest in RAM
            key = next(k for k, e in self._entries.items() if e.tensors is not None)
            self._drop(key)
            self.evicted += 1


class RetakeChain:
    """One run's walk through its segments: chained keys, lookups and stores, and what was reused or sampled.

    `cache` None, or `job` None (the job's digest could not be made: `off_reason` says why), samples everything.
    """

    def __init__(self, cache: RetakeCache | None, job: str | None, pins: tuple[weakref.ref, ...] = (),
                 off_reason: str | None = None) -> None:
        self.cache = cache if job is not None else None
        self.job, self.pins, self.off_reason = job, tuple(pins), off_reason
        self.previous: str | None = None
        self.reused: list[int] = []
        self.sampled: list[int] = []

    def key(self, segment_digest: str | None) -> str | None:
        """The next segment's key (None once any digest is missing: every later segment samples)."""
        if self.job is None or segment_digest is None or (self.previous is None and self.reused + self.sampled):
            self.previous = None
            return None
        self.previous = chain_key(self.previous, self.job, segment_digest)
        return self.previous

    def lookup(self, index: int, key: str | None) -> CachedSegment | None:
        hit = self.cache.get(key) if self.cache is not None and key is not None else None
        (self.reused if hit is not None else self.sampled).append(index)
        return hit

    def store(self, key: str | None, tensors: tuple[torch.Tensor, ...], record: object,
              pins: tuple[weakref.ref, ...] = ()) -> None:
        if self.cache is not None and key is not None:
            self.cache.put(key, tensors, record, self.pins + tuple(pins))

    def report(self) -> RetakeReport | None:
        if self.cache is None:
            if self.off_reason is None:
                return None
            return RetakeReport(0, 0, 0, 0, 0, (), tuple(self.sampled), off_reason=self.off_reason)
        return self.cache.report(tuple(self.reused), tuple(self.sampled), self.off_reason)
