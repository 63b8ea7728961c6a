"""A real ComfyUI server samples the tiny H3 checkpoints through a stock API prompt."""

from __future__ import annotations

import pytest
import torch
from harness import ComfyHarnessError, h3_latent_shapes, t2va_prompt
from safetensors.torch import load_file

from longmedia.testing import conditioning as tc
from longmedia.testing.tiny_h3 import TINY_DIMS

STOCK_H3_NODES = ("EmptyMiniMaxH3LatentAV", "MiniMaxH3ImageToVideo", "MiniMaxH3AddGuide",
                  "MiniMaxH3ReferenceToVideo", "MiniMaxH3SigmaShift")
SAMPLING_NODES = ("UNETLoader", "CLIPTextEncode", "CFGGuider", "KSamplerSelect", "BasicScheduler", "RandomNoise",
                  "SamplerCustomAdvanced")
TEST_NODES = ("LongMediaTestTinyCLIP", "LongMediaTestLoadConditioning", "LongMediaTestSaveLatent")
WIDTH = HEIGHT = 64
LENGTH = 22  # frames on the 17k+5 grid: ~0.9 s at 24 fps, 7 video latent frames, 37 audio frames


def _check_latents(path) -> dict[str, torch.Tensor]:
    tensors = load_file(str(path))
    video_shape, audio_shape = h3_latent_shapes(WIDTH, HEIGHT, LENGTH)
    assert tuple(tensors["video"].shape) == video_shape
    assert tuple(tensors["audio"].shape) == audio_shape
    for name, t in tensors.items():
        assert torch.isfinite(t).all(), name
        assert 0.05 < t.float().std().item() < 50.0, name
        assert t.float().flatten(2).std(dim=-1).min() > 0.01, name  # not constant along any channel
    return tensors


def _prompt(variant: str, out_name: str, **kwargs) -> dict:
    return t2va_prompt(f"tiny_h3_{variant}.safetensors", out_name, width=WIDTH, height=HEIGHT, length=LENGTH,
                       text_dim=TINY_DIMS.text_dim, **kwargs)


def test_object_info_lists_stock_h3_and_test_nodes(comfy_server):
    info = comfy_server.object_info()
    missing = [n for n in STOCK_H3_NODES + SAMPLING_NODES + TEST_NODES if n not in info]
    assert not missing, f"not in /object_info: {missing}"
    unets = info["UNETLoader"]["input"]["required"]["unet_name"][0]
    assert {"tiny_h3_bf16.safetensors", "tiny_h3_fp32.safetensors", "tiny_h3_int8.safetensors"} <= set(unets)


@pytest.mark.parametrize("variant", ["bf16", "fp32", "int8"])
def test_stock_h3_prompt_samples_tiny_checkpoint(comfy_server, variant):
    out_name = f"smoke_{variant}.safetensors"
    entry = comfy_server.run(_prompt(variant, out_name), timeout=180)
    saved = entry["outputs"]["save"]["longmedia_latent"][0]
    assert saved["filename"] == out_name and saved["streams"] == ["video", "audio"]
    _check_latents(comfy_server.output_path(out_name))


def test_conditioning_file_feeds_the_guider(comfy_server):
    cond_path = comfy_server.base / "input" / "random_cond.pt"
    tc.save_conditioning(tc.random_conditioning(12, seed=9), cond_path)
    prompt = _prompt("bf16", "from_file.safetensors", positive=["cond", 0])
    prompt["cond"] = {"class_type": "LongMediaTestLoadConditioning", "inputs": {"path": cond_path.name}}
    del prompt["pos"]
    comfy_server.run(prompt, timeout=180)
    from_file = _check_latents(comfy_server.output_path("from_file.safetensors"))

    comfy_server.run(_prompt("bf16", "from_clip.safetensors"), timeout=180)
    from_clip = _check_latents(comfy_server.output_path("from_clip.safetensors"))
    assert not torch.equal(from_file["video"], from_clip["video"])  # the conditioning reached the model


def test_failed_node_is_reported_with_its_error(comfy_server):
    prompt = _prompt("bf16", "never.safetensors", positive=["cond", 0])
    prompt["cond"] = {"class_type": "LongMediaTestLoadConditioning", "inputs": {"path": "no_such_file.pt"}}
    del prompt["pos"]
    with pytest.raises(ComfyHarnessError, match=r"node cond \(LongMediaTestLoadConditioning\) failed.*no_such_file"):
        comfy_server.run(prompt, timeout=60)
    with pytest.raises(ComfyHarnessError, match="HTTP 400"):
        comfy_server.submit({"x": {"class_type": "NoSuchNodeType", "inputs": {}}})
