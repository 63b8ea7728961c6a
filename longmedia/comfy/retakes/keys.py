"""What a segment of a long job depends on, read off ComfyUI's objects, as digests for retake keys.

The job's digest (once per run): the model (its weights as ComfyUI's core loaders record them,
`cached_patcher_init`: the loader, the file's path, size and modification time, the loader's options, so the same
file loaded again after ComfyUI dropped the model is the same model and the key needs no pin; a model from a
loader without that record is known by identity, pinned, and its segments do not outlive the Retakes node's
output; its weight patches by value (a LoRA's tensors hashed), or by `patches_uuid` past `MAX_PATCH_HASH_BYTES`;
its object patches, weight wrappers, hook patches and model_options by value), the guider (its class, its own settings such as cfg, its model_options), the
sampler, the sigmas, the plan request, the latent's other keys, the noise's kind, the segment plan and which
conditioning lists carry the context. A segment's digest: where it sits, its seed, its pass latent and its
conditioning as the pass gets it (its prompt, its guides, and the context guide: the previous segment's final
latents). The conditioning's `uuid` (new on every set_conds) is left out. `segments/retakes.py` chains them.
"""

from __future__ import annotations

import os
import weakref

import torch

from ...h3.dims import H3_FULL
from ...segments.fingerprint import ByIdentity, Fingerprint
from ...units import GIB
from ..host.patches import model_patch_bytes
from ..sp.devices import device_labels

__all__ = ["job_digest", "segment_digest"]

MAX_PATCH_HASH_BYTES = GIB   # weight patches up to this are known by value (a LoRA), larger ones by patches_uuid
_GUIDER_OWN = ("model_patcher", "model_options", "original_conds", "conds", "inner_model", "inner_sample")


def _patcher(value) -> object | None:
    """A ModelPatcher as a plain description (None for anything else): the weights by their loader's record
    (`_weights`; by identity, pinned, where there is none), the weight patches by value (`_patches`), its object
    patches, weight wrappers, hook patches and model_options by value."""
    if not (hasattr(value, "patches_uuid") and hasattr(value, "patches") and hasattr(value, "model")):
        return None
    weights = _weights(getattr(value, "cached_patcher_init", None))
    return {"model": ByIdentity(value.model) if weights is None else weights, "patches": _patches(value),
            "object_patches": getattr(value, "object_patches", {}),
            "weight_wrapper_patches": getattr(value, "weight_wrapper_patches", {}),
            "hook_patches": sorted(map(repr, getattr(value, "hook_patches", {}) or {})),
            "model_options": getattr(value, "model_options", {})}


def _weights(init) -> dict | None:
    """The weights as ComfyUI's core loaders record them on the patcher (`cached_patcher_init`: the loader, its
    arguments (the file's path and the loader's options), the output's index), every file named by path, size and
    modification time (the weights are never hashed); None without such a record (a custom loader)."""
    if not (isinstance(init, tuple) and len(init) >= 2 and callable(init[0]) and isinstance(init[1], tuple)):
        return None
    loader = init[0]
    return {"loader": f"{getattr(loader, '__module__', '?')}.{getattr(loader, '__qualname__', repr(loader))}",
            "args": tuple(_file(a) for a in init[1]), "output": init[2] if len(init) > 2 else None}


def _file(arg):
    """A path argument as (path, size, mtime); lists of paths (a text encoder's files) item by item."""
    if isinstance(arg, (list, tuple)):
        return type(arg)(_file(a) for a in arg)
    if isinstance(arg, (str, os.PathLike)) and os.path.isfile(arg):
        st = os.stat(arg)
        return {"file": os.path.abspath(arg), "size": st.st_size, "mtime_ns": st.st_mtime_ns}
    return arg


def _patches(value) -> object:
    """The weight patches (a LoRA's): every patch's key, strengths and tensors by value while they are at most
    `MAX_PATCH_HASH_BYTES` (hashed each run); past that (a whole model merged in), ComfyUI's `patches_uuid`, which
    the patches keep only while ComfyUI keeps the patched model."""
    patches = value.patches
    if model_patch_bytes(value, H3_FULL).host_bytes > MAX_PATCH_HASH_BYTES:
        return {"patches_uuid": str(value.patches_uuid),
                "keys": {key: [tuple(x for x in p if not torch.is_tensor(x)) if len(p) < 5 else (p[0], p[2], p[3],
                                                                                                  p[4])
                               for p in entries] for key, entries in patches.items()}}
    return {key: [tuple(p) for p in entries] for key, entries in patches.items()}


def _fingerprint() -> Fingerprint:
    return Fingerprint(special=_patcher)


def job_digest(guider, sampler, sigmas, request, latent: dict, noise, plan, context_keys, devices: str = ""
               ) -> tuple[str, tuple[weakref.ref, ...]]:
    """The digest of what every segment of the run shares, and the pins it made (raises Uncacheable). `devices`:
    the Sampler's device list as typed, normalised (sequence-parallel ranks differ from one device within float
    tolerance, not bit for bit, so a retake after changing it samples again)."""
    f = _fingerprint()
    own = {k: v for k, v in getattr(guider, "__dict__", {}).items() if k not in _GUIDER_OWN}
    noise_kind = {k: v for k, v in getattr(noise, "__dict__", {}).items() if k != "seed"}
    digest = f.digest({
        "model": guider.model_patcher, "guider": (type(guider), own), "guider_options": guider.model_options,
        "sampler": sampler, "sigmas": sigmas, "request": request,
        "latent": {k: v for k, v in latent.items() if k not in ("samples", "noise_mask")},
        "noise": (type(noise), noise_kind), "plan": plan, "context_on": tuple(context_keys),
        "devices": ",".join(device_labels(devices))})
    return digest, tuple(f.pins)


def segment_digest(segment, seed: int, pass_latents: tuple[torch.Tensor, ...], conds: dict
                   ) -> tuple[str, tuple[weakref.ref, ...]]:
    """The digest of one segment's own inputs (raises Uncacheable): where it sits, seed, pass latent, conditioning."""
    f = _fingerprint()
    plain = {key: [{k: v for k, v in entry.items() if k != "uuid"} for entry in entries]
             for key, entries in conds.items()}
    return f.digest({"segment": segment, "seed": seed, "latent": pass_latents, "conds": plain}), tuple(f.pins)
