"""What ComfyUI and comfy-aimdo know about memory: dynamic VRAM on or off, aimdo's VRAM, pinned RAM.

Read from the modules ComfyUI already imported (`sys.modules`), so asking never imports or starts anything;
outside a ComfyUI process every fact reads as absent.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable
from typing import Any

from ...execution.guards import ReleaseFailed
from ...report.memory import HostMemory, read_memory
from ...report.oom import MemoryReading


def _aimdo_raised(what: str, error: RuntimeError) -> None:
    """comfy-aimdo 0.6+ raises RuntimeError where older versions failed silently: said, then read as absent."""
    logging.warning("LongMedia: comfy-aimdo %s raised RuntimeError: %s (read as unknown)", what, error)


def dynamic_vram_active() -> bool:
    """True when ComfyUI runs with dynamic VRAM (comfy-aimdo); False outside ComfyUI."""
    mm = sys.modules.get("comfy.memory_management")
    if mm is not None:
        return bool(getattr(mm, "aimdo_enabled", False))
    control = sys.modules.get("comfy_aimdo.control")
    return bool(control is not None and getattr(control, "lib", None) is not None and getattr(control, "devctxs", None))


def pinned_memory_enabled() -> bool:
    """False when ComfyUI runs with --disable-pinned-memory (no pin cache); True otherwise, and outside ComfyUI."""
    cli_args = sys.modules.get("comfy.cli_args")
    args = getattr(cli_args, "args", None)
    return not bool(getattr(args, "disable_pinned_memory", False))


def aimdo_vram_usage() -> int | None:
    """comfy-aimdo's VRAM usage in bytes; None without comfy-aimdo."""
    control = sys.modules.get("comfy_aimdo.control")
    if control is None or getattr(control, "lib", None) is None:
        return None
    try:
        return int(control.get_total_vram_usage())
    except (AttributeError, OSError, TypeError):  # older comfy-aimdo without the call, or no device context
        return None
    except RuntimeError as error:  # named reason: comfy-aimdo 0.6+ raises (e.g. not initialized)
        _aimdo_raised("get_total_vram_usage()", error)
        return None


def pinned_ram_bytes() -> int | None:
    """Page-locked RAM ComfyUI holds (its TOTAL_PINNED_MEMORY count); None outside ComfyUI."""
    mm = sys.modules.get("comfy.model_management")
    value = getattr(mm, "TOTAL_PINNED_MEMORY", None) if mm is not None else None
    return int(value) if value is not None else None


def vbar_reclaimable_bytes(device: Any) -> int | None:
    """Weight bytes comfy-aimdo's VBARs on `device` could give back on demand (`vbars_analyze`); None without
    dynamic VRAM."""
    vbar = sys.modules.get("comfy_aimdo.model_vbar")
    if not dynamic_vram_active() or vbar is None or not hasattr(vbar, "vbars_analyze"):
        return None
    index = getattr(device, "index", None)
    try:
        return int(vbar.vbars_analyze(index))
    except (OSError, TypeError, ValueError):  # no device context for this device
        return None
    except RuntimeError as error:  # named reason: comfy-aimdo 0.6+ raises (e.g. device not initialized)
        _aimdo_raised(f"vbars_analyze({index})", error)
        return None


def vbar_resident_bytes() -> int | None:
    """Model weights resident on the GPU through comfy-aimdo's VBARs, over every model ComfyUI has loaded
    (each dynamic ModelPatcher's `model.dynamic_vbars[device].loaded_size()`); None without dynamic VRAM."""
    if not dynamic_vram_active():
        return None
    mm = sys.modules.get("comfy.model_management")
    total = 0
    seen: set[int] = set()
    for loaded in list(getattr(mm, "current_loaded_models", None) or ()):
        patcher = getattr(loaded, "model", None)
        vbars = getattr(getattr(patcher, "model", None), "dynamic_vbars", None) or {}
        for vbar in vbars.values():
            if id(vbar) in seen:  # a clone and its parent share the model and so its VBARs
                continue
            seen.add(id(vbar))
            try:
                total += int(vbar.loaded_size())
            except (AttributeError, OSError, TypeError):  # a VBAR without the query (older comfy-aimdo)
                return None
            except RuntimeError as error:  # named reason: comfy-aimdo 0.6+ raises
                _aimdo_raised("ModelVBAR.loaded_size()", error)
                return None
    return total


def vbar_release(patcher: Any) -> Callable[[int], int] | None:
    """The guards' `release(bytes) -> bytes`: give back up to `bytes` of this model's weight pages resident
    through comfy-aimdo (`ModelVBAR.free_memory`, what ComfyUI's dynamic patcher unloads with). They are not
    faulted back in this run: free_memory lowers the VBAR's watermark, faults above it fail until ComfyUI resets
    the limits after the node, so the released weights are cast through the offload buffers on every later use
    (slower, and the reason the guards release only below their thresholds). None without dynamic VRAM (the
    guards then only empty torch's cache). A RuntimeError from comfy-aimdo (0.6+ raises from `free_memory`)
    becomes `ReleaseFailed`, which the guard records on its event."""
    if not dynamic_vram_active():
        return None
    model, device = getattr(patcher, "model", None), getattr(patcher, "load_device", None)

    def release(wanted: int) -> int:
        vbar = (getattr(model, "dynamic_vbars", None) or {}).get(device)
        if vbar is None or wanted <= 0:
            return 0
        try:
            return int(vbar.free_memory(int(wanted)))
        except RuntimeError as error:  # named reason: comfy-aimdo 0.6+ raises; the guard records it
            raise ReleaseFailed(f"comfy_aimdo ModelVBAR.free_memory({int(wanted)}) raised RuntimeError: {error}") \
                from error

    return release


def comfy_host_memory() -> HostMemory:
    """ComfyUI's and comfy-aimdo's memory facts, as `read_memory` takes them."""
    return HostMemory(aimdo_usage=aimdo_vram_usage, vbar_reclaimable=vbar_reclaimable_bytes,
                      vbar_resident=vbar_resident_bytes, pinned_ram=pinned_ram_bytes)


def comfy_reading(device: Any = None) -> MemoryReading:
    """The OOM report's reading of `device` (None: the current CUDA device) with the host's facts filled in."""
    return lambda: read_memory(device, comfy_host_memory())
