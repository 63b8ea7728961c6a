"""`plan_host_ram(...) -> HostRamPlan`: what a stage needs of host RAM, and where its weights come from each call.

Under dynamic VRAM (ComfyUI 0.33+, comfy-aimdo) a checkpoint is mmapped: its pages are page cache, evictable,
not a need. Weights that go to the card on every model call come from one of three places:

* ComfyUI's pin cache: `comfy/pinned_memory.py pin_memory` copies a weight into pinned host buffers while
  `model_management.ensure_pin_budget(size)` holds, i.e. while psutil's available RAM is at least
  size + max(RAM_CACHE_HEADROOM / 2, 2 GiB) (`PIN_BUDGET_FLOOR_BYTES`; RAM_CACHE_HEADROOM is 0 unless set);
* the page cache, when all the rest fits beside the pins and what LongMedia keeps free;
* the file, read again (comfy-aimdo pread) on every model call.

Measured (full-depth INT8 43.8 GiB checkpoint, 14.4 s job, 16 GiB card, a RAM balloon; disk 1.8 GB/s): with all,
32, 24 and 16 GiB available the pin cache filled all but about 2.3 GiB of what was available (process RSS 47.1 /
29.7 / 21.5 / 13.6 GiB), the rest streamed from disk each call, and the job completed at 16 GiB (s/step 34.62 /
41.09 / 43.43 / 47.44). The weights are therefore not a RAM need under dynamic VRAM: the need is the process,
the latents and the headroom LongMedia keeps available; the weights take what is left (the pin budget).

Without dynamic VRAM ComfyUI's loader keeps the weights that stream in RAM: they are a need (the old rule).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from ..h3 import lattice as L
from ..h3.geometry import Geometry
from ..h3.profiles import DeviceProfile, gib
from ..units import GIB
from . import stage_formulas as F

# ensure_pin_budget pins only while psutil's available RAM stays at least max(RAM_CACHE_HEADROOM / 2, 2 GiB) above
# the new pin (comfy/model_management.py); RAM_CACHE_HEADROOM is 0 by default, so 2 GiB.
PIN_BUDGET_FLOOR_BYTES = 2 * GIB
# Host RAM of a ComfyUI process on CUDA besides the models and latents it holds: Python, torch, the CUDA runtime and
# the libraries it loads at first use (cuBLAS, cuDNN, comfy-kitchen's extension, kernels compiled in-process),
# ComfyUI and its nodes. Measured on an H100 with Dynamic VRAM and flash-attn-4 (bench.long_job, 60 s job,
# 2026-12-06; docs/lab/2026-12-05-long-job-gpu-plan.md): 0.92 GiB before the model loads, and 2.6 to 2.9 GiB in all
# beside the weights and latents at the DiT stages' peaks (Sampler 2.43, Hi-Res 2.57, Refiner 2.72).
PROCESS_HOST_BYTES = 3 * GIB
JOB_LATENT_COPIES = 3          # a stage holds the whole job's latent as its input, its output and the denoised output
STREAM_PREFETCH_BLOCKS = 2     # blocks read ahead from the file while one runs, when asked (read_ahead) and weights
                               # stream from disk
DEFAULT_DISK_GBPS = 2.0
# The share of a model call's disk reads that adds to its time with ComfyUI's block prefetch off (each weight read
# right before its use). Measured on an H100 at full depth, 16 GiB card, INT8: 6.78 s of a call's 9.5 s of reads at
# 32 GiB of RAM, 14.55 of 18 s at 16 GiB (docs/lab/2026-12-07-host-ram.md); 6.46 of 8.02 s at 32 GiB in the
# prefetch control (docs/lab/2026-12-07-host-ram-prefetch.md).
DISK_READ_ON_STEP_SHARE = 0.8
# With the block prefetch on (the plan turns it on where weights come from disk: `policy.prefetch_decision`), block
# i+1 is read while block i runs. What still adds, measured on the same H100 in one run: 2.84 s of a call's 8.46 s
# of reads at 32 GiB of RAM, 12.99 of 16.05 s at 16 GiB (docs/lab/2026-12-07-host-ram-prefetch.md). (read seconds
# per call, share) at those two rows; between them the share follows the read seconds linearly, outside them the
# nearer row's share holds.
PREFETCH_DISK_SHARE_POINTS = ((8.46, 0.336), (16.05, 0.809))
DISK_GBPS_BASIS = "a mid-range NVMe SSD's sustained read; SATA SSDs read about 0.5"


def disk_step_share(read_seconds: float, overlapped: bool) -> float:
    """The share of a model call's `read_seconds` of disk reads that adds to its time (`overlapped`: the block
    prefetch reads the next block while one runs)."""
    if not overlapped:
        return DISK_READ_ON_STEP_SHARE
    (s0, f0), (s1, f1) = PREFETCH_DISK_SHARE_POINTS
    t = min(1.0, max(0.0, (read_seconds - s0) / (s1 - s0)))
    return f0 + t * (f1 - f0)


def pass_latent_bytes(g: Geometry) -> int:
    """One pass's latents in float32 (six copies of its video and audio rows: input, noise, output, the sampler's)."""
    return F.FP32 * 6 * (g.video_rows * 96 + g.audio_rows * 32)


def job_latent_bytes(g: Geometry) -> int:
    """The whole job's video and audio latent in float32 (every segment's frames: `total_frames`)."""
    frames = g.total_frames or g.frames
    video = 24 * L.latent_frames(frames) * g.latent_height * g.latent_width
    audio = 32 * L.AUDIO_ROWS_PER_FRAME * L.audio_latent_frames(L.seconds_for_frames(frames))
    return F.FP32 * (video + audio)


def stage_latent_bytes(g: Geometry) -> int:
    """Latents a DiT stage holds: the pass's and the job's copies."""
    return pass_latent_bytes(g) + JOB_LATENT_COPIES * job_latent_bytes(g)


@dataclass(frozen=True)
class HostRamPlan:
    """A stage's host RAM: the need (process, latents, headroom), the pin budget, and what streams from disk."""

    ram_available_bytes: int
    process_bytes: int
    latent_bytes: int
    own_alloc_bytes: int           # the stage's largest host allocation of LongMedia's own
    floor_bytes: int               # ComfyUI's own pin floor (PIN_BUDGET_FLOOR_BYTES)
    prefetch_blocks: int           # blocks read ahead from the file (STREAM_PREFETCH_BLOCKS when asked and weights
                                   # stream; 0 by default)
    prefetch_window_bytes: int
    weights_host_bytes: int        # weights that travel from host every model call
    pin_budget_bytes: int          # what the pin cache may hold (0 with pinned memory off, and without dynamic VRAM,
                                   # where the planner's PinningDecision pins the weights held in RAM)
    page_cache_bytes: int          # weights read from the page cache each call
    disk_gbps: float
    dynamic_vram: bool
    pinned_memory: bool
    patch_bytes: int = 0           # the model's LoRA tensors: loaded into RAM (a need), not mapped
    overlapped: bool = False       # ComfyUI's block prefetch reads the next block while one runs (`disk_step_share`)

    @property
    def headroom_bytes(self) -> int:
        """RAM kept available during the stage: ComfyUI's floor (which the reads ahead live in: the page cache counts
        as available, and ComfyUI pins only down to its floor, so the window is within it unless it is larger) and
        LongMedia's own largest allocation (room made for it, `comfy/host/ram.py`, when it is allocated)."""
        return max(self.floor_bytes, self.prefetch_window_bytes) + self.own_alloc_bytes

    @property
    def need_bytes(self) -> int:
        """The true need: process, latents, headroom; and, without dynamic VRAM, the weights that stream."""
        need = self.process_bytes + self.latent_bytes + self.patch_bytes + self.headroom_bytes
        return need if self.dynamic_vram else need + self.weights_host_bytes

    @property
    def fits(self) -> bool:
        return self.need_bytes <= self.ram_available_bytes

    @property
    def pinned_bytes(self) -> int:
        return self.pin_budget_bytes

    @property
    def disk_bytes_per_call(self) -> int:
        if not self.dynamic_vram:
            return 0
        return max(0, self.weights_host_bytes - self.pinned_bytes - self.page_cache_bytes)

    @property
    def disk_seconds_per_call(self) -> float:
        return self.disk_bytes_per_call / (self.disk_gbps * 1e9)

    @property
    def disk_step_seconds(self) -> float:
        """What the disk reads add to a model call's time (`disk_step_share` of them, as measured)."""
        return disk_step_share(self.disk_seconds_per_call, self.overlapped) * self.disk_seconds_per_call

    @property
    def streams_from_disk(self) -> bool:
        return self.disk_bytes_per_call > 0

    @property
    def rss_bytes(self) -> int:
        """The process's predicted RSS peak: process, latents, pins (page cache mapped in is not counted)."""
        held = self.pinned_bytes if self.dynamic_vram else self.weights_host_bytes   # off: the weights held in RAM
        return self.process_bytes + self.latent_bytes + self.patch_bytes + held

    @property
    def verdict(self) -> str:
        if not self.fits:
            beside = "beside the weights" if self.dynamic_vram else \
                f"with the {gib(self.weights_host_bytes)} of streamed weights (dynamic VRAM off: they stay in RAM)"
            return f"DOES NOT FIT (RAM): needs {gib(self.need_bytes)} {beside}, {gib(self.ram_available_bytes)} available"
        if not self.dynamic_vram:
            return (f"fits in RAM: the {gib(self.weights_host_bytes)} of streamed weights held in RAM (dynamic VRAM "
                    "off)")
        if self.weights_host_bytes == 0:
            return "fits in RAM: no weight streams (every weight stays in VRAM)"
        if self.pinned_bytes >= self.weights_host_bytes:
            return "fits in RAM: every weight pinned"
        head = f"fits in RAM: {gib(self.pinned_bytes)} pinned, {gib(self.page_cache_bytes)} from the page cache, "
        if not self.streams_from_disk:
            return head + "nothing from disk"
        return head + (f"streams {gib(self.disk_bytes_per_call)} from disk per model call (about "
                       f"{self.disk_seconds_per_call:.1f} s at {self.disk_gbps:g} GB/s)")

    def lines(self) -> list[str]:
        """The verdict and its parts, for a report."""
        out = [f"host RAM: {self.verdict}",
               f"  need {gib(self.need_bytes)} of {gib(self.ram_available_bytes)} available: process "
               f"{gib(self.process_bytes)}, latents {gib(self.latent_bytes)}"
               + (f", LoRA tensors {gib(self.patch_bytes)}" if self.patch_bytes else "")
               + f", headroom {gib(self.headroom_bytes)} "
               f"(ComfyUI's pin floor {gib(self.floor_bytes)}, LongMedia's own {gib(self.own_alloc_bytes)}, "
               f"{self.prefetch_blocks} blocks read ahead {gib(self.prefetch_window_bytes)})"]
        if self.dynamic_vram:
            pins = (f"pin budget {gib(self.pin_budget_bytes)}" if self.pinned_memory else
                    "pinned memory off (--disable-pinned-memory)")
            out.append(f"  weights from host per model call {gib(self.weights_host_bytes)}: {pins}, page cache "
                       f"{gib(self.page_cache_bytes)}, disk {gib(self.disk_bytes_per_call)}; predicted RSS "
                       f"{gib(self.rss_bytes)}")
        return out

    def to_dict(self) -> dict:
        return asdict(self) | {name: getattr(self, name) for name in (
            "headroom_bytes", "need_bytes", "fits", "pinned_bytes", "disk_bytes_per_call", "disk_seconds_per_call",
            "disk_step_seconds",
            "streams_from_disk", "rss_bytes", "verdict")}


