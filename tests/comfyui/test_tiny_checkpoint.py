"""ComfyUI's own loaders and model run the tiny H3 checkpoints (in-process, CPU)."""

from __future__ import annotations

import pytest
import torch
from testnodes import tiny_text_encoder as te

from longmedia.testing import conditioning as tc
from longmedia.testing.tiny_h3 import TINY_DIMS, comfy_transformer_config

VARIANTS = ("bf16", "fp32", "int8")
EXPECTED_CONFIG = {"image_model": "minimax_h3", **comfy_transformer_config(TINY_DIMS)}
PROMPT = "a red fox trots through fresh snow, wind howling"


@pytest.fixture(scope="module")
def tiny_clip(comfy_inprocess):
    return te.tiny_text_encoder(TINY_DIMS, seed=0)


@pytest.fixture(scope="module")
def loaded(comfy_inprocess, tiny_checkpoints):
    """variant -> ComfyUI ModelPatcher loaded through comfy.sd.load_diffusion_model (the UNETLoader path)."""
    return {v: comfy_inprocess.sd.load_diffusion_model(str(tiny_checkpoints[v])) for v in VARIANTS}


def _random_av(seed: int, latent_t: int = 2, hw: int = 4, audio_t: int = 8):
    gen = torch.Generator().manual_seed(seed)
    video = torch.randn(1, TINY_DIMS.video_channels, latent_t, hw, hw, generator=gen)
    audio = torch.randn(1, TINY_DIMS.audio_channels, 2, audio_t, generator=gen)
    return video, audio


def _forward(patcher, conditioning, video, audio, sigma: float = 0.6):
    model = patcher.model
    context, extra = conditioning[0]
    payload = {"text_token_tags": extra["minimax_token_tags"]}
    with torch.no_grad():
        return model.diffusion_model([video, audio], torch.tensor([sigma * 1000.0]),
                                     context.to(model.get_dtype_inference()), minimax_payload=payload)


def _rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return ((a.float() - b.float()).norm() / b.float().norm()).item()


@pytest.mark.parametrize("variant", VARIANTS)
def test_loader_detects_tiny_variant_as_minimax_h3(comfy_inprocess, tiny_checkpoints, loaded, variant):
    import comfy.model_detection
    import comfy.utils

    sd, metadata = comfy.utils.load_torch_file(str(tiny_checkpoints[variant]), return_metadata=True)
    # from tensor shapes alone, and with the metadata config ComfyUI also reads
    assert _without_gate(comfy.model_detection.detect_unet_config(sd, "", metadata=None)) == EXPECTED_CONFIG
    assert _without_gate(comfy.model_detection.detect_unet_config(sd, "", metadata=metadata)) == EXPECTED_CONFIG
    model = loaded[variant].model
    assert type(model).__name__ == "MiniMaxH3"
    config = {k: v for k, v in model.model_config.unet_config.items() if k != "dtype"}
    assert _without_gate(config) == EXPECTED_CONFIG
    assert set(model.diffusion_model.state_dict().keys()) == set(sd.keys())  # nothing missing or left over


def _without_gate(config: dict) -> dict:
    """ComfyUI 0.38+ also reports gate_compress (the VSA gate); a plain tiny checkpoint has none."""
    assert config.pop("gate_compress", False) is False
    return config


def test_gate_compress_variant_is_detected_and_loads(comfy_inprocess, tmp_path):
    import comfy.model_detection
    import comfy.utils

    from longmedia.testing.tiny_h3 import write_tiny_h3

    path = write_tiny_h3(tmp_path, variant="fp32", gate_compress=True)
    sd = comfy.utils.load_torch_file(str(path))
    if "gate_compress" not in comfy.model_detection.detect_unet_config(sd, ""):
        pytest.skip("this ComfyUI does not detect gate_compress checkpoints (the VSA gate, ComfyUI 0.38+)")
    assert comfy.model_detection.detect_unet_config(sd, "")["gate_compress"] is True
    patcher = comfy_inprocess.sd.load_diffusion_model(str(path))
    gate = patcher.model.diffusion_model.blocks[0].attn.to_gate_compress
    assert torch.equal(gate.weight.float(), sd["blocks.0.attn.to_gate_compress.weight"].float())
    assert set(patcher.model.diffusion_model.state_dict().keys()) == set(sd.keys())



def test_int8_variant_loads_block_linears_as_quantized_tensors(loaded):
    import comfy.quant_ops

    dm = loaded["int8"].model.diffusion_model
    for block in dm.blocks:
        for linear in (block.attn.qkv_proj, block.attn.out_proj, block.mlp.fc1, block.mlp.fc2):
            assert isinstance(linear.weight, comfy.quant_ops.QuantizedTensor)
            assert linear.weight._layout_cls == "TensorWiseINT8Layout"
            assert linear.weight._qdata.dtype == torch.int8
        assert not isinstance(block.adaln_proj.linear.weight, comfy.quant_ops.QuantizedTensor)
    refiner = dm.token_refiner.blocks[0].attn.qkv_proj.weight
    assert not isinstance(refiner, comfy.quant_ops.QuantizedTensor)


