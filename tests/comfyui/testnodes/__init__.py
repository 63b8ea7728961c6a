"""Test-only ComfyUI nodes, loaded only by the test server (tests/comfyui/harness.py links them in).

- LongMediaTestTinyCLIP: a tiny random-weight H3 text encoder (CLIP) built in-process; feed it to the
  stock CLIPTextEncode to get CONDITIONING in the stock H3 layout.
- LongMediaTestLoadConditioning: CONDITIONING from a file written by `save_conditioning`.
- LongMediaTestAudio: an AUDIO of random noise, `seconds` long (0 gives a 0-sample waveform).
- LongMediaTestFlatSetup: Setup's sockets in the flat schema of a ComfyUI without V3 dynamic inputs (a `family`
  combo and every frame / reference socket listed), for the web extension's fallback; it runs nothing.
- LongMediaTestTinyH3VAE: ComfyUI's H3 video or audio VAE class at tiny size in ComfyUI's own VAE wrapper
  (`longmedia.testing.tiny_vae`), for LongMedia Decode & Save in a prompt.
- LongMediaTestSaveLatent: writes a LATENT's raw tensors (every stream of a nested AV latent) to a
  safetensors file in the output directory, so a test can read them back.
"""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path


def _tiny():
    """`tiny_text_encoder` beside this file (it imports `longmedia`: the test server has this checkout on
    PYTHONPATH, harness.server_env)."""
    from . import tiny_text_encoder as tiny

    return tiny


class LongMediaTestTinyCLIP:
    CATEGORY = "longmedia/testing"
    RETURN_TYPES = ("CLIP",)
    FUNCTION = "build"

    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {"seed": ("INT", {"default": 0, "min": 0, "max": 2 ** 31 - 1}),
                             "text_dim": ("INT", {"default": 96, "min": 8, "max": 8192})}}

    def build(self, seed, text_dim):
        tiny = _tiny()
        dims = dataclasses.replace(tiny.TINY_DIMS, text_dim=text_dim)
        return (tiny.tiny_text_encoder(dims, seed=seed),)


class LongMediaTestLoadConditioning:
    CATEGORY = "longmedia/testing"
    RETURN_TYPES = ("CONDITIONING",)
    FUNCTION = "load"

    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {"path": ("STRING", {"default": "conditioning.pt",
                                                 "tooltip": "absolute, or relative to the input directory"})}}

    def load(self, path):
        import folder_paths

        full = Path(path) if os.path.isabs(path) else Path(folder_paths.get_input_directory()) / path
        from longmedia.testing.conditioning import load_conditioning

        return (load_conditioning(full),)


class LongMediaTestAudio:
    CATEGORY = "longmedia/testing"
    RETURN_TYPES = ("AUDIO",)
    FUNCTION = "build"

    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {"seconds": ("FLOAT", {"default": 1.0, "min": 0.0, "max": 60.0, "step": 0.01}),
                             "seed": ("INT", {"default": 0, "min": 0, "max": 2 ** 31 - 1})}}

    def build(self, seconds, seed):
        import torch

        wave = torch.randn(1, 2, round(seconds * 32000), generator=torch.Generator().manual_seed(seed)) * 0.1
        return ({"waveform": wave, "sample_rate": 32000},)


class LongMediaTestSaveLatent:
    CATEGORY = "longmedia/testing"
    RETURN_TYPES = ()
    FUNCTION = "save"
    OUTPUT_NODE = True

    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {"samples": ("LATENT",),
                             "filename": ("STRING", {"default": "longmedia_latent.safetensors"})}}

    def save(self, samples, filename):
        import folder_paths
        from safetensors.torch import save_file

        out_dir = Path(folder_paths.get_output_directory()).resolve()
        path = (out_dir / filename).resolve()
        if out_dir not in path.parents:
            raise ValueError(f"filename {filename!r} leaves the output directory {out_dir}: use a relative name")
        latent = samples["samples"]
        if getattr(latent, "is_nested", False):
            streams = list(latent.tensors)
            names = ["video", "audio"] if len(streams) == 2 else [f"stream_{i}" for i in range(len(streams))]
        else:
            streams, names = [latent], ["samples"]
        tensors = {n: t.detach().to("cpu").contiguous() for n, t in zip(names, streams)}
        path.parent.mkdir(parents=True, exist_ok=True)
        save_file(tensors, str(path), metadata={"streams": json.dumps(names)})
        info = {"filename": str(path.relative_to(out_dir)), "streams": names,
                "shapes": [list(t.shape) for t in tensors.values()]}
        return {"ui": {"longmedia_latent": [info]}}


