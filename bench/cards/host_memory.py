"""Host memory of one card-bench row, read from /proc in the card's process: the parsers (pure, tested on sample
text), the disk-read arithmetic per step and per model call, and `HostMemory`, the sampler thread.

`HostMemory` samples every 0.2 s between `reset()` and `fields()`: the peaks of this process's RSS and its split
(`/proc/self/status`: RssAnon, RssFile, RssShmem, VmRSS), the minimum of the machine's MemAvailable
(`/proc/meminfo`, what ComfyUI reads through psutil.virtual_memory().available) and the peak of the page-locked
RAM ComfyUI counts (the `pinned` callable: `longmedia.comfy.host.memory.pinned_ram_bytes`). `/proc/self/io`'s
read_bytes (bytes this process brought in from storage, page faults of mmapped files included) is read at the
prompt's start, at each progress-hook step (`step()`) and at the end. Standard library only: no torch, no ComfyUI.
"""

from __future__ import annotations

import statistics
import threading
from collections.abc import Callable
from pathlib import Path

KIB = 1024
STATUS_KEYS = ("VmRSS", "RssAnon", "RssFile", "RssShmem")


def parse_kib_fields(text: str) -> dict[str, int]:
    """`Name:   123 kB` lines (/proc/meminfo, /proc/self/status) as bytes; lines without a kB value are skipped."""
    out = {}
    for line in text.splitlines():
        name, sep, rest = line.partition(":")
        parts = rest.split()
        if sep and len(parts) == 2 and parts[1] == "kB" and parts[0].isdigit():
            out[name.strip()] = int(parts[0]) * KIB
    return out


def parse_io(text: str) -> dict[str, int]:
    """/proc/self/io (`read_bytes: 123` lines, already bytes)."""
    out = {}
    for line in text.splitlines():
        name, sep, rest = line.partition(":")
        if sep and rest.strip().isdigit():
            out[name.strip()] = int(rest.strip())
    return out


def mem_available(meminfo_text: str) -> int | None:
    return parse_kib_fields(meminfo_text).get("MemAvailable")


def calls_per_step(prompt: dict) -> int:
    """Model calls per sampler step of a bench prompt: its CFGGuider runs the negative too unless cfg is 1 (ComfyUI
    skips the unconditional call at cfg 1, comfy/samplers.py's cfg1 optimisation)."""
    cfg = float(prompt["guider"]["inputs"]["cfg"])
    return 1 if cfg == 1.0 else 2


def read_per_step(read_at: list[int]) -> list[int]:
    """Bytes read during each step: `read_at` is read_bytes at the prompt's start then at each step's end."""
    return [b - a for a, b in zip(read_at, read_at[1:])]


def steady_read_per_step(read_at: list[int]) -> int | None:
    """The median bytes read per step over the steady steps (step 1, which loads the model, excluded); None with
    fewer than two steps."""
    steady = read_per_step(read_at)[1:]
    return int(statistics.median(steady)) if steady else None


def read_per_call(per_step: int | None, calls: int) -> int | None:
    return None if per_step is None else per_step // calls


def _read(path: str) -> str | None:
    try:
        return Path(path).read_text()
    except OSError:  # named: /proc/self/io is not readable in some containers; the field is then None
        return None


class HostMemory:
    """Host-memory peaks and disk reads of this process during one prompt (see the module's docstring)."""

    def __init__(self, pinned: Callable[[], int | None] = lambda: None, interval_s: float = 0.2,
                 proc: str = "/proc"):
        self.pinned, self.interval_s, self.proc = pinned, interval_s, proc
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._peaks: dict[str, int] = {}
        self._available_min: int | None = None
        self._pinned_peak: int | None = None
        self.read_at: list[int] = []
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()

    def read_bytes(self) -> int | None:
        text = _read(f"{self.proc}/self/io")
        return None if text is None else parse_io(text).get("read_bytes")

    def _sample(self) -> None:
        status = parse_kib_fields(_read(f"{self.proc}/self/status") or "")
        available = mem_available(_read(f"{self.proc}/meminfo") or "")
        pinned = self.pinned()
        with self._lock:
            for key in STATUS_KEYS:
                if key in status:
                    self._peaks[key] = max(self._peaks.get(key, 0), status[key])
            if available is not None:
                self._available_min = available if self._available_min is None else min(self._available_min,
                                                                                         available)
            if pinned is not None:
                self._pinned_peak = max(self._pinned_peak or 0, pinned)

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            self._sample()

    def reset(self) -> None:
        """A new prompt: peaks from now, read_bytes at its start."""
        with self._lock:
            self._peaks, self._available_min, self._pinned_peak = {}, None, None
        self._sample()
        start = self.read_bytes()
        self.read_at = [] if start is None else [start]

    def step(self) -> None:
        """A progress-hook step ended."""
        if self.read_at:
            now = self.read_bytes()
            if now is not None:
                self.read_at.append(now)

    def fields(self, calls: int) -> dict:
        """The row's host fields for the prompt since `reset()` (`calls`: model calls per step)."""
        self._sample()
        end = self.read_bytes()
        with self._lock:
            peaks, available, pinned = dict(self._peaks), self._available_min, self._pinned_peak
        per_step = steady_read_per_step(self.read_at)
        return {"rss_peak_bytes": peaks.get("VmRSS"), "rss_anon_peak_bytes": peaks.get("RssAnon"),
                "rss_file_peak_bytes": peaks.get("RssFile"), "rss_shmem_peak_bytes": peaks.get("RssShmem"),
                "pinned_peak_bytes": pinned, "mem_available_min_bytes": available,
                "disk_read_bytes": None if end is None or not self.read_at else end - self.read_at[0],
                "disk_read_step_bytes": read_per_step(self.read_at), "disk_read_per_step_bytes": per_step,
                "calls_per_step": calls, "disk_read_per_call_bytes": read_per_call(per_step, calls)}

    def close(self) -> None:
        self._stop.set()
