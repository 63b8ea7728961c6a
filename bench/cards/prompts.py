"""The card bench's prompt: one row as a ComfyUI API prompt (the control samplers' inputs included), and the
PromptServer stand-in the executor reports to."""

from __future__ import annotations

import json
import time
from typing import Callable

JOB = (1344, 768)

GUARDS_OFF = {"inter_block_vram_guard_mb": 0, "inter_block_guard_emergency_mb": 0, "late_block_guard_target_mb": 0,
              "step_boundary_cleanup_mb": 0}
CONTROLS = {  # LongMedia run with one thing changed: (attention_mode, LongMediaBenchSampler's extra inputs)
    "longmedia_prefetch_off": ("auto", {"prefetch_off": True}),
    "longmedia_read_ahead": ("auto", {"read_ahead": 2}),
    "longmedia_read_ahead1": ("auto", {"read_ahead": 1}),
    "longmedia_guards_off": ("auto", {"request_json": json.dumps(GUARDS_OFF)}),
    "longmedia_no_release": ("auto", {"request_json": json.dumps({"inter_block_guard_emergency_mb": 0,
                                                                  "late_block_guard_target_mb": 0})}),
    "longmedia_existing": ("existing", {}),
    "longmedia_nan_probe": ("auto", {"nan_probe": True}),
    # without the probe: its per-stage syncs would keep the CPU from running ahead and hide a race
    "longmedia_sync_release": ("auto", {"weights": "sync_release"}),
    "longmedia_owned_weights": ("auto", {"weights": "owned"}),
    "longmedia_unordered": ("auto", {"weights": "unordered"}),
    "longmedia_sol": ("sol", {}),  # Sol at its defaults (tau_start 1.3), as a main row: device-timed, --latents
    "longmedia_sol_tau08": ("sol", {"request_json": json.dumps({"sol": {"tau_start": 0.8}})}),  # scheduled_sol's end
    "longmedia_scheduled_sol": ("scheduled_sol", {}),
}
CONTROLS_HELP = ("longmedia_read_ahead, longmedia_read_ahead1: the next 2 (1) blocks' weights read ahead from disk "
                 "where they stream from it (posix_fadvise; off by default, measured slower with ComfyUI's block "
                 "prefetch off); "
                 "longmedia_prefetch_off: ComfyUI's block prefetch forced off in every model call, as LongMedia's "
                 "plan did when every weight stays resident (the control of that change); longmedia_guards_off: "
                 "every block and step guard set to 0 (manual controls); longmedia_no_release: the two guards that "
                 "give back weight pages (emergency, late-block) set to 0; longmedia_existing: attention_mode "
                 "existing (ComfyUI's own attention function); longmedia_nan_probe: prints the first executor "
                 "stage whose packed sequence holds NaN or inf, and where the held weights came from (resident, "
                 "comfy-aimdo's pages, an offload cast buffer; its checks sync the device twice per block); "
                 "longmedia_sync_release: the device synchronized before each held weight goes back to ComfyUI; "
                 "longmedia_owned_weights: each weight copied and its cast released at once; longmedia_unordered: "
                 "held weights handed back as before the fix (no offload-stream wait: ComfyUI's uncast alone); "
                 "longmedia_sol / longmedia_scheduled_sol: attention_mode sol / scheduled_sol at their defaults; "
                 "longmedia_sol_tau08: sol at tau 0.8 (scheduled_sol's last tau; bench/schedule_average.py)")


def base_sampler(name: str) -> str:
    """The sampler a row runs: `stock#2` is stock again (a repeat in the same card process, its own row)."""
    return name.split("#", 1)[0]


def execute(executor, p: dict, prompt_id: str, sampler: str) -> None:
    """Run prompt `p` for a row of `sampler`. A repeat (`stock#2`) first frees ComfyUI's node cache, as ComfyUI's
    own "free memory" request does between prompts (`POST /free`, which calls `PromptExecutor.reset()`): the
    repeat's inputs equal its first run's, so without it the executor serves the sampler's cached output and
    nothing samples."""
    if base_sampler(sampler) != sampler:
        executor.reset()
    executor.execute(p, prompt_id, {"client_id": "bench"}, ["sink"])


