"""Per-pass measurement inside a stage's process: device-timed model calls (bench/cards/step_clock.py's marks) and
the process's device and host memory of each pass, written as a row when the pass ends.

A pass starts at its PREPARE_SAMPLING (after LongMedia's residency boundary, before the model loads); it ends when
the next pass starts or the stage ends. Wrappers go on the guider's model_options, which every pass's guider copies
(LongMedia copies model_options, never replaces them). With cfg 1 and euler, each step is one model call.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

WRAPPER_KEY = "longmedia_bench_long_job"


def _status_bytes(*keys: str) -> dict[str, int]:
    """Fields of this process's /proc/self/status (given in kB), in bytes; 0 for a key the kernel does not give."""
    fields = dict.fromkeys(keys, 0)
    for line in Path("/proc/self/status").read_text().splitlines():
        key, _, rest = line.partition(":")
        if key in fields:
            fields[key] = int(rest.split()[0]) * 1024
    return fields


def host_rss() -> tuple[int, int]:
    """(RSS now, its peak since `reset_host_peak`) of this process, bytes (Linux /proc)."""
    f = _status_bytes("VmRSS", "VmHWM")
    return f["VmRSS"], f["VmHWM"]


def reset_host_peak() -> None:
    Path("/proc/self/clear_refs").write_text("5")     # VmHWM := the current RSS


class PeakSampler:
    """Per-key peaks of `read()` (a dict of byte counts) between `reset()` and `peak()`, sampled every `interval_s`
    on a thread. For what the kernel keeps no peak of that this bench can reset per pass: the anonymous and
    file-backed parts of RSS (the kernel keeps the total's only, VmHWM). `read` must not call into torch (see
    `device_memory_at_call`)."""

    def __init__(self, read: Callable[[], dict[str, int]], interval_s: float = 0.02):
        self.read, self.interval_s = read, interval_s
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._peak: dict[str, int] = {}
        self.reset()
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()

    def _sample(self) -> None:
        now = self.read()
        with self._lock:
            for k, v in now.items():
                self._peak[k] = max(self._peak.get(k, 0), v)

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            self._sample()

    def reset(self) -> None:
        now = self.read()
        with self._lock:
            self._peak = dict(now)

    def peak(self) -> dict[str, int]:
        self._sample()
        with self._lock:
            return dict(self._peak)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=1.0)


def host_split() -> dict[str, int]:
    """The row's host fields: this process's anonymous RSS (heap, pinned buffers, the state dict ComfyUI holds)
    and file-backed RSS (mapped files: clean pages the kernel may drop). Reads /proc only: safe on a thread of its
    own."""
    f = _status_bytes("RssAnon", "RssFile")
    return {"host_anon_peak_bytes": f["RssAnon"], "host_file_peak_bytes": f["RssFile"]}


def device_memory_at_call(torch_cuda) -> Callable[[], dict[str, int | None]]:
    """What the process holds on the device as a model call ends, read on the sampling thread (as bench.cards'
    step_memory): torch's reserved pool, comfy-aimdo's VRAM (VBAR pages and cast buffers) and the weights resident
    through its VBARs. Never read from another thread: torch's allocator calls hold the GIL, and a reader thread
    hung the 2026-12-05 long-job stage (docs/lab/2026-12-05-long-job-gpu-plan.md)."""
    from longmedia.comfy.host.memory import aimdo_vram_usage, vbar_resident_bytes

    return lambda: {"torch_reserved": int(torch_cuda.memory_reserved()), "aimdo_usage": aimdo_vram_usage(),
                    "vbar_resident": vbar_resident_bytes()}


@dataclass(frozen=True)
class CpuMark:
    """A CPU-clock mark (the --smoke run on the CPU has no CUDA events)."""

    at: float

    @classmethod
    def now(cls) -> "CpuMark":
        return cls(time.perf_counter())

    def seconds_until(self, later: "CpuMark") -> float:
        return later.at - self.at


class NoDeviceMemory:
    """DeviceMemory's interface on the CPU: nothing to read."""

    source = "none (CPU)"

    def reset(self) -> None:
        pass

    def peak(self) -> dict:
        return {"process_bytes": None, "process_source": self.source}

    def close(self) -> None:
        pass


class PassRecorder:
    """Rows of the passes of one stage process; `emit(row)` gets each as its pass ends."""

    def __init__(self, stage: str, first_pass: int, memory, emit: Callable[[dict], None], new_mark,
                 meters: tuple = (), at_call: Callable[[], dict[str, int | None]] | None = None):
        """`meters`: more peaks per pass (PeakSampler), each with reset() and peak() -> the row's fields.
        `at_call`: device memory read as each model call ends (`device_memory_at_call`); the row keeps each
        field's largest reading as `call_end_max`."""
        self.stage, self.next_index, self.memory, self.emit, self.new_mark = stage, first_pass, memory, emit, new_mark
        self.meters, self.at_call = meters, at_call
        self.call_end_max: dict[str, int] = {}
        self.calls: list[tuple[object, object]] = []
        self.index: int | None = None
        self.started = 0.0

    def install(self, model_options: dict) -> None:
        import comfy.patcher_extension as ext

        def prepare_sampling(executor, model, *args, **kwargs):
            self.pass_started()
            return executor(model, *args, **kwargs)

        def diffusion_model(executor, x, timestep, context, transformer_options, *args, **kwargs):
            before = self.new_mark()
            out = executor(x, timestep, context, transformer_options, *args, **kwargs)
            self.calls.append((before, self.new_mark()))
            if self.at_call is not None:
                for k, v in self.at_call().items():
                    if v is not None:
                        self.call_end_max[k] = max(self.call_end_max.get(k, 0), v)
            return out

        ext.add_wrapper_with_key(ext.WrappersMP.PREPARE_SAMPLING, WRAPPER_KEY, prepare_sampling, model_options,
                                 is_model_options=True)
        ext.add_wrapper_with_key(ext.WrappersMP.DIFFUSION_MODEL, WRAPPER_KEY, diffusion_model, model_options,
                                 is_model_options=True)

    def pass_started(self) -> None:
        self.finish()
        self.index, self.next_index = self.next_index, self.next_index + 1
        self.calls, self.started, self.call_end_max = [], time.perf_counter(), {}
        self.memory.reset()
        for meter in self.meters:
            meter.reset()

    def finish(self) -> None:
        """Close the pass running now (if any) into its row."""
        if self.index is None:
            return
        seconds = [a.seconds_until(b) for a, b in self.calls]
        rss, rss_peak = host_rss()
        peak = self.memory.peak()
        self.emit({"kind": "pass", "stage": self.stage, "segment": self.index, "model_calls": len(seconds),
                   "call_s": seconds, "s_per_step": sorted(seconds)[len(seconds) // 2] if seconds else None,
                   "pass_wall_s": time.perf_counter() - self.started,
                   "process_peak_bytes": peak.get("process_bytes"), "process_source": peak.get("process_source"),
                   "host_rss_bytes": rss, "host_rss_peak_bytes": rss_peak, "call_end_max": dict(self.call_end_max)}
                  | {k: v for meter in self.meters for k, v in meter.peak().items()})
        self.index = None
