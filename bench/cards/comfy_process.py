"""ComfyUI started in-process in main.py's order (Dynamic VRAM on), and the process's real device memory.

Shared by tests/gpu and the card bench on a GPU machine without network (after tools/gpu/bootstrap.sh, which
sets LONGMEDIA_COMFYUI_ROOT). A process that imports ComfyUI is started with `child_env()`: the one place a
ComfyUI checkout is put on the import path (PYTHONPATH: the checkout, then this repository; start it with
`python -P` so the working directory's `nodes/` package cannot shadow ComfyUI's `nodes`). Import this module
BEFORE torch: `start_comfyui` calls
`comfy_aimdo.control.init` before torch loads, as ComfyUI's main.py does, then imports `cuda_malloc`
(torch's cudaMallocAsync backend), `comfy.model_management`, runs `init_devices` and switches
`CoreModelPatcher` to `ModelPatcherDynamic` with `aimdo_enabled = True`, verbatim main.py.

`DeviceMemory` samples NVML every few milliseconds in a thread: device-wide used bytes and, where
NVML lists it, this process's own bytes (which include comfy-aimdo's VBAR pages and cast buffers,
outside torch's allocator). `torch.cuda.mem_get_info` is the fallback when NVML is missing.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from dataclasses import dataclass

from longmedia.units import GIB, MIB


class ComfyStartError(RuntimeError):
    """ComfyUI could not be started here; the message says what is missing."""


@dataclass(frozen=True)
class ComfyStart:
    aimdo_enabled: bool
    alloc_conf: str | None
    device: str
    device_name: str
    vram_state: str
    comfy_total_mib: float
    comfy_free_mib: float
    args: tuple[str, ...]

    def to_dict(self) -> dict:
        return dict(self.__dict__)


def comfyui_root() -> str:
    return comfyui_root_of(os.environ)


def comfyui_root_of(environ) -> str:
    root = environ.get("LONGMEDIA_COMFYUI_ROOT", "").strip()
    if not root or not os.path.isfile(os.path.join(root, "main.py")):
        raise ComfyStartError(f"LONGMEDIA_COMFYUI_ROOT={root!r} is not a ComfyUI checkout: source "
                              "tools/gpu/bootstrap.sh (it points it at .comfy_src)")
    return root


def child_env(repo: str | os.PathLike, environ: dict[str, str] | None = None) -> dict[str, str]:
    """The environment of a child process that imports ComfyUI from LONGMEDIA_COMFYUI_ROOT and this repository
    (`repo`): PYTHONPATH starts with the checkout, then the repository, then whatever it held before."""
    env = dict(os.environ if environ is None else environ)
    parts = [comfyui_root_of(env), os.fspath(repo), *[p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]]
    env["PYTHONPATH"] = os.pathsep.join(parts)
    return env


def comfy_importable_from(root: str) -> bool:
    """Does `import comfy` here find the checkout `root`'s `comfy` (a namespace package: no __init__.py)?"""
    import importlib.util

    found = importlib.util.find_spec("comfy")
    where = list(found.submodule_search_locations or ()) if found is not None else []
    return os.path.realpath(os.path.join(root, "comfy")) in [os.path.realpath(w) for w in where]


def rerun_with_comfy(module: str, comfyui: str, argv: list[str] | None, mark: str) -> int | None:
    """None when `comfy` already imports from `comfyui` (go on in this process); otherwise the exit code of
    `python -m module argv` run again in a child that imports ComfyUI from `comfyui` (its PYTHONPATH, `child_env`:
    ComfyUI goes on the import path in one place). `mark`: the environment variable set in that child, so a child
    that still cannot import it fails instead of starting another."""
    import subprocess

    if comfy_importable_from(comfyui):
        return None
    if os.environ.get(mark):
        raise ComfyStartError(f"{comfyui} is on PYTHONPATH but `comfy` is not imported from it")
    repo = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env = child_env(repo, {**os.environ, "LONGMEDIA_COMFYUI_ROOT": comfyui, mark: "1"})
    args = sys.argv[1:] if argv is None else list(argv)
    return subprocess.run([sys.executable, "-P", "-m", module, *args], cwd=repo, env=env, check=False).returncode