def plan_host_ram(device: DeviceProfile, weights_host_bytes: int, block_weight_bytes: int, latent_bytes: int, *,
                  own_alloc_bytes: int, pinned_memory: bool = True, disk_gbps: float = DEFAULT_DISK_GBPS,
                  dynamic_vram: bool | None = None, process_bytes: int = PROCESS_HOST_BYTES,
                  read_ahead: bool = False, patch_bytes: int = 0, overlapped: bool = False) -> HostRamPlan:
    """The host-RAM plan of one stage on `device` (its available RAM and pinned budget): every surface calls this.

    weights_host_bytes: the weights that travel from host every model call (VRAM-resident ones are read once);
    block_weight_bytes: one block's (or layer's) weights, the unit read ahead; own_alloc_bytes: the stage's largest
    host allocation of LongMedia's own; dynamic_vram: None = the device's; read_ahead: the run reads the next blocks
    ahead from the file (`execution/disk_prefetch.py`; off by default: measured slower, docs/lab/2026-12-07-host-ram.md),
    which keeps a window of `STREAM_PREFETCH_BLOCKS` blocks free; overlapped: ComfyUI's block prefetch runs (the disk
    reads of the next block overlap the current one's compute: `disk_step_share`).
    """
    dynamic = device.dynamic_vram if dynamic_vram is None else dynamic_vram
    avail = device.ram_available_bytes
    base = dict(ram_available_bytes=avail, process_bytes=process_bytes, latent_bytes=latent_bytes,
                own_alloc_bytes=own_alloc_bytes, floor_bytes=PIN_BUDGET_FLOOR_BYTES, weights_host_bytes=weights_host_bytes,
                disk_gbps=disk_gbps, dynamic_vram=dynamic, pinned_memory=pinned_memory, patch_bytes=patch_bytes,
                overlapped=overlapped)
    if not dynamic:   # the streamed weights stay in RAM (a need); what is pinned is the planner's PinningDecision
        return HostRamPlan(prefetch_blocks=0, prefetch_window_bytes=0, pin_budget_bytes=0, page_cache_bytes=0, **base)
    plan = _dynamic(base, device, 0, block_weight_bytes)
    if read_ahead and plan.streams_from_disk:   # reads ahead from the file only lower the pins, so it still streams
        plan = _dynamic(base, device, STREAM_PREFETCH_BLOCKS, block_weight_bytes)
    return plan


def _dynamic(base: dict, device: DeviceProfile, blocks: int, block_weight_bytes: int) -> HostRamPlan:
    window = blocks * block_weight_bytes
    weights = base["weights_host_bytes"]
    free = base["ram_available_bytes"] - base["process_bytes"] - base["latent_bytes"] - base["patch_bytes"] - \
        (max(base["floor_bytes"], window) + base["own_alloc_bytes"])
    pins = max(0, min(free, weights, device.pinned_budget_bytes)) if base["pinned_memory"] else 0
    rest = weights - pins
    # The page cache keeps the rest only when all of it fits beside the pins and the headroom: a model call reads
    # the blocks in order, cycle after cycle, and an LRU cache smaller than the cycle evicts each page before its
    # next use, so a partly fitting rest keeps nothing useful.
    cached = rest if rest <= free - pins else 0
    return HostRamPlan(prefetch_blocks=blocks, prefetch_window_bytes=window, pin_budget_bytes=pins,
                       page_cache_bytes=cached, **base)