def sampler_name(value: str) -> str:
    """--samplers' argument type: a sampler (longmedia, stock, a control) or a repeat of one, `name#N` with N >= 2."""
    import argparse

    name, _, repeat = value.partition("#")
    if name not in ("longmedia", "stock", *CONTROLS):
        raise argparse.ArgumentTypeError(f"unknown sampler {name!r}: longmedia, stock or one of {', '.join(CONTROLS)}")
    if repeat and not (repeat.isdigit() and int(repeat) >= 2):
        raise argparse.ArgumentTypeError(f"{value!r}: a repeat is name#N with N >= 2 (stock#2 runs stock again)")
    return value


class Server:
    """What PromptExecutor needs of ComfyUI's PromptServer: a sink for its messages (timestamps kept)."""

    def __init__(self, on_sample_start: Callable[[], None] | None = None):
        self.on_sample_start = on_sample_start  # called as the sampler node starts executing (the step clock's start)
        self.client_id = None
        self.last_node_id = None
        self.last_prompt_id = None
        self.sockets_metadata = {}
        self.events: list[tuple[float, str, dict]] = []

    def send_sync(self, event, data, sid=None):
        data = data if isinstance(data, dict) else {}
        if event == "executing" and data.get("node") == "sample" and self.on_sample_start is not None:
            self.on_sample_start()
        self.events.append((time.perf_counter(), event, data))


def prompt(unet: str, seconds: float, steps: int, seed: int, sampler: str, card: float, attention: str = "auto",
           simulate: str = "ballast", memory_mode: str = "auto", latent_path: str = "", lora: str = "",
           **extra_inputs):
    """One row's prompt (`sampler`: stock, or a LongMedia sampler; a repeat's `base_sampler`); `extra_inputs` go to
    LongMediaBenchSampler's optional inputs (the extras); the sink saves the video latent to `latent_path` when one
    is given; `lora`: a LoRA file stock LoraLoaderModelOnly applies at strength 1 between the loader and the rest."""
    from longmedia.h3.lattice import frames_for_seconds

    w, h = JOB
    p = {
        "unet": {"class_type": "UNETLoader", "inputs": {"unet_name": unet, "weight_dtype": "default"}},
        "shift": {"class_type": "MiniMaxH3SigmaShift", "inputs": {"model": ["lora" if lora else "unet", 0],
                                                                   "shift_video": 12.0,
                                                                   "shift_audio": 3.0}},
        "pos": {"class_type": "LongMediaBenchConditioning", "inputs": {"tokens": 128, "seed": 1}},
        "neg": {"class_type": "LongMediaBenchConditioning", "inputs": {"tokens": 16, "seed": 2}},
        "guider": {"class_type": "CFGGuider", "inputs": {"model": ["shift", 0], "positive": ["pos", 0],
                                                         "negative": ["neg", 0], "cfg": 1.0}},
        "sampler": {"class_type": "KSamplerSelect", "inputs": {"sampler_name": "euler"}},
        "sigmas": {"class_type": "BasicScheduler", "inputs": {"model": ["shift", 0], "scheduler": "simple",
                                                              "steps": steps, "denoise": 1.0}},
        "noise": {"class_type": "RandomNoise", "inputs": {"noise_seed": seed}},
        "latent": {"class_type": "EmptyMiniMaxH3LatentAV",
                   "inputs": {"width": w, "height": h, "length": frames_for_seconds(seconds)}},
    }
    if lora:
        p["lora"] = {"class_type": "LoraLoaderModelOnly",
                     "inputs": {"model": ["unet", 0], "lora_name": lora, "strength_model": 1.0}}
    links = {"noise": ["noise", 0], "guider": ["guider", 0], "sampler": ["sampler", 0], "sigmas": ["sigmas", 0],
             "latent_image": ["latent", 0]}
    if sampler == "stock":
        p["sample"] = {"class_type": "SamplerCustomAdvanced", "inputs": links}
        p["sink"] = {"class_type": "LongMediaBenchSink", "inputs": {"samples": ["sample", 0],
                                                                    "save_path": latent_path}}
    else:
        p["sample"] = {"class_type": "LongMediaBenchSampler",
                       "inputs": {**links, "memory_mode": memory_mode, "attention_mode": attention, "card_gib": card,
                                  "simulate": simulate, **extra_inputs}}
        p["sink"] = {"class_type": "LongMediaBenchSink", "inputs": {"samples": ["sample", 0], "report": ["sample", 1],
                                                                    "save_path": latent_path}}
    return p
