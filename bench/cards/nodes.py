"""Bench-only ComfyUI nodes for the card bench, registered in-process (never shipped in the pack).

- LongMediaBenchConditioning: H3 CONDITIONING at full text width from `longmedia.testing.conditioning.random_conditioning`
  (no H3 text encoder exists here).
- LongMediaBenchSampler: what the LongMedia Sampler node does (`run_sampler` with a PlanRequest), but
  with the simulated card's DeviceProfile: LongMedia's planner reads `torch.cuda.mem_get_info`, which
  neither `--reserve-vram` nor `set_per_process_memory_fraction` shrinks, so the node hands the planner
  what a real card of `card_gib` would report (the card, less what this process already holds).
- LongMediaBenchSink: the output node; returns the latent's statistics and the report to the history.

The sampler's optional inputs serve `--extras` (extras.py): `plan_after_boundary` hands
run_sampler a probe read after the residency boundary, with comfy-aimdo's reclaimable weight pages
counted free (what the product does without a fixed profile); `segment_seconds` > 0 runs the job as
Setup would segment it (`plan_segments(total_seconds=job_seconds, ...)` -> `run_segmented`);
`inject_oom` / `interrupt_after_calls` inject a fault for the duration of the call (faults.py);
`prefetch_off` turns ComfyUI's block prefetch off in every model call (the `longmedia_prefetch_off` rows).
"""

from __future__ import annotations

import dataclasses
import json

from longmedia.units import GIB

from . import faults, probes


def card_profile(card_gib: float, simulate: str = "ballast"):
    """ballast: what torch reads is the card already (free = card less this process); only the total is
    renamed. reserve: the card, less what this process already holds."""
    import torch

    from longmedia.comfy.host.memory import dynamic_vram_active
    from longmedia.h3.profiles import DeviceProfile

    real = DeviceProfile.detect(torch.device("cuda", 0), dynamic_vram=dynamic_vram_active())
    card = int(card_gib * GIB)
    if simulate == "ballast":
        return dataclasses.replace(real, name=f"{card_gib:g} GiB card (ballast on {real.name})", vram_total_bytes=card)
    used = real.vram_total_bytes - real.vram_free_bytes
    return dataclasses.replace(real, name=f"{card_gib:g} GiB card simulated on {real.name}", vram_total_bytes=card,
                               vram_free_bytes=max(0, card - used))


class LongMediaBenchConditioning:
    RETURN_TYPES = ("CONDITIONING",)
    FUNCTION = "make"
    CATEGORY = "longmedia/bench"

    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {"tokens": ("INT", {"default": 128, "min": 1, "max": 4096}),
                             "seed": ("INT", {"default": 0, "min": 0, "max": 2 ** 31 - 1})},
                "optional": {"tiny": ("BOOLEAN", {"default": False})}}   # the tiny checkpoint's text width (--smoke)

    def make(self, tokens, seed, tiny=False):
        from longmedia.h3.dims import H3_FULL
        from longmedia.testing.conditioning import random_conditioning
        from longmedia.testing.tiny_h3 import TINY_DIMS

        return (random_conditioning(tokens, dims=TINY_DIMS if tiny else H3_FULL, seed=seed),)