@pytest.mark.filterwarnings("ignore:Mismatch dtype between input and weight")  # stock bf16 RMSNorm on CPU
def test_bf16_variant_keeps_bf16_storage_when_asked(comfy_inprocess, tiny_checkpoints):
    patcher = comfy_inprocess.sd.load_diffusion_model(str(tiny_checkpoints["bf16"]),
                                                      model_options={"dtype": torch.bfloat16})
    dm = patcher.model.diffusion_model
    assert dm.blocks[0].mlp.fc1.weight.dtype == torch.bfloat16
    assert dm.final_layer.video_out.weight.dtype == torch.float32  # the fp32 island stays fp32
    video, audio = _random_av(3)
    cond = tc.random_conditioning(5, seed=3)
    out_v, out_a = _forward(patcher, cond, video, audio)
    assert torch.isfinite(out_v).all() and torch.isfinite(out_a).all()
    assert out_v.float().std() > 0.3


@pytest.mark.parametrize("variant", VARIANTS)
def test_stock_forward_is_finite_and_not_constant(loaded, tiny_clip, variant):
    patcher = loaded[variant]
    video, audio = _random_av(1)
    cond = te.encode_prompt(tiny_clip, PROMPT)
    out_v, out_a = _forward(patcher, cond, video, audio)
    assert out_v.shape == video.shape and out_a.shape == audio.shape
    for out in (out_v, out_a):
        assert torch.isfinite(out).all()
        assert 0.3 < out.float().std().item() < 10.0
        assert out.float().flatten(2).std(dim=-1).min() > 0.05  # varies across positions, per channel
    # the text reaches the streams through attention, the sigma through adaLN
    other_v, other_a = _forward(patcher, te.encode_prompt(tiny_clip, "a quiet empty beach at dawn"), video, audio)
    assert _rel(out_v, other_v) > 0.01 and _rel(out_a, other_a) > 0.01
    later_v, _ = _forward(patcher, cond, video, audio, sigma=0.1)
    assert _rel(out_v, later_v) > 1e-3


def test_int8_forward_tracks_bf16(loaded, tiny_clip):
    video, audio = _random_av(2, latent_t=7, audio_t=37)
    cond = te.encode_prompt(tiny_clip, PROMPT)
    ref_v, ref_a = _forward(loaded["bf16"], cond, video, audio)
    q_v, q_a = _forward(loaded["int8"], cond, video, audio)
    for ref, q in ((ref_v, q_v), (ref_a, q_a)):
        assert 0.0 < _rel(q, ref) < 0.02  # the INT8 path runs (not bit-equal) and stays close (~0.6%)


def test_tiny_text_encoder_conditioning_layout(tiny_clip):
    cond = te.encode_prompt(tiny_clip, PROMPT)
    assert len(cond) == 1
    states, extra = cond[0]
    assert states.ndim == 3 and states.shape[0] == 1 and states.shape[2] == TINY_DIMS.text_dim
    assert torch.isfinite(states).all() and states.std() > 0.1
    tags = extra["minimax_token_tags"]
    assert tags.dtype == torch.long and tags.shape == (states.shape[1],)
    assert bool((tags == tc.TEXT_TAG).all())
    again = te.encode_prompt(te.tiny_text_encoder(TINY_DIMS, seed=0), PROMPT)[0][0]
    assert torch.equal(again, states)
    other_seed = te.encode_prompt(te.tiny_text_encoder(TINY_DIMS, seed=1), PROMPT)[0][0]
    assert _rel(other_seed, states) > 0.1


def test_tiny_text_encoder_tags_keyframe_images_as_video(tiny_clip):
    image = torch.rand(1, 64, 64, 3, generator=torch.Generator().manual_seed(5))
    states, extra = te.encode_prompt(tiny_clip, "a fox", images=[image])[0]
    tags = extra["minimax_token_tags"]
    assert torch.isfinite(states).all()
    assert (tags == tc.VISION_TAG).sum() >= 3  # vision_start, >= 1 merged patch, vision_end
    assert (tags == tc.TEXT_TAG).sum() >= 2


def test_conditioning_file_round_trip(tiny_clip, tmp_path):
    cond = te.encode_prompt(tiny_clip, PROMPT)
    back = tc.load_conditioning(tc.save_conditioning(cond, tmp_path / "cond.pt"))
    assert torch.equal(back[0][0], cond[0][0])
    assert torch.equal(back[0][1]["minimax_token_tags"], cond[0][1]["minimax_token_tags"])