def start_comfyui(comfy_args: list[str] | tuple[str, ...] = ()) -> ComfyStart:
    """Import ComfyUI here as `python main.py <comfy_args>` would, up to the point where it serves prompts
    (the process was started through `child_env`)."""
    root = comfyui_root()
    if not comfy_importable_from(root):
        raise ComfyStartError(f"`comfy` is not imported from LONGMEDIA_COMFYUI_ROOT={root!r} here: start this process "
                              "with bench.cards.comfy_process.child_env() and `python -P`")
    sys.argv = [os.path.join(root, "main.py"), *comfy_args]
    import comfy.options

    comfy.options.enable_args_parsing()
    import comfy_aimdo.control
    from comfy.cli_args import args, enables_dynamic_vram

    if enables_dynamic_vram():
        headroom = None if args.reserve_vram is None else int(args.reserve_vram * GIB)
        try:
            comfy_aimdo.control.init(simple_vram_headroom=headroom, nvml_pressure=not args.disable_nvml_pressure)
        except TypeError:  # named: older comfy-aimdo protocol, as main.py falls back
            comfy_aimdo.control.init(simple_vram_headroom=headroom)
    import cuda_malloc  # noqa: F401  (main.py: picks torch's cudaMallocAsync before torch loads, unless disabled)

    alloc_conf = os.environ.get("PYTORCH_CUDA_ALLOC_CONF")  # set by cuda_malloc; torch reads it on import below
    import comfy.memory_management
    import comfy.model_management as mm
    import comfy.model_patcher

    supported = mm.is_nvidia() or (mm.is_amd() and mm.rocm_version >= (7, 14))
    wanted = args.enable_dynamic_vram or (enables_dynamic_vram() and supported)
    if wanted and (args.enable_dynamic_vram or mm.torch_version_numeric >= (2, 8)):
        try:
            ok = comfy_aimdo.control.init_devices((d.index, int(args.vram_headroom * GIB))
                                                  for d in mm.get_all_torch_devices())
        except TypeError:  # named: comfy-aimdo 0.4.9 protocol, as main.py falls back
            ok = comfy_aimdo.control.init_devices(d.index for d in mm.get_all_torch_devices())
        if ok:
            comfy.model_patcher.CoreModelPatcher = comfy.model_patcher.ModelPatcherDynamic
            comfy.memory_management.aimdo_enabled = True
    dev = mm.get_torch_device()
    return ComfyStart(aimdo_enabled=bool(comfy.memory_management.aimdo_enabled), alloc_conf=alloc_conf, device=str(dev),
                      device_name=mm.get_torch_device_name(dev), vram_state=str(mm.vram_state),
                      comfy_total_mib=mm.get_total_memory(dev) / MIB,
                      comfy_free_mib=mm.get_free_memory(dev) / MIB, args=tuple(comfy_args))


def load_builtin_nodes() -> None:
    """ComfyUI's built-in extra nodes (SamplerCustomAdvanced, the H3 nodes, ...), as server start-up loads them."""
    import asyncio

    import nodes

    asyncio.run(nodes.init_extra_nodes(init_custom_nodes=False, init_api_nodes=False))


class DeviceMemory:
    """Peak device memory of this process (NVML, sampled every `interval_s`) between `reset()` and `peak()`."""

    def __init__(self, interval_s: float = 0.004, index: int = 0):
        self.interval_s, self.index = interval_s, index
        self.pid = os.getpid()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._peak_process = self._peak_device = 0
        self.source = "none"
        self._handle = self._nvml = None
        try:
            import pynvml

            pynvml.nvmlInit()
            self._nvml, self._handle = pynvml, pynvml.nvmlDeviceGetHandleByIndex(index)
            self.source = "nvml"
        except (ImportError, OSError, RuntimeError) as error:  # named: no NVML here, fall back to cudaMemGetInfo
            self.source = f"cudaMemGetInfo ({type(error).__name__})"
        except Exception as error:  # noqa: BLE001  named: pynvml raises its own NVMLError types
            self.source = f"cudaMemGetInfo ({type(error).__name__})"
            self._nvml = None
        self.baseline_device = self.device_used()
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()

    def device_used(self) -> int:
        if self._nvml is not None:
            return int(self._nvml.nvmlDeviceGetMemoryInfo(self._handle).used)
        import torch

        free, total = torch.cuda.mem_get_info(self.index)
        return int(total - free)

    def process_used(self) -> int | None:
        if self._nvml is None:
            return None
        try:
            procs = self._nvml.nvmlDeviceGetComputeRunningProcesses(self._handle)
        except Exception:  # noqa: BLE001  named: NVMLError (no permission in a container)
            return None
        mine = [p.usedGpuMemory for p in procs if p.pid == self.pid and p.usedGpuMemory is not None]
        return int(sum(mine)) if mine else None

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            dev = self.device_used()
            proc = self.process_used() if self._nvml is not None else None
            with self._lock:
                self._peak_device = max(self._peak_device, dev)
                if proc is not None:
                    self._peak_process = max(self._peak_process, proc)

    def reset(self) -> None:
        with self._lock:
            self._peak_device = self.device_used()
            self._peak_process = self.process_used() or 0

    def peak(self) -> dict:
        """Peaks since reset(): `process_bytes` (NVML per process, or device used less the start baseline)."""
        time.sleep(3 * self.interval_s)
        with self._lock:
            dev, proc = self._peak_device, self._peak_process
        measured = proc if proc else max(0, dev - self.baseline_device)
        return {"process_bytes": measured, "device_used_bytes": dev, "baseline_device_bytes": self.baseline_device,
                "process_source": "nvml per-process" if proc else f"{self.source} device used - baseline"}

    def close(self) -> None:
        self._stop.set()