class LongMediaBenchSampler:
    RETURN_TYPES = ("LATENT", "STRING")
    FUNCTION = "sample"
    CATEGORY = "longmedia/bench"

    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {"noise": ("NOISE",), "guider": ("GUIDER",), "sampler": ("SAMPLER",),
                             "sigmas": ("SIGMAS",), "latent_image": ("LATENT",),
                             "memory_mode": ("STRING", {"default": "auto"}),
                             "attention_mode": ("STRING", {"default": "auto"}),
                             "card_gib": ("FLOAT", {"default": 16.0}),
                             "simulate": ("STRING", {"default": "ballast"})},
                "optional": {"plan_after_boundary": ("BOOLEAN", {"default": False}),
                             "job_seconds": ("FLOAT", {"default": 0.0}),
                             "segment_seconds": ("FLOAT", {"default": 0.0}),
                             "context_frames": ("INT", {"default": 5}),
                             "inject_oom": ("STRING", {"default": ""}),
                             "interrupt_after_calls": ("INT", {"default": 0}),
                             "prefetch_off": ("BOOLEAN", {"default": False}),
                             "read_ahead": ("INT", {"default": 0, "min": 0, "max": 8}),
                             "request_json": ("STRING", {"default": ""}),
                             "nan_probe": ("BOOLEAN", {"default": False}),
                             "weights": ("STRING", {"default": ""})}}

    def sample(self, noise, guider, sampler, sigmas, latent_image, memory_mode, attention_mode, card_gib,
               simulate="ballast", plan_after_boundary=False, job_seconds=0.0, segment_seconds=0.0, context_frames=5,
               inject_oom="", interrupt_after_calls=0, prefetch_off=False, read_ahead=0, request_json="",
               nan_probe=False,
               weights=""):
        if plan_after_boundary:
            profile = card_probe(card_gib, simulate, guider.model_patcher.load_device)
        else:
            profile = card_profile(card_gib, simulate)
        result = sample(noise, guider, sampler, sigmas, latent_image, memory_mode, attention_mode, profile,
                        job_seconds=job_seconds, segment_seconds=segment_seconds, context_frames=context_frames,
                        inject_oom=inject_oom, interrupt_after_calls=interrupt_after_calls,
                        prefetch_off=prefetch_off, read_ahead=read_ahead,
                        controls=json.loads(request_json) if request_json else None,
                        nan_probe=nan_probe, weights=weights)
        return (result.output, result.report.to_json())


def card_probe(card_gib: float, simulate: str, load_device):
    """The card's profile read when called (after the residency boundary), with the weight pages comfy-aimdo could
    give back counted free, as the Sampler's own `pass_plan.load_device_profile` does."""
    def probe():
        from longmedia.comfy.host.memory import vbar_reclaimable_bytes
        from longmedia.comfy.passes.pass_plan import with_pins_available

        card = with_pins_available(card_profile(card_gib, simulate))
        reclaimable = vbar_reclaimable_bytes(load_device) or 0
        return dataclasses.replace(card, vram_free_bytes=min(card.vram_total_bytes, card.vram_free_bytes + reclaimable))
    return probe


def _text_rows(guider) -> int:
    """The longest text conditioning: attention over more keys than this is the DiT's joint attention."""
    rows = [int(c["cross_attn"].shape[1]) for entries in (getattr(guider, "original_conds", None) or {}).values()
            for c in entries if isinstance(c, dict) and getattr(c.get("cross_attn"), "ndim", 0) >= 2]
    return max(rows, default=1024)


