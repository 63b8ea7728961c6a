"""Times the exact backends on a CUDA device: the fact `MeasuredSpeeds` that orders auto's exact backends.

A short timing at first use: each exact backend that could serve the job (declared exact, installed, one call per
query chunk, no score matrix, float K/V, supporting the job's dtype, head_dim and device) runs once untimed (JIT,
autotune, cuDNN plan) and then `REPEATS` times under CUDA events, on q/k/v of `TIMED_HEADS` heads laid out as H3's
fused projection buffer, at the rows of the job's length class (speeds.LENGTH_CLASSES). The fastest repeat counts.

Results are cached on disk per device, torch and CUDA version (`SpeedCache`: one JSON file in a directory its owner
names; longmedia/comfy/host/attention_speeds.py owns it in ComfyUI). A backend installed after a timing (flash-attn-4, say)
is timed on the next run and merged in; one that failed stays skipped with its reason. `cached_speeds` reads what a
timing would return without timing anything (a forecast's plan). Nothing here is module state.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import tempfile
import time
import warnings
from collections.abc import Callable, Collection
from pathlib import Path

import torch

from .registry import BackendRegistry, BackendSpec, BuildContext
from .speeds import MeasuredSpeeds, length_class, timing_rows

TIMED_HEADS = 8
REPEATS = 3
CACHE_FILE = "attention_speeds.json"
CACHE_FORMAT = 2  # 2: keys carry the timed code's fingerprint
TIMED_PACKAGES = ("comfy-kitchen", "flash-attn-4", "flash_attn", "triton", "torch")
"""Distributions whose code the timing covers (kernels we call through them): their versions enter the fingerprint."""
HEADROOM_BYTES = 256 << 20
"""Free memory a timed call must leave (the timing never pushes a card to its edge)."""
NO_ROOM = "no room to time it now: "
"""Starts a skip reason that is about this moment's free memory: never cached, the next timing tries again."""

Timer = Callable[[str, Callable[[], object]], float]
"""(backend name, one call) -> seconds per call (compile/JIT excluded)."""


def device_label(device: torch.device) -> str:
    """What the timings belong to: GPU name, compute capability, torch and CUDA versions."""
    name = torch.cuda.get_device_name(device)
    major, minor = torch.cuda.get_device_capability(device)
    return f"{name} sm{major}{minor}, torch {torch.__version__}, CUDA {torch.version.cuda}"


def candidates(registry: BackendRegistry, available: Collection[str], *, head_dim: int, dtype: torch.dtype,
               capability: tuple[int, int] | None, rows: int) -> tuple[list[BackendSpec], list[tuple[str, str]]]:
    """The backends the timing covers (auto's exact candidates in the planned path), and the rest with why not."""
    timed, passed = [], []
    for spec in registry.backends:
        if not spec.exact or spec.name == "existing":
            continue
        if spec.name not in available:
            continue  # not installed: never a candidate, so not reported
        why = ("materialises the scores" if spec.score_bytes else "int8 K/V (the planned path holds float K/V)"
               if spec.quantized_kv else f"{spec.call_shape} calls" if spec.call_shape != "query_chunks" else "")
        if not why:
            ok, why = spec.supports(dtype=dtype, head_dim=head_dim, seq_len=rows, device_capability=capability)
            why = "" if ok else why
        if why:
            passed.append((spec.name, why))
        else:
            timed.append(spec)
    return timed, passed


def cuda_event_timer(device: torch.device, repeats: int = REPEATS) -> Timer:
    """One untimed call (compilation, JIT, autotune), then the fastest of `repeats` calls under CUDA events."""
    def timer(name: str, call: Callable[[], object]) -> float:
        del name
        call()
        torch.cuda.synchronize(device)
        best = float("inf")
        for _ in range(repeats):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            call()
            end.record()
            end.synchronize()
            best = min(best, start.elapsed_time(end) / 1e3)
        return best
    return timer


def _fused_qkv(rows: int, heads: int, head_dim: int, dtype: torch.dtype, device: torch.device, seed: int = 0):
    """q, k, v [1, heads, rows, head_dim] as strided views of one [rows, 3 * heads * head_dim] buffer (H3's)."""
    g = torch.Generator(device=device).manual_seed(seed)
    fused = torch.randn(rows, 3 * heads * head_dim, generator=g, device=device, dtype=dtype)
    return tuple(t.view(1, rows, heads, head_dim).transpose(1, 2) for t in fused.split(heads * head_dim, dim=-1))


