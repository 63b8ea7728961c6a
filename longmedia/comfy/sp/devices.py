"""The Sampler's device list for sequence parallelism: parsed, checked, and resolved through ComfyUI's own device
options where the host has them (`model_management.resolve_gpu_device_option`, the labels the stock multi-GPU
nodes use: "default", "cpu", "gpu:0", "gpu:1" ...), else torch device strings ("cpu", "cuda:1").

The first device is rank 0, the ComfyUI process itself: it must be the model's load device. Every other entry
starts one worker process. All devices are of one kind: CPU ranks talk over gloo, CUDA ranks over NCCL.
"""

from __future__ import annotations

import torch

from ...errors import LongMediaInputError
from ...limits import MAX_SP_DEGREE

FIX = ("Give a comma-separated list that starts with the model's own device, e.g. 'gpu:0,gpu:1' or "
       "'cuda:0,cuda:1' (or 'cpu,cpu' to test on the CPU); leave it empty for one device.")


def _resolve(label: str) -> torch.device:
    import comfy.model_management as mm

    resolve = getattr(mm, "resolve_gpu_device_option", None)
    if resolve is not None and (label in ("default", "cpu") or label.startswith("gpu:")):
        device = resolve(label)
        if label.startswith("gpu:") and (device is None or torch.device(device).type == "cpu"):
            # ComfyUI falls back to its default device here (the CPU on a CPU-only host): say so instead
            raise LongMediaInputError("devices", label, f"a GPU this host has ({_host_gpus(mm)})",
                                      f"{label} names a GPU this host does not have. {FIX}")
        return torch.device(device) if device is not None else torch.device(mm.get_torch_device())
    try:
        return torch.device(label)
    except RuntimeError as error:  # named: torch's own parse error for a device string
        raise LongMediaInputError("devices", label, "a device label such as gpu:1, cuda:1 or cpu", FIX) from error


def _host_gpus(mm) -> str:
    """ComfyUI's labels of this host's GPUs, or a note that it has none."""
    listed = getattr(mm, "get_all_torch_devices", None)
    gpus = [d for d in (listed() if listed is not None else ()) if torch.device(d).type != "cpu"]
    return ", ".join(f"gpu:{i}" for i in range(len(gpus))) if gpus else "none: CPU only, use 'cpu,cpu' to test there"


def _same_device(a: torch.device, b: torch.device) -> bool:
    return a == b or (a.type == b.type == "cuda" and (a.index or 0) == (b.index or 0))


def device_labels(text: str | None) -> tuple[str, ...]:
    """The entries of a `devices` text, stripped, empty ones dropped (the list as typed, normalised)."""
    return tuple(part.strip() for part in (text or "").split(",") if part.strip())


def parse_devices(text: str | None, load_device, remote: bool = False) -> tuple[torch.device, ...]:
    """The ranks' devices, rank 0 first; () for one device (an empty list). remote: a multi-host launch (env://),
    where the entries after the first only count the other ranks (each picks its device on its own host)."""
    if text is not None and not isinstance(text, str):   # an API prompt can send a number here
        raise LongMediaInputError("devices", text, "text: a comma-separated device list, or empty", FIX)
    labels = device_labels(text)
    if not labels:
        return ()
    if len(labels) == 1:   # one device is the model's own; any other single entry was a mistake, not ignored
        if remote or _same_device(_resolve(labels[0]), torch.device(load_device)):
            return ()
        raise LongMediaInputError("devices", text, f"empty, the model's own device ({torch.device(load_device)}) "
                                  "alone, or two devices or more", FIX)
    if len(labels) > MAX_SP_DEGREE:
        raise LongMediaInputError("devices", text, f"at most {MAX_SP_DEGREE} devices", FIX)
    devices = tuple(_resolve(label) for label in labels)
    own = torch.device(load_device)
    if not _same_device(devices[0], own):
        raise LongMediaInputError("devices", text, f"a list starting with the model's device ({own})", FIX)
    kinds = {d.type for d in devices}
    if len(kinds) != 1 or not kinds <= {"cpu", "cuda"}:
        raise LongMediaInputError("devices", text, "devices of one kind: all CUDA GPUs, or all cpu", FIX)
    if "cuda" in kinds and not remote and len({d.index for d in devices}) != len(devices):
        raise LongMediaInputError("devices", text, "each GPU once (one rank per GPU)", FIX)
    return devices


def backend_for(devices: tuple[torch.device, ...]) -> str:
    return "nccl" if devices and devices[0].type == "cuda" else "gloo"
