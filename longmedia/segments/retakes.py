"""Retakes: a bounded cache of finished segments, keyed by everything a segment depends on, as a hash chain.

`RetakeCache` keeps finished segments (a pass's output tensors and its record). With a folder (ComfyUI's temp
folder, given by the caller) every segment whose key knows nothing by identity is written at once to the durable
store (`retake_store.RetakeStore`, bounded by `disk_bytes`, least recently used dropped first), where any later
cache finds it: the LongMedia Retakes node's output (this object) may be evicted by ComfyUI's output cache between
two queues and the next cache still serves every earlier segment. The most recent segments are also kept in RAM
up to `ram_bytes`. A segment whose key knows an object by identity (a model from a loader ComfyUI has no record
of) lives in this cache only: in RAM, then past `ram_bytes` in a private file, within `disk_bytes` too; its
private files are removed when the cache is cleared or collected. `clear()` empties the durable store as well
(ComfyUI's free-memory request: `comfy/retakes/free_request.py`).

`RetakeChain` is one run's walk through the segments: segment i's key is sha256(key of segment i-1, the job's
digest, segment i's own digest), so a change to anything segment k depends on changes the keys of k and of
every later segment and of none before it. A hit is served only while every object its key knew by identity
(the `pins`, see `fingerprint.py`) is alive.
"""

from __future__ import annotations

import hashlib
import os
import pickle
import uuid
import weakref
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path

import torch

from ..errors import check_int
from ..units import MIB
from .record_codec import RecordCodecError, encode_record
from .retake_store import RetakeStore, UnreadableEntry

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
    spilled: int = 0                      # segments written to the temp folder, over the cache's life
    evicted: int = 0                      # entries dropped for the bounds, over the cache's life
    off_reason: str | None = None         # why this run could not use the cache (it sampled everything)
    unreadable: int = 0                   # stored files missing or damaged: those segments sampled again
    spill_error: str | None = None        # why writing stopped (a full temp folder): those entries were dropped
    in_memory_only: str | None = None     # why this run's segments stay in this cache only (identity in the key)

    def notes(self) -> tuple[str, ...]:
        out = ()
        if self.unreadable:
            out += (f"retakes: {self.unreadable} stored segment file(s) were missing or damaged in the temp "
                    "folder; those segments were sampled again",)
        if self.spill_error:
            out += (f"retakes: could not spill to the temp folder ({self.spill_error}); segments past the RAM "
                    "bound were dropped, not cached, and none outlives this Retakes node's output",)
        if self.in_memory_only:
            out += (f"retakes: this job's key knows {self.in_memory_only} by identity, not by content: its "
                    "segments are kept by this Retakes node's output only, and another prompt that makes ComfyUI "
                    "drop that output (or the object) samples them again",)
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
    tensors: tuple[torch.Tensor, ...] | None      # None: in this cache's private file only
    path: Path | None                             # the durable file, or this cache's private file
    nbytes: int
    record: object
    pins: tuple[weakref.ref, ...] = field(default_factory=tuple)

    @property
    def private(self) -> bool:
        return self.path is not None and self.path.suffix == ".private"


def _nbytes(tensors) -> int:
    return sum(t.numel() * t.element_size() for t in tensors)


def _remove_private(folder: Path, owner: str) -> None:
    for path in folder.glob(f"*.{owner}.private"):
        path.unlink(missing_ok=True)