def measure_speeds(registry: BackendRegistry, specs: list[BackendSpec], *, device: torch.device, label: str,
                   head_dim: int, dtype: torch.dtype, cls: str, timer: Timer, heads: int = TIMED_HEADS,
                   free_bytes: int | None = None) -> MeasuredSpeeds:
    """Time `specs` (from `candidates`) at the rows of length class `cls`; a backend that cannot run is skipped
    with why (its build fails, the pinned SDPA kernel refuses the inputs, it runs out of memory)."""
    rows = timing_rows(cls)
    q, k, v = _fused_qkv(rows, heads, head_dim, dtype, device)
    seconds, skipped = [], []
    for spec in specs:
        need = spec.working_bytes(seq_len=rows, heads=heads, head_dim=head_dim, dtype_bytes=dtype.itemsize,
                                  query_rows=rows)
        if free_bytes is not None and need + HEADROOM_BYTES > free_bytes:
            skipped.append((spec.name, f"{NO_ROOM}needs {need / 2**30:.2f} GiB, {free_bytes / 2**30:.2f} GiB free"))
            continue
        try:
            fn = registry.build(spec.name, BuildContext())
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                fn(q, k, v, q_offset=0)  # fails here, not inside the timer, when the backend cannot run
            fell_back = [w for w in caught if type(w.message).__name__ == "SdpaFallbackWarning"]
            if fell_back:
                skipped.append((spec.name, "its pinned kernel refused the timing's inputs"))
                continue
            seconds.append((spec.name, float(timer(spec.name, lambda fn=fn, q=q, k=k, v=v: fn(q, k, v, q_offset=0)))))
        # RuntimeError: the backend's build or kernel failed here (BackendUnavailableError, CUDA OOM, a refusal)
        except RuntimeError as err:
            first = str(err).splitlines()[0][:160] if str(err) else ""
            room = NO_ROOM if isinstance(err, torch.OutOfMemoryError) else ""
            skipped.append((spec.name, f"{room}{type(err).__name__}: {first}"))
    return MeasuredSpeeds(device=label, head_dim=head_dim, dtype=str(dtype).removeprefix("torch."), length_class=cls,
                          rows=rows, heads=heads, seconds=tuple(seconds), skipped=tuple(skipped))


def code_fingerprint() -> str:
    """A digest of the code the timing covers: our kernels and attention backends (their source files) and the
    versions of the libraries they call (`TIMED_PACKAGES`), so an upgraded kernel is timed again, never served old
    timings (STYLE 12)."""
    from importlib import metadata

    root = Path(__file__).resolve().parents[1]
    h = hashlib.sha256()
    for path in sorted([*(root / "kernels").glob("*.py"), *(root / "attention").glob("*.py")]):
        h.update(path.relative_to(root).as_posix().encode())
        h.update(path.read_bytes())
    for name in TIMED_PACKAGES:
        try:
            version = metadata.version(name)
        except metadata.PackageNotFoundError:  # named: a library not installed times nothing
            version = "-"
        h.update(f"{name}={version}".encode())
    return h.hexdigest()[:16]


class SpeedCache:
    """Timing results on disk: one JSON file in `directory`, one entry per (device label, head_dim, dtype, class,
    code fingerprint).

    The owner names the directory (ComfyUI's user directory in longmedia/comfy/host/attention_speeds.py, a temporary
    one in tests). Writes go through a temporary file and a rename, so a reader never sees half a file.
    `fingerprint`: the timed code's digest (None: `code_fingerprint()`, read once per cache)."""

    def __init__(self, directory: str | os.PathLike, fingerprint: str | None = None) -> None:
        self.directory = Path(directory)
        self.fingerprint = code_fingerprint() if fingerprint is None else fingerprint

    @property
    def path(self) -> Path:
        return self.directory / CACHE_FILE

    def key(self, label: str, head_dim: int, dtype: str, cls: str) -> str:
        return f"{label} | head_dim {head_dim} | {dtype} | {cls} | code {self.fingerprint}"

    def _entries(self) -> dict:
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return {}
        except (OSError, ValueError):  # unreadable or not JSON: time again and write a fresh file
            return {}
        if not isinstance(data, dict) or data.get("format") != CACHE_FORMAT:
            return {}
        entries = data.get("entries")
        return entries if isinstance(entries, dict) else {}

    def read(self, label: str, head_dim: int, dtype: str, cls: str) -> MeasuredSpeeds | None:
        entry = self._entries().get(self.key(label, head_dim, dtype, cls))
        if not isinstance(entry, dict):
            return None
        try:
            return MeasuredSpeeds(device=label, head_dim=head_dim, dtype=dtype, length_class=cls,
                                  rows=int(entry["rows"]), heads=int(entry["heads"]),
                                  seconds=tuple((str(n), float(s)) for n, s in entry["seconds"].items()),
                                  skipped=tuple((str(n), str(w)) for n, w in entry["skipped"].items()), cached=True)
        except (KeyError, TypeError, ValueError, AttributeError):  # an entry of another shape: time again
            return None

    def write(self, speeds: MeasuredSpeeds) -> None:
        entries = self._entries()
        entries[self.key(speeds.device, speeds.head_dim, speeds.dtype, speeds.length_class)] = {
            "rows": speeds.rows, "heads": speeds.heads, "seconds": dict(speeds.seconds), "skipped": dict(speeds.skipped)}
        self.directory.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=self.directory, prefix=".attention_speeds.", suffix=".json")
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump({"format": CACHE_FORMAT, "entries": entries}, f, indent=1, sort_keys=True)
        os.replace(tmp, self.path)


