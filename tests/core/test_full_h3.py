"""The streamed full-width checkpoint writer: same file content as tiny_h3 on the CPU, sizes at full width."""

from __future__ import annotations

import json

import pytest
import torch
from safetensors import safe_open
from safetensors.torch import load_file

from longmedia.testing import full_h3 as fh
from longmedia.testing import tiny_h3 as th

TINY = {"timestep_input_dim": th.TIMESTEP_INPUT_DIM, "time_embed_hidden": th.TIME_EMBED_HIDDEN}


@pytest.mark.parametrize("variant", ["bf16", "int8", "fp32"])
def test_streamed_writer_on_cpu_equals_tiny_h3(tmp_path, variant):
    dims = th.TINY_DIMS
    ours = fh.write_full_h3(tmp_path / "ours.safetensors", variant=variant, dims=dims, seed=7, device="cpu", **TINY)
    ref = th.write_tiny_h3(tmp_path / "ref.safetensors", variant=variant, dims=dims, seed=7)
    a, b = load_file(str(ours)), load_file(str(ref))
    assert a.keys() == b.keys() and len(a) > 20
    for key in b:
        assert a[key].dtype == b[key].dtype and torch.equal(a[key], b[key]), key
    if variant == "int8":
        assert a["blocks.1.mlp.fc2.weight"].dtype == torch.int8 and a["blocks.1.mlp.fc2.weight_scale"].shape == ()
    with safe_open(str(ours), "pt") as f, safe_open(str(ref), "pt") as g:
        assert f.metadata()["config"] == g.metadata()["config"]
        assert json.loads(f.metadata()["longmedia_tiny_h3"])["generator"] == "longmedia.testing.full_h3"


def test_an_existing_identical_file_is_kept_and_another_seed_rewrites(tmp_path):
    path = fh.write_full_h3(tmp_path, variant="int8", dims=th.TINY_DIMS, device="cpu", **TINY)
    stamp = path.stat().st_mtime_ns
    assert fh.write_full_h3(tmp_path, variant="int8", dims=th.TINY_DIMS, device="cpu", **TINY).stat().st_mtime_ns == stamp
    before = load_file(str(path))["blocks.0.attn.qkv_proj.weight"]
    fh.write_full_h3(tmp_path, variant="int8", dims=th.TINY_DIMS, device="cpu", seed=1, **TINY)
    assert not torch.equal(load_file(str(path))["blocks.0.attn.qkv_proj.weight"], before)


def test_full_width_layout_and_sizes():
    dims = fh.full_dims(50)
    int8, bf16 = fh.entries(dims, "int8"), fh.entries(dims, "bf16")
    shapes = {e.key: e.shape for e in bf16}
    assert shapes["blocks.49.attn.qkv_proj.weight"] == (3 * 7168, 5376)
    assert shapes["blocks.0.mlp.fc1.weight"] == (2 * 14336, 5376)
    assert shapes["condition_proj.weight"] == (5376, 5120)
    assert shapes["time_embedder.proj_in.weight"] == (5376, 256)
    gib = 2 ** 30
    assert 60 * gib < sum(e.nbytes for e in bf16) < 66 * gib
    assert 40 * gib < sum(e.nbytes for e in int8) < 45 * gib
    header = fh.header_bytes(int8, {"config": "{}"})
    assert len(header) % 8 == 0 and int.from_bytes(header[:8], "little") == len(header) - 8


def test_bad_block_count_names_the_input():
    with pytest.raises(th.TinyH3Error, match="blocks"):
        fh.full_dims(0)
