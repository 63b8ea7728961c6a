"""Readings for tools/gpu/probe_aimdo.py: device memory from NVML and torch, comfy-aimdo's own VRAM, VBAR
residency, and an error record (each failure becomes data in the probe's JSON)."""
import os
import sys
import traceback

MiB = 1024 ** 2


def _err(e):
    return {"ok": False, "error": f"{type(e).__name__}: {e}", "traceback": traceback.format_exc(limit=8)}


def nvml_snapshot(pids=None):
    """Device-wide used/free/total and per-process used bytes, from NVML (None where NVML says nothing)."""
    try:
        import pynvml
        pynvml.nvmlInit()
        h = pynvml.nvmlDeviceGetHandleByIndex(0)
        mi = pynvml.nvmlDeviceGetMemoryInfo(h)
        snap = {"total_mib": mi.total / MiB, "used_mib": mi.used / MiB, "free_mib": mi.free / MiB}
        try:
            procs = pynvml.nvmlDeviceGetComputeRunningProcesses(h)
            want = set(pids or [os.getpid()])
            mine = [p.usedGpuMemory for p in procs if p.pid in want and p.usedGpuMemory is not None]
            snap["procs"] = [(p.pid, None if p.usedGpuMemory is None else p.usedGpuMemory / MiB) for p in procs]
            snap["process_used_mib"] = (sum(mine) / MiB) if mine else None
        except Exception as e:  # noqa: BLE001  named: the probe records every failure as data and goes on
            snap["procs_error"] = f"{type(e).__name__}: {e}"
        return snap
    except Exception as e:  # noqa: BLE001  named: the probe records every failure as data and goes on
        return {"error": f"{type(e).__name__}: {e}"}


def torch_mem():
    import torch
    if not torch.cuda.is_available():
        return {"cuda": False}
    free, total = torch.cuda.mem_get_info()
    return {"free_mib": free / MiB, "total_mib": total / MiB, "used_mib": (total - free) / MiB,
            "torch_allocated_mib": torch.cuda.memory_allocated() / MiB,
            "torch_reserved_mib": torch.cuda.memory_reserved() / MiB}


def mem(label, out):
    snap = {"nvml": nvml_snapshot()}
    if "torch" in sys.modules:
        try:
            snap["cuda"] = torch_mem()
        except Exception as e:  # noqa: BLE001  named: the probe records every failure as data and goes on
            snap["cuda"] = {"error": f"{type(e).__name__}: {e}"}
    try:
        import comfy_aimdo.control as c
        if c.lib is not None and c.devctxs:
            snap["aimdo_total_vram_usage_mib"] = c.get_total_vram_usage() / MiB
    except Exception:  # noqa: BLE001  named: the probe records every failure as data and goes on
        pass
    out[label] = snap
    return snap


def residency_summary(vbar):
    flags = vbar.get_residency()
    return {"pages": len(flags), "resident": sum(1 for f in flags if f & 1), "pinned": sum(1 for f in flags if f & 2),
            "loaded_size_mib": vbar.loaded_size() / MiB, "watermark": vbar.get_watermark()}