def _lookup(registry: BackendRegistry, cache: SpeedCache | None, device: torch.device, *, head_dim: int,
            dtype: torch.dtype, cls: str, label: str | None, capability: tuple[int, int] | None,
            available: Collection[str] | None):
    """(label, candidates, passed over, cached entry or None, the candidates it lacks): what a timing would time.
    Reads the device's name and capability and the disk, never times anything."""
    label = device_label(device) if label is None else label
    capability = torch.cuda.get_device_capability(device) if capability is None and device.type == "cuda" else capability
    avail = registry.available_names() if available is None else frozenset(available)
    specs, passed = candidates(registry, avail, head_dim=head_dim, dtype=dtype, capability=capability,
                               rows=timing_rows(cls))
    cached = cache.read(label, head_dim, str(dtype).removeprefix("torch."), cls) if cache is not None else None
    known = set() if cached is None else {n for n, _ in cached.seconds} | {n for n, _ in cached.skipped}
    return label, specs, passed, cached, [s for s in specs if s.name not in known]


def cached_speeds(registry: BackendRegistry, cache: SpeedCache | None, *, device: torch.device | str, head_dim: int,
                  dtype: torch.dtype, seq_len: int, label: str | None = None,
                  capability: tuple[int, int] | None = None, available: Collection[str] | None = None
                  ) -> MeasuredSpeeds | None:
    """What `time_speeds` would return without timing anything: the cache's entry where it holds every candidate,
    else None (a timing would time some); on CPU the same refusal. No GPU work: a forecast plans with it.
    label / capability / available: as `time_speeds`' (a test's label stands in a device on CPU)."""
    device = torch.device(device)
    if device.type != "cuda" and label is None:
        return MeasuredSpeeds.none("no CUDA device: only CUDA kernels are timed", head_dim=head_dim,
                                   dtype=str(dtype).removeprefix("torch."), seq_len=seq_len)
    _, _, _, cached, missing = _lookup(registry, cache, device, head_dim=head_dim, dtype=dtype,
                                       cls=length_class(seq_len), label=label, capability=capability,
                                       available=available)
    return cached if cached is not None and not missing else None


def time_speeds(registry: BackendRegistry, cache: SpeedCache | None, *, device: torch.device | str, head_dim: int,
                 dtype: torch.dtype, seq_len: int, timer: Timer | None = None, label: str | None = None,
                 capability: tuple[int, int] | None = None, available: Collection[str] | None = None,
                 free_bytes: int | None = None, wall: Callable[[], float] = time.perf_counter) -> MeasuredSpeeds:
    """The exact backends' speeds for a job of `seq_len` keys: from `cache` where it holds every candidate, else
    measured (only the candidates it lacks) and written back, with the timing's own wall time (`probe_s`). On CPU no
    timing runs (the static rank applies).

    timer / label / capability / available / free_bytes / wall: the facts read from the device and the clock
    (injectable for tests; None = read them: CUDA events, `device_label`, the device's capability, the registry's
    availability checks, free memory)."""
    device = torch.device(device)
    dtype_name = str(dtype).removeprefix("torch.")
    cls = length_class(seq_len)
    if device.type != "cuda" and timer is None:
        return MeasuredSpeeds.none("no CUDA device: only CUDA kernels are timed", head_dim=head_dim,
                                   dtype=dtype_name, seq_len=seq_len)
    label, _, passed, cached, missing = _lookup(registry, cache, device, head_dim=head_dim, dtype=dtype, cls=cls,
                                                label=label, capability=capability, available=available)
    known = set() if cached is None else {n for n, _ in cached.seconds} | {n for n, _ in cached.skipped}
    if cached is not None and not missing:
        return cached
    started = wall()
    if free_bytes is None and device.type == "cuda":
        free_bytes = int(torch.cuda.mem_get_info(device)[0])
    fresh = measure_speeds(registry, missing, device=device, label=label, head_dim=head_dim, dtype=dtype, cls=cls,
                           timer=timer if timer is not None else cuda_event_timer(device), free_bytes=free_bytes)
    if device.type == "cuda":
        torch.cuda.synchronize(device)  # the last untimed call of a skipped backend may still run
    probe_s = max(0.0, wall() - started)
    old_seconds = () if cached is None else cached.seconds
    old_skipped = () if cached is None else cached.skipped
    merged = MeasuredSpeeds(device=label, head_dim=head_dim, dtype=dtype_name, length_class=cls, rows=fresh.rows,
                            heads=fresh.heads, seconds=old_seconds + fresh.seconds,
                            skipped=old_skipped + fresh.skipped + tuple(p for p in passed if p[0] not in known),
                            probe_s=probe_s)
    if cache is not None:
        cache.write(dataclasses.replace(merged, skipped=tuple(p for p in merged.skipped if not p[1].startswith(NO_ROOM))))
    return merged