class RetakeCache:
    """Finished segments by key: every durable one in `spill_dir`'s store (bounded by `disk_bytes`), the most
    recent in RAM (bounded by `ram_bytes`)."""

    def __init__(self, ram_bytes: int, disk_bytes: int, spill_dir: Path | str | None = None,
                 fingerprint: str | None = None) -> None:
        self.ram_bound = check_int("ram_mb", ram_bytes // MIB, 0, MAX_CACHE_MB, "Give megabytes.") * MIB
        self.disk_bound = check_int("disk_mb", disk_bytes // MIB, 0, MAX_CACHE_MB, "Give megabytes.") * MIB
        self.store = RetakeStore(spill_dir, fingerprint) if spill_dir is not None else None
        self.spill_dir = self.store.folder if self.store is not None else None
        self.owner = uuid.uuid4().hex
        self._entries: OrderedDict[str, _Entry] = OrderedDict()   # least recently used first
        self._stored: set[str] = set()   # keys this cache wrote to or read from the durable store
        self.spilled = 0
        self.evicted = 0
        self.unreadable = 0
        self.spill_error: str | None = None   # set by the first failed write: no further write is tried
        if self.store is not None:
            weakref.finalize(self, _remove_private, self.store.folder, self.owner)

    def __len__(self) -> int:
        stored = set(self.store.keys()) if self.store is not None else set()
        return len(stored | set(self._entries))

    @property
    def ram_bytes(self) -> int:
        return sum(e.nbytes for e in self._entries.values() if e.tensors is not None)

    @property
    def disk_bytes(self) -> int:
        return (self.store.bytes() if self.store is not None else 0) + self._private_bytes()

    def _private_bytes(self) -> int:
        return sum(e.nbytes for e in self._entries.values() if e.private)

    def get(self, key: str) -> CachedSegment | None:
        """The segment stored under `key` (here, or in the durable store by an earlier cache) if every object its
        key knew by identity is still the same, else None."""
        entry = self._entries.get(key)
        if entry is None:
            return self._from_store(key)
        if any(ref() is None for ref in entry.pins):
            self._drop(key)
            return None
        self._entries.move_to_end(key)
        if entry.tensors is not None:
            if entry.path is not None:
                self._touch(entry.path)
            return CachedSegment(tuple(t.clone() for t in entry.tensors), entry.record)
        try:
            tensors = tuple(torch.load(entry.path, weights_only=True))
        except (OSError, RuntimeError, EOFError, pickle.UnpicklingError):  # named: a file deleted or cut short
            self._drop(key)                                                 # outside LongMedia: sample it again
            self.unreadable += 1
            return None
        return CachedSegment(tensors, entry.record)

    def put(self, key: str, tensors: tuple[torch.Tensor, ...], record: object,
            pins: tuple[weakref.ref, ...] = ()) -> None:
        """Store a finished segment (copies of its tensors on the CPU): in the durable store when its key knows
        nothing by identity, and in RAM; then keep the bounds."""
        if key in self._entries:
            self._drop(key)
        kept = tuple(t.detach().to("cpu", copy=True).contiguous() for t in tensors)
        nbytes = _nbytes(kept)
        path = self._write(key, kept, record) if not pins else None
        self._entries[key] = _Entry(kept, path, nbytes, record, tuple(pins))
        self._bound()

    def clear(self) -> None:
        """Everything: this cache's entries and files, and the durable store (every cache's)."""
        for key in list(self._entries):
            self._drop(key)
        self._stored.clear()
        if self.store is not None:
            self.store.clear()

    def report(self, reused: tuple[int, ...] = (), sampled: tuple[int, ...] = (),
               off_reason: str | None = None, in_memory_only: str | None = None) -> RetakeReport:
        return RetakeReport(len(self), self.ram_bytes, self.disk_bytes, self.ram_bound, self.disk_bound,
                            reused, sampled, self.spilled, self.evicted, off_reason, self.unreadable,
                            self.spill_error, in_memory_only)

    # -- the parts ------------------------------------------------------------------------------------------
    def _from_store(self, key: str) -> CachedSegment | None:
        if self.store is None:
            return None
        try:
            found = self.store.read(key)
        except UnreadableEntry:   # named: a damaged file (removed by the store): sample the segment again
            self._stored.discard(key)
            self.unreadable += 1
            return None
        if found is None:
            if key in self._stored:   # written or read here, and not dropped by this cache's bound: deleted
                self._stored.discard(key)
                self.unreadable += 1
            return None
        self._stored.add(key)
        tensors, record = found
        self._entries[key] = _Entry(tensors, self.store.path(key), _nbytes(tensors), record)
        self._bound()
        return CachedSegment(tuple(t.clone() for t in tensors), record)

    def _write(self, key: str, tensors: tuple[torch.Tensor, ...], record: object) -> Path | None:
        """The durable file of a segment (None: no store, no room, a record without a JSON form, or writing
        failed)."""
        if self.store is None or self.spill_error is not None or _nbytes(tensors) > self.disk_bound:
            return None
        try:
            text = encode_record(record)
        except RecordCodecError:   # named: a record this codec does not write: kept in RAM only
            return None
        try:
            path = self.store.write(key, tensors, text)
        except (OSError, RuntimeError) as error:  # named: a full or unwritable temp folder (torch's writer raises
            self._failed(error)                    # RuntimeError): nothing partial stays, no further write
            return None
        self.spilled += 1
        self._stored.add(key)
        self._evict(self.store.bound(self.disk_bound, self._private_bytes(), keep=key))
        return path

    def _evict(self, keys: list[str]) -> None:
        """Keys the store's bound removed: no longer stored, and their RAM copies stay (they still serve)."""
        self._stored.difference_update(keys)
        self.evicted += len(keys)

    def _failed(self, error: BaseException) -> None:
        self.spill_error = str(error).splitlines()[0][:160] if str(error) else type(error).__name__

    def _touch(self, path: Path) -> None:
        """A durable file served from RAM is recently used too (the store's bound drops the oldest)."""
        try:
            os.utime(path)
        except FileNotFoundError:   # named: removed meanwhile by a bound; the RAM copy still serves
            pass

    def _drop(self, key: str) -> None:
        entry = self._entries.pop(key)
        self._stored.discard(key)
        if entry.path is not None:
            entry.path.unlink(missing_ok=True)

    def _bound(self) -> None:
        for key, entry in list(self._entries.items()):   # oldest first
            if self.ram_bytes <= self.ram_bound:
                break
            if entry.tensors is None:
                continue
            if entry.path is not None:                    # in the durable store: the RAM copy goes, `get` reads it
                del self._entries[key]
                continue
            if self._spill(key, entry):
                continue
            self._entries.pop(key)
            self.evicted += 1

    def _spill(self, key: str, entry: _Entry) -> bool:
        """A key with identity parts past the RAM bound: to this cache's private file, if the disk bound allows."""
        if self.store is None or self.spill_error is not None:
            return False
        if self.store.bytes() + self._private_bytes() + entry.nbytes > self.disk_bound:
            self._evict(self.store.bound(self.disk_bound, self._private_bytes() + entry.nbytes))
            if self.store.bytes() + self._private_bytes() + entry.nbytes > self.disk_bound:
                return False
        try:
            entry.path = self.store.write_private(f"{key}.{self.owner}", entry.tensors)
        except (OSError, RuntimeError) as error:  # named: as in `_write`
            self._failed(error)
            return False
        entry.tensors = None
        self.spilled += 1
        return True
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
        self.in_memory_only: str | None = None   # what the keys knew by identity (the segments stay in `cache`)

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
            every = self.pins + tuple(pins)
            if every and self.in_memory_only is None:
                self.in_memory_only = _named(every)
            self.cache.put(key, tensors, record, every)

    def report(self) -> RetakeReport | None:
        if self.cache is None:
            if self.off_reason is None:
                return None
            return RetakeReport(0, 0, 0, 0, 0, (), tuple(self.sampled), off_reason=self.off_reason)
        return self.cache.report(tuple(self.reused), tuple(self.sampled), self.off_reason, self.in_memory_only)


def _named(pins: tuple[weakref.ref, ...]) -> str:
    """What pins hold, by type: "a ModelX and 2 Tensor"."""
    counts: dict[str, int] = {}
    for ref in pins:
        obj = ref()
        if obj is not None:
            name = type(obj).__qualname__
            counts[name] = counts.get(name, 0) + 1
    parts = [f"a {n}" if c == 1 else f"{c} {n}" for n, c in sorted(counts.items())]
    return " and ".join(parts) or "an object"
