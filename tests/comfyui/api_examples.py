"""The shipped examples (workflows/*.api.json) as API prompts that run on the tiny test models.

Shared by the real-ComfyUI tests (`from api_examples import ...`, this folder on pytest's path) and the input sweep
(`tools.input_sweep`, run from the repository root: `from tests.comfyui.api_examples import ...`), so it imports
nothing from this folder.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path

from longmedia.segments.prompts import parse_segment_prompts
from longmedia.testing.tiny_h3 import TINY_DIMS

REPO = Path(__file__).resolve().parents[2]
TINY_UNET = "tiny_h3_fp32.safetensors"
TINY_VAE = "LongMediaStageTestTinyVAE"
DECODERS = ("VAEDecode", "VAEDecodeAudio", "VAEDecodeTiled", "CreateVideo", "SaveVideo")
DECODE_SAVE = "LongMediaDecodeSave"
TINY_SIDE = 64
TINY_STEPS = {"BasicScheduler": 3, "LongMediaRefiner": 2}


def tiny_rewrite(prompt: dict, out_name: str, images: dict[str, str] | None = None) -> dict:
    """An example API prompt made runnable on the tiny test models; everything not listed here is unchanged.

    * UNETLoader -> `tiny_h3_fp32.safetensors` (written by the harness into models/diffusion_models).
    * CLIPLoader -> LongMediaTestTinyCLIP (tiny random Qwen3-VL, real H3 tokenizer).
    * A VAELoader feeding LongMediaSetup -> LongMediaStageTestTinyVAE (an in-process stand-in: no tiny VAE
      loads through the stock loaders); one feeding LongMedia Decode & Save -> LongMediaTestTinyH3VAE (ComfyUI's
      H3 VAE class at tiny size, `longmedia.testing.tiny_vae`), which runs; VAELoaders that only feed stock
      decoders are removed.
    * VAEDecode / VAEDecodeAudio / CreateVideo / SaveVideo -> removed; LongMediaTestSaveLatent ("save")
      writes the latent the decoders (or Decode & Save) read to output/`out_name`.
    * LongMediaSetup -> 64x64; 10 s -> 0.9 s (22 frames); a segmented job -> 2.0 s in 1.0 s segments
      (56 frames: a 39-frame pass, then 17 new frames behind 22 context frames); with n > 2 segment_prompts,
      (39 + 34 (n - 2) + 17) / 24 s (n segments), and a time schedule becomes the list of its prompts.
    * BasicScheduler 3 steps, LongMediaRefiner 2 steps.
    * LoadImage -> the file names in `images` (old name -> tiny picture the test wrote into input/).
    """
    prompt = copy.deepcopy(prompt)
    setup_ids = {k for k, n in prompt.items() if n["class_type"] == "LongMediaSetup"}
    encode_vaes = {v[0] for k in setup_ids for name, v in prompt[k]["inputs"].items()
                   if name in ("vae", "audio_vae") and isinstance(v, list)}
    decoded = {n["inputs"]["samples"][0]: n["inputs"]["samples"][1] for n in prompt.values()
               if n["class_type"] in ("VAEDecode", "VAEDecodeAudio")}
    decoded |= {n["inputs"]["latent"][0]: n["inputs"]["latent"][1] for n in prompt.values()
                if n["class_type"] == DECODE_SAVE}
    decode_vaes = {n["inputs"][name][0]: name.split("_")[0] for n in prompt.values() if n["class_type"] == DECODE_SAVE
                   for name in ("video_vae", "audio_vae") if isinstance(n["inputs"].get(name), list)}
    for nid, node in list(prompt.items()):
        ctype, inputs = node["class_type"], node["inputs"]
        if ctype == "VAELoader" and nid in decode_vaes:
            prompt[nid] = {"class_type": "LongMediaTestTinyH3VAE", "inputs": {"kind": decode_vaes[nid], "seed": 0}}
        elif ctype in DECODERS or (ctype == "VAELoader" and nid not in encode_vaes):
            del prompt[nid]
        elif ctype == "VAELoader":
            prompt[nid] = {"class_type": TINY_VAE, "inputs": {"seed": 0}}
        elif ctype == "UNETLoader":
            inputs.update(unet_name=TINY_UNET, weight_dtype="default")
        elif ctype == "CLIPLoader":
            prompt[nid] = {"class_type": "LongMediaTestTinyCLIP", "inputs": {"seed": 0, "text_dim": TINY_DIMS.text_dim}}
        elif ctype == "LoadImage":
            inputs["image"] = (images or {})[inputs["image"]]
        elif ctype == "LongMediaSetup":
            segmented = inputs["segment_seconds"] > 0
            prompts = [e.text for e in parse_segment_prompts(inputs.get("segment_prompts", ""))]
            seconds = (39 + 34 * (len(prompts) - 2) + 17) / 24 if len(prompts) > 2 else 2.0
            inputs.update(width=TINY_SIDE, height=TINY_SIDE, seconds=seconds if segmented else 0.9,
                          segment_seconds=1.0 if segmented else 0.0)
            if prompts:
                inputs["segment_prompts"] = "\n".join(prompts)
        if ctype in TINY_STEPS:
            inputs["steps"] = TINY_STEPS[ctype]
    (source,) = decoded.items()
    prompt["save"] = {"class_type": "LongMediaTestSaveLatent", "inputs": {"samples": list(source), "filename": out_name}}
    return prompt


def load_example(name: str) -> dict:
    return json.loads((REPO / "workflows" / f"{name}.api.json").read_text())


def node_id(prompt: dict, ctype: str) -> str:
    return next(k for k, n in prompt.items() if n["class_type"] == ctype)