def sample(noise, guider, sampler, sigmas, latent, memory_mode, attention_mode, device_profile, *, job_seconds=0.0,
           segment_seconds=0.0, context_frames=5, inject_oom="", interrupt_after_calls=0, prefetch_off=False,
           read_ahead=0,
           controls: dict | None = None, nan_probe=False, weights=""):
    """run_sampler (or run_segmented for segment_seconds > 0) with the fault asked for injected around it;
    `prefetch_off`: ComfyUI's block prefetch turned off in every model call, as LongMedia did before it left
    the setting to ComfyUI when no weight streams (the control of that change); `read_ahead`: the Sampler reads the
    next `read_ahead` blocks' weights ahead from disk (`run_sampler(read_ahead_blocks=...)`; 0: as the plan says); `controls`: manual
    controls of the
    PlanRequest (field name -> value), as the Sampler node's inputs set them; `nan_probe`: print where the packed
    sequence first stops being finite and where each held weight came from (`probes.diagnostics`);
    `weights`: "unordered" hands held weights back without ordering their offload stream (before the fix),
    "sync_release" synchronizes the device before the executor hands a held weight back to ComfyUI, "owned"
    hands out copies and releases the cast at once (`probes.weight_access`)."""
    import contextlib

    from longmedia.attention.schedule import SolSettings
    from longmedia.comfy.passes.sampler import run_sampler
    from longmedia.comfy.passes.segmented import run_segmented
    from longmedia.planning.types import PlanRequest
    from longmedia.segments.timeline import plan_segments

    controls = dict(controls or {})
    if isinstance(controls.get("sol"), dict):  # Sol settings by name, as the Sampler node's sol_* inputs set them
        controls["sol"] = SolSettings(**controls["sol"])
    request = PlanRequest(memory_mode=memory_mode, attention_mode=attention_mode, **controls)
    if prefetch_off:
        guider = _prefetch_forced_off(guider)
    with contextlib.ExitStack() as stack:
        if inject_oom:
            stack.enter_context(faults.inject_oom(inject_oom, guider.model_patcher.model.diffusion_model,
                                                  min_rows=_text_rows(guider)))
        observer, access = stack.enter_context(probes.diagnostics(nan_probe, weights)) if nan_probe or weights \
            else (None, None)
        if interrupt_after_calls > 0:
            stack.enter_context(faults.InterruptAfter(interrupt_after_calls).armed())
        if segment_seconds > 0:
            plan = plan_segments(total_seconds=job_seconds, segment_seconds=segment_seconds,
                                 context_frames=context_frames)
            return run_segmented(noise, guider, sampler, sigmas, latent, request, plan, device_profile=device_profile,
                                 observer=observer, weights=access)
        return run_sampler(noise, guider, sampler, sigmas, latent, request, device_profile=device_profile,
                           observer=observer, weights=access, read_ahead_blocks=read_ahead or None)


def _prefetch_forced_off(guider):
    """A copy of `guider` whose model calls run with `prefetch_dynamic_vbars` False (an outer DIFFUSION_MODEL
    wrapper: LongMedia's own wrapper, inside it, leaves the value when its plan keeps prefetch)."""
    import copy

    import comfy.model_patcher
    import comfy.patcher_extension as ext

    def off(executor, x, timestep, context, transformer_options, *args, **kwargs):
        transformer_options["prefetch_dynamic_vbars"] = False
        return executor(x, timestep, context, transformer_options, *args, **kwargs)

    g = copy.copy(guider)
    g.model_options = comfy.model_patcher.create_model_options_clone(guider.model_options)
    ext.add_wrapper_with_key(ext.WrappersMP.DIFFUSION_MODEL, "longmedia_bench_prefetch_off", off, g.model_options,
                             is_model_options=True)
    return g


class LongMediaBenchSink:
    RETURN_TYPES = ()
    FUNCTION = "sink"
    OUTPUT_NODE = True
    CATEGORY = "longmedia/bench"

    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {"samples": ("LATENT",)},
                "optional": {"report": ("STRING", {"forceInput": True}),
                             "save_path": ("STRING", {"default": "", "tooltip": "where to torch.save the video "
                                                      "latent (fp32, CPU) for bench/latent_diff.py; empty: not saved"})}}

    def sink(self, samples, report=None, save_path=""):
        import torch

        video = samples["samples"].unbind()[0] if hasattr(samples["samples"], "unbind") else samples["samples"]
        stats = {"finite": bool(torch.isfinite(video).all()), "std": float(video.float().std()),
                 "checksum": float(video.double().sum())}
        if save_path:
            torch.save(video.float().cpu(), save_path)
        return {"ui": {"stats": [stats], "report": [report or ""]}}


NODES = {"LongMediaBenchConditioning": LongMediaBenchConditioning, "LongMediaBenchSampler": LongMediaBenchSampler,
         "LongMediaBenchSink": LongMediaBenchSink}


def register() -> None:
    """Add the bench nodes to this process's ComfyUI node table, as a custom node pack's import would."""
    import nodes

    nodes.NODE_CLASS_MAPPINGS.update(NODES)