class LongMediaTestFlatSetup:
    CATEGORY = "longmedia/testing"
    RETURN_TYPES = ("CONDITIONING",)
    FUNCTION = "refuse"

    @classmethod
    def INPUT_TYPES(cls):
        _tiny()
        from longmedia.job.setup_plan import FAMILIES, SLOTS, SOUNDTRACK_PREFIX

        refs = [(f"ref_image_{i}", "IMAGE") for i in range(1, SLOTS["picture"][1] + 1)]
        for i in range(1, SLOTS["video"][1] + 1):
            refs += [(f"ref_video_{i}", "IMAGE"), (f"{SOUNDTRACK_PREFIX}{i}", "AUDIO")]
        refs += [(f"ref_audio_{i}", "AUDIO") for i in range(1, SLOTS["audio"][1] + 1)]
        optional = {"positive": ("CONDITIONING",), "negative": ("CONDITIONING",), "clip": ("CLIP",),
                    "prompt": ("STRING", {"multiline": True, "default": ""}), "vae": ("VAE",), "audio_vae": ("VAE",),
                    "first_frame": ("IMAGE",), "last_frame": ("IMAGE",), **{n: (t,) for n, t in refs}}
        return {"required": {"family": (list(FAMILIES),)}, "optional": optional}

    def refuse(self, **_):
        raise RuntimeError("LongMediaTestFlatSetup only shows the flat socket layout; it does not run")


def _tiny_vae():
    """This checkout's `longmedia/testing/tiny_vae.py` (torch only), loaded from its file: an installed `longmedia`
    from another checkout must not stand in for it."""
    import importlib.util

    path = Path(os.path.realpath(__file__)).parents[3] / "longmedia" / "testing" / "tiny_vae.py"
    spec = importlib.util.spec_from_file_location("longmedia_testnodes_tiny_vae", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class LongMediaTestTinyH3VAE:
    CATEGORY = "longmedia/testing"
    RETURN_TYPES = ("VAE",)
    FUNCTION = "build"

    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {"kind": (["video", "audio"],),
                             "seed": ("INT", {"default": 0, "min": 0, "max": 2 ** 31 - 1})}}

    def build(self, kind, seed):
        import comfy.sd
        from comfy.ldm.minimax import audio_vae, vae

        tiny_vae = _tiny_vae()

        if kind == "video":
            return (tiny_vae.tiny_video_vae(comfy.sd, vae, seed=seed),)
        return (tiny_vae.tiny_audio_vae(comfy.sd, audio_vae, seed=seed),)


NODE_CLASS_MAPPINGS = {
    "LongMediaTestFlatSetup": LongMediaTestFlatSetup,
    "LongMediaTestTinyCLIP": LongMediaTestTinyCLIP,
    "LongMediaTestLoadConditioning": LongMediaTestLoadConditioning,
    "LongMediaTestSaveLatent": LongMediaTestSaveLatent,
    "LongMediaTestAudio": LongMediaTestAudio,
    "LongMediaTestTinyH3VAE": LongMediaTestTinyH3VAE,
}
NODE_DISPLAY_NAME_MAPPINGS = {
    "LongMediaTestFlatSetup": "LongMedia Test: Setup sockets, flat schema",
    "LongMediaTestTinyCLIP": "LongMedia Test: Tiny H3 Text Encoder",
    "LongMediaTestLoadConditioning": "LongMedia Test: Load Conditioning",
    "LongMediaTestSaveLatent": "LongMedia Test: Save Raw Latent",
    "LongMediaTestAudio": "LongMedia Test: Noise Audio",
    "LongMediaTestTinyH3VAE": "LongMedia Test: Tiny H3 VAE",
}
