"""Upstream-generation checkpoints (PDD head bank, VSA gate): the tiny generator writes them and the
checkpoint scan reads their dims right."""

import pytest
import torch

from longmedia.h3.checkpoint_scan import detect_dims, entries_from_state_dict
from longmedia.h3.profiles import ModelProfile
from longmedia.testing.tiny_h3 import TINY_DIMS, TinyH3Error, default_filename, main, tiny_h3_state_dict


@pytest.mark.parametrize("n", [1, 2, 4])
def test_pdd_bank_keeps_channel_dims(n):
    sd = tiny_h3_state_dict(variant="fp32", pdd_heads=n)
    assert sd["final_layer.video_out.weight"].shape == (n * 4 * TINY_DIMS.video_channels, TINY_DIMS.hidden)
    assert sd["final_layer.audio_out.bias"].shape == (n * TINY_DIMS.audio_channels,)
    dims, prefix = detect_dims(*entries_from_state_dict(sd))
    assert prefix == "" and dims == TINY_DIMS
    assert ModelProfile.from_state_dict(sd).dims.video_channels == TINY_DIMS.video_channels


def test_pdd_heads_share_head_zero_and_offsets_are_small():
    plain, bank = tiny_h3_state_dict(variant="fp32"), tiny_h3_state_dict(variant="fp32", pdd_heads=3)
    rows = plain["final_layer.video_out.weight"].shape[0]
    w = bank["final_layer.video_out.weight"]
    assert w[:rows].abs().sum() > 0 and w[rows:].abs().mean() < w[:rows].abs().mean()
    assert not torch.equal(w[rows:2 * rows], w[2 * rows:])


def test_gate_compress_adds_one_gate_per_block():
    sd = tiny_h3_state_dict(variant="bf16", gate_compress=True)
    gates = sorted(k for k in sd if k.endswith("attn.to_gate_compress.weight"))
    assert gates == [f"blocks.{i}.attn.to_gate_compress.weight" for i in range(TINY_DIMS.num_blocks)]
    assert sd[gates[0]].shape == (TINY_DIMS.inner, TINY_DIMS.hidden) and sd[gates[0]].abs().sum() > 0
    assert "token_refiner.blocks.0.attn.to_gate_compress.weight" not in sd
    assert detect_dims(*entries_from_state_dict(sd))[0] == TINY_DIMS


def test_variant_names_and_bad_bank_size(tmp_path):
    assert default_filename("bf16", 4, True) == "tiny_h3_bf16_pdd4_gate.safetensors"
    with pytest.raises(TinyH3Error, match="pdd_heads"):
        tiny_h3_state_dict(pdd_heads=0)
    assert main([str(tmp_path), "--variant", "fp32", "--pdd-heads", "2", "--gate-compress"]) == 0
    assert (tmp_path / "tiny_h3_fp32_pdd2_gate.safetensors").stat().st_size > 0
