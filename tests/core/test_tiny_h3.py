"""Tiny H3 checkpoint generator and ComfyUI-free conditioning (no ComfyUI needed)."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from dataclasses import replace

import pytest
import torch
from safetensors import safe_open
from safetensors.torch import load_file

from longmedia.h3.dims import H3Dims
from longmedia.testing import conditioning as tc
from longmedia.testing import tiny_h3 as th

D = th.TINY_DIMS


def _expected_shapes(d: H3Dims) -> dict[str, tuple[int, ...]]:
    """The H3 key layout written out independently of the generator's own spec table."""
    h, i, f, ted, pd = d.hidden, d.inner, d.ffn, d.time_embed_dim, d.video_channels * 4
    shapes = {
        "video_patch_proj.weight": (h, pd), "video_patch_proj.bias": (h,),
        "audio_patch_proj.weight": (h, d.audio_channels), "audio_patch_proj.bias": (h,),
        "condition_proj.weight": (h, d.text_dim), "condition_proj.bias": (h,),
        "time_embedder.proj_in.weight": (th.TIME_EMBED_HIDDEN, th.TIMESTEP_INPUT_DIM),
        "time_embedder.proj_in.bias": (th.TIME_EMBED_HIDDEN,),
        "time_embedder.proj_out.weight": (ted, th.TIME_EMBED_HIDDEN), "time_embedder.proj_out.bias": (ted,),
        "rope.inv_freq": (d.rope_inv_freq_len,),
        "token_refiner.final_norm.weight": (h,),
        "final_layer.norm.weight": (h,),
        "final_layer.adaln_proj.linear.weight": (2 * h, ted), "final_layer.adaln_proj.linear.bias": (2 * h,),
        "final_layer.video_out.weight": (pd, h), "final_layer.video_out.bias": (pd,),
        "final_layer.audio_out.weight": (d.audio_channels, h), "final_layer.audio_out.bias": (d.audio_channels,),
    }
    blocks = [f"token_refiner.blocks.{n}" for n in range(d.refiner_blocks)] + [f"blocks.{n}" for n in range(d.num_blocks)]
    for p in blocks:
        shapes.update({
            f"{p}.norm1.weight": (h,), f"{p}.norm2.weight": (h,),
            f"{p}.attn.qkv_proj.weight": (3 * i, h), f"{p}.attn.out_proj.weight": (h, i),
            f"{p}.attn.q_norm.weight": (d.head_dim,), f"{p}.attn.k_norm.weight": (d.head_dim,),
            f"{p}.mlp.fc1.weight": (2 * f, h), f"{p}.mlp.fc2.weight": (h, f),
        })
        if p.startswith("blocks."):
            shapes[f"{p}.adaln_proj.linear.weight"] = (18 * h, ted)
            shapes[f"{p}.adaln_proj.linear.bias"] = (18 * h,)
    return shapes


FP32_ISLANDS = ("video_patch_proj.", "audio_patch_proj.", "time_embedder.", "rope.", "final_layer.video_out.",
                "final_layer.audio_out.")


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    out = tmp_path_factory.mktemp("tiny")
    return {v: th.write_tiny_h3(out, variant=v, seed=0) for v in th.VARIANTS}


def test_tiny_dims_are_small_and_valid():
    th.validate_dims(D)
    assert D.hidden != D.text_dim and D.heads % 2 == 0 and D.rot_dim <= D.head_dim
    assert D.inner == 128 and D.refiner_blocks == 1


@pytest.mark.parametrize("variant", ["bf16", "fp32"])
def test_float_variants_have_the_h3_layout(written, variant):
    path = written[variant]
    assert path.name == f"tiny_h3_{variant}.safetensors" and path.stat().st_size < 8 * 2 ** 20
    sd = load_file(str(path))
    expected = _expected_shapes(D)
    assert {k: tuple(v.shape) for k, v in sd.items()} == expected
    store = torch.bfloat16 if variant == "bf16" else torch.float32
    for key, value in sd.items():
        want = torch.float32 if key.startswith(FP32_ISLANDS) else store
        assert value.dtype == want, key
        assert torch.isfinite(value.float()).all(), key


def test_int8_variant_quantises_the_block_linears(written):
    sd = load_file(str(written["int8"]))
    ref = load_file(str(written["bf16"]))
    quantised = [k for k in ref if th.is_quantised_key(k)]
    assert len(quantised) == 4 * D.num_blocks
    assert all(k.startswith("blocks.") for k in quantised)
    for key in quantised:
        layer = key[: -len(".weight")]
        q, scale = sd[key], sd[f"{layer}.weight_scale"]
        assert q.dtype == torch.int8 and q.shape == ref[key].shape
        assert scale.dtype == torch.float32 and scale.shape == ()
        assert json.loads(bytes(sd[f"{layer}.comfy_quant"].tolist())) == {"format": "int8_tensorwise"}
        assert int(q.abs().max()) == 127  # absmax scaling uses the full range
        err = (q.float() * scale - ref[key].float()).abs().max()
        assert err <= scale * 0.5 + 1e-6  # round-to-nearest
    rest = {k: v for k, v in sd.items() if not k.endswith((".weight_scale", ".comfy_quant")) and k not in quantised}
    assert rest.keys() == {k for k in ref if k not in quantised}
    for key, value in rest.items():
        assert torch.equal(value, ref[key]), key


