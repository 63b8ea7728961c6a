"""What a segment of a long job depends on, read off ComfyUI's objects, as digests for retake keys.

The job's digest (once per run): the model (the loaded module by identity, pinned; its weight patches by
`patches_uuid` and every patch's key and strengths; its object patches, weight wrappers, hook patches and
model_options by value), the guider (its class, its own settings such as cfg, its model_options), the
sampler, the sigmas, the plan request, the latent's other keys, the noise's kind, the segment plan and which
conditioning lists carry the context. A segment's digest: where it sits, its seed, its pass latent and its
conditioning as the pass gets it (its prompt, its guides, and the context guide: the previous segment's final
latents). The conditioning's `uuid` (new on every set_conds) is left out. `segments/retakes.py` chains them.
"""

from __future__ import annotations

import weakref

import torch

from ...segments.fingerprint import ByIdentity, Fingerprint
from ..sp.devices import device_labels

__all__ = ["job_digest", "segment_digest"]

_GUIDER_OWN = ("model_patcher", "model_options", "original_conds", "conds", "inner_model", "inner_sample")


def _patcher(value) -> object | None:
    """A ModelPatcher as a plain description (None for anything else): the module by identity, never its weights."""
    if not (hasattr(value, "patches_uuid") and hasattr(value, "patches") and hasattr(value, "model")):
        return None
    patches = {key: [(p[0], p[2], p[3], p[4]) if len(p) >= 5 else tuple(x for x in p if not torch.is_tensor(x))
                     for p in entries] for key, entries in value.patches.items()}
    return {"model": ByIdentity(value.model), "patches_uuid": str(value.patches_uuid), "patches": patches,
            "object_patches": getattr(value, "object_patches", {}),
            "weight_wrapper_patches": getattr(value, "weight_wrapper_patches", {}),
            "hook_patches": sorted(map(repr, getattr(value, "hook_patches", {}) or {})),
            "model_options": getattr(value, "model_options", {})}


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
