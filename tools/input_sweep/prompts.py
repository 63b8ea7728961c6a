"""The sweep's host prompts: the shipped examples made tiny (`tiny_rewrite`), one case changes one thing in one.

Every builder returns a fresh prompt whose output files are named after the case's `tag`, so no two cases share an
output and ComfyUI's output cache never answers a case with another case's file.
"""

from __future__ import annotations

from tests.comfyui.api_examples import DECODE_SAVE, load_example, node_id, tiny_rewrite

STEPS = 2   # sampler steps of every host prompt (tiny_rewrite's 3, one fewer: the sweep runs hundreds of prompts)
TINY_VAE_NODE = "LongMediaTestTinyH3VAE"


def _decode_save(prompt: dict, tag: str, latent: list) -> None:
    """Decode & Save (on the tiny H3 VAEs) reading `latent`, in place of the raw-latent save node."""
    prompt.pop("save", None)
    prompt["dvae"] = {"class_type": TINY_VAE_NODE, "inputs": {"kind": "video", "seed": 0}}
    prompt["avae"] = {"class_type": TINY_VAE_NODE, "inputs": {"kind": "audio", "seed": 0}}
    prompt["decode"] = {"class_type": DECODE_SAVE, "inputs": {
        "latent": latent, "video_vae": ["dvae", 0], "audio_vae": ["avae", 0], "filename_prefix": f"sweep/{tag}",
        "fps": 24, "bit_depth": 8, "crf": -1}}


def _drop_decode(prompt: dict) -> None:
    """The example's own Decode & Save and its VAE nodes removed (the raw-latent save node stays the output)."""
    for nid in [k for k, n in prompt.items() if n["class_type"] == DECODE_SAVE]:
        decode = prompt.pop(nid)
        for name in ("video_vae", "audio_vae"):
            link = decode["inputs"].get(name)
            if isinstance(link, list):
                prompt.pop(link[0], None)


def _tiny(example: str, tag: str) -> dict:
    prompt = tiny_rewrite(load_example(example), f"sweep/{tag}.safetensors")
    prompt[node_id(prompt, "BasicScheduler")]["inputs"]["steps"] = STEPS
    return prompt


def one_pass(tag: str, *, decode: bool = False) -> dict:
    """t2va_10s at 64x64, 0.9 s (22 frames): Setup -> Sampler -> a raw-latent save (or Decode & Save)."""
    prompt = _tiny("t2va_10s", tag)
    if decode:
        _decode_save(prompt, tag, [node_id(prompt, "LongMediaSampler"), 0])
    return prompt


def story(tag: str, *, decode: bool = False) -> dict:
    """t2va_story_retake at 64x64: three segment prompts (3.75 s, three passes), Retakes, per-segment seeds."""
    prompt = _tiny("t2va_story_retake", tag)
    prompt[node_id(prompt, "LongMediaSampler")]["inputs"]["segment_seeds"] = ""
    if decode:
        _decode_save(prompt, tag, [node_id(prompt, "LongMediaSampler"), 0])
    else:
        _drop_decode(prompt)
    return prompt


def stages(tag: str, *, decode: bool = False) -> dict:
    """t2va_30s_segmented at 64x64 (2.0 s in two 1.0 s segments): Setup -> Sampler -> Hi-Res (x1.5: 1.25 snaps
    back to 64 px) -> Refiner -> a raw-latent save (or Decode & Save)."""
    prompt = _tiny("t2va_30s_segmented", tag)
    prompt[node_id(prompt, "LongMediaHiRes")]["inputs"]["scale"] = 1.5
    if decode:
        _decode_save(prompt, tag, [node_id(prompt, "LongMediaRefiner"), 0])
    else:
        _drop_decode(prompt)
    return prompt


def second_setup(prompt: dict, nid: str = "setup_b", **inputs) -> str:
    """A second Setup beside the prompt's own (same conditioning links), `inputs` changed: its id."""
    own = prompt[node_id(prompt, "LongMediaSetup")]
    prompt[nid] = {"class_type": "LongMediaSetup", "inputs": {**own["inputs"], **inputs}}
    return nid


def set_input(prompt: dict, ctype: str, name: str, value: object) -> dict:
    """The first `ctype` node's input `name` set to `value` (a missing-value marker deletes it): the prompt."""
    inputs = prompt[node_id(prompt, ctype)]["inputs"]
    if value is MISSING:
        inputs.pop(name, None)
    else:
        inputs[name] = value
    return prompt


class _Missing:
    def __repr__(self) -> str:
        return "<missing>"


MISSING = _Missing()   # an input left out of the prompt altogether