def test_metadata_carries_comfy_config_and_provenance(written):
    with safe_open(str(written["int8"]), "pt") as f:
        meta = f.metadata()
    config = json.loads(meta["config"])["transformer"]
    assert config == th.comfy_transformer_config(D)
    assert config["hidden_size"] == D.hidden and config["text_dim"] == D.text_dim
    assert json.loads(meta["longmedia_tiny_h3"]) == {"generator": "longmedia.testing.tiny_h3", "variant": "int8",
                                                    "seed": 0, "random_weights": True}


def test_deterministic_from_seed_and_shared_across_variants():
    a = th.tiny_h3_state_dict(variant="fp32", seed=7)
    b = th.tiny_h3_state_dict(variant="fp32", seed=7)
    c = th.tiny_h3_state_dict(variant="fp32", seed=8)
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    assert not torch.equal(a["blocks.0.attn.qkv_proj.weight"], c["blocks.0.attn.qkv_proj.weight"])
    bf16 = th.tiny_h3_state_dict(variant="bf16", seed=7)
    assert torch.equal(bf16["blocks.1.mlp.fc2.weight"], a["blocks.1.mlp.fc2.weight"].to(torch.bfloat16))
    deeper = th.tiny_h3_state_dict(replace(D, num_blocks=4), variant="fp32", seed=7)
    assert torch.equal(deeper["blocks.1.mlp.fc1.weight"], a["blocks.1.mlp.fc1.weight"])


def test_weight_scales_keep_the_forward_tame():
    sd = th.tiny_h3_state_dict(variant="fp32", seed=0)
    qkv = sd["blocks.0.attn.qkv_proj.weight"]
    assert abs(qkv.std().item() * math.sqrt(D.hidden) - 1.0) < 0.05
    adaln = sd["blocks.0.adaln_proj.linear.weight"]
    assert 0 < adaln.std().item() * math.sqrt(D.time_embed_dim) < 1.0
    norm = sd["blocks.0.norm1.weight"]
    assert (norm - 1).abs().max() < 0.6 and (norm - 1).abs().max() > 0
    inv = sd["rope.inv_freq"]
    assert inv[0] == 1.0 and bool((inv[1:] < inv[:-1]).all()) and inv[-1] > 1e-4


def test_path_handling_and_bad_inputs(tmp_path):
    explicit = th.write_tiny_h3(tmp_path / "sub" / "mine.safetensors", variant="fp32")
    assert explicit == tmp_path / "sub" / "mine.safetensors" and explicit.is_file()
    with pytest.raises(th.TinyH3Error, match="variant"):
        th.write_tiny_h3(tmp_path, variant="fp8")
    with pytest.raises(th.TinyH3Error, match="rope_inv_freq_len"):
        th.validate_dims(replace(D, rope_inv_freq_len=8))  # rot_dim 48 > head_dim 32
    with pytest.raises(th.TinyH3Error, match="head_dim"):
        th.validate_dims(replace(D, head_dim=33, rope_inv_freq_len=1))


def test_cli_writes_the_requested_variants(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "longmedia.testing.tiny_h3", str(tmp_path), "--variant", "int8",
                           "--blocks", "3", "--seed", "2"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    files = sorted(p.name for p in tmp_path.iterdir())
    assert files == ["tiny_h3_int8.safetensors"]
    sd = load_file(str(tmp_path / files[0]))
    assert "blocks.2.mlp.fc2.weight" in sd and "blocks.3.mlp.fc2.weight" not in sd


def test_random_conditioning_layout_and_determinism(tmp_path):
    cond = tc.random_conditioning(9, seed=4)
    states, extra = cond[0]
    assert states.shape == (1, 9, D.text_dim) and states.dtype == torch.float32
    assert 0.8 < states.std().item() < 1.2
    assert extra["minimax_token_tags"].dtype == torch.long and bool((extra["minimax_token_tags"] == 1).all())
    assert torch.equal(tc.random_conditioning(9, seed=4)[0][0], states)
    assert not torch.equal(tc.random_conditioning(9, seed=5)[0][0], states)
    back = tc.load_conditioning(tc.save_conditioning(cond, tmp_path / "c.pt"))
    assert torch.equal(back[0][0], states) and back[0][1]["pooled_output"] is None
    with pytest.raises(tc.TinyConditioningError, match="text_len"):
        tc.random_conditioning(0)
    with pytest.raises(tc.TinyConditioningError, match="tags"):
        tc.random_conditioning(3, tags=torch.ones(4, dtype=torch.long))


def test_tiny_text_encoder_dims_validation():
    te = tc.TinyTextEncoderDims.for_dims(replace(D, text_dim=64))
    assert te.hidden == 64 and te.text_config["hidden_size"] == 64
    assert te.vision_config()["out_hidden_size"] == 64
    te.validate()
    with pytest.raises(tc.TinyConditioningError, match="kv_heads"):
        replace(te, heads=3, kv_heads=2).validate()
    with pytest.raises(tc.TinyConditioningError, match="square"):
        replace(te, vision_position_embeddings=60).validate()
