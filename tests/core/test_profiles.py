"""Model and device profiles: presets, detection from modules, state dicts and safetensors headers."""

import json
import struct

import pytest
import torch

from longmedia.errors import LongMediaInputError
from longmedia.h3.dims import H3_FULL
from longmedia.h3.profiles import PRESETS, DeviceProfile, ModelProfile, h3_preset_entries, pinned_ram_budget
from longmedia.testing.tiny_h3 import TINY_DIMS, tensor_specs, tiny_h3_state_dict, write_tiny_h3
from longmedia.units import GIB


def _full_h3_params(d=H3_FULL) -> int:
    """Parameters of full-size H3, counted module by module from ComfyUI's MiniMaxH3Model layout."""
    h, i, f, t, hd = d.hidden, d.inner, d.ffn, d.time_embed_dim, d.head_dim
    attn_mlp = 2 * h + 2 * hd + h * 3 * i + i * h + h * 2 * f + f * h
    embed = (96 * h + h) + (32 * h + h) + (d.text_dim * h + h) + (256 * h + h) + (h * t + t) + d.rope_inv_freq_len
    refiner = d.refiner_blocks * attn_mlp + h
    blocks = d.num_blocks * (attn_mlp + t * 18 * h + 18 * h)
    final = h + (t * 2 * h + 2 * h) + (h * 96 + 96) + (h * 32 + 32)
    return embed + refiner + blocks + final


def test_presets_count_full_size_h3():
    expected = _full_h3_params()
    assert 32e9 < expected < 34e9                    # "~32 B params"
    for name in PRESETS:
        p = ModelProfile.preset(name)
        assert p.dims == H3_FULL and p.param_count == expected and p.source == "preset"
        assert p.blocks_weight_bytes == H3_FULL.num_blocks * p.block_weight_bytes
    bf16, int8, fp4 = (ModelProfile.preset(n) for n in ("h3-bf16", "h3-int8", "h3-nvfp4"))
    assert (bf16.quantization, int8.quantization, fp4.quantization) == ("bf16", "int8", "nvfp4")
    block = H3_FULL.block_params
    assert abs(bf16.block_weight_bytes - 2 * block) < 0.001 * block
    assert abs(int8.block_weight_bytes - block) < 0.001 * block          # 1 byte + a scalar scale per Linear
    assert abs(fp4.block_weight_bytes - 0.5625 * block) < 0.001 * block  # 4 bits + an fp8 scale per 16
    assert 30 * GIB < int8.weight_bytes < 32 * GIB


def test_preset_name_is_validated():
    with pytest.raises(LongMediaInputError, match="h3-int8"):
        ModelProfile.preset("h3-int4")


@pytest.mark.parametrize("variant, quant", [("bf16", "bf16"), ("fp32", "fp32"), ("int8", "int8")])
def test_state_dict_detection_matches_the_tiny_checkpoint(variant, quant):
    sd = tiny_h3_state_dict(TINY_DIMS, variant=variant)
    p = ModelProfile.from_state_dict(sd)
    assert p.dims == TINY_DIMS and p.quantization == quant
    assert p.param_count == sum(s.numel for s in tensor_specs(TINY_DIMS))   # scales and comfy_quant excluded
    assert p.weight_bytes == sum(t.untyped_storage().nbytes() for t in sd.values())
    if variant == "int8":
        assert dict(p.layer_formats)["int8"] == 4 * TINY_DIMS.num_blocks


def test_prefixed_state_dict_and_metadata_config():
    sd = {f"model.diffusion_model.{k}": v for k, v in tiny_h3_state_dict(TINY_DIMS).items()}
    assert ModelProfile.from_state_dict(sd).dims == TINY_DIMS


def test_safetensors_header_alone(tmp_path):
    path = write_tiny_h3(tmp_path, variant="int8")
    p = ModelProfile.from_safetensors(str(path))
    q = ModelProfile.from_state_dict(tiny_h3_state_dict(TINY_DIMS, variant="int8"))
    assert (p.dims, p.param_count, p.weight_bytes, p.quantization) == (q.dims, q.param_count, q.weight_bytes, "int8")
    assert p.source == "safetensors header"


def _write_header_only(path, entries, metadata=None):
    """A safetensors file whose data section is zeros: only the header matters to the profile."""
    header, offset = {}, 0
    for e in entries:
        header[e.name] = {"dtype": e.dtype, "shape": list(e.shape), "data_offsets": [offset, offset + e.nbytes]}
        offset += e.nbytes
    if metadata:
        header["__metadata__"] = metadata
    raw = json.dumps(header).encode()
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(raw)) + raw)
        f.truncate(8 + len(raw) + offset)    # sparse: the tensors are never read


@pytest.mark.parametrize("fmt", ["nvfp4", "int8", "bf16"])
def test_full_size_header_detects_dims_through_packed_weights(tmp_path, fmt):
    path = tmp_path / f"h3_{fmt}.safetensors"
    entries = h3_preset_entries(H3_FULL, fmt)
    _write_header_only(path, entries, {"_quantization_metadata": json.dumps({"layers": {}})})
    p = ModelProfile.from_safetensors(str(path))
    assert p.dims == H3_FULL and p.quantization == fmt
    assert p.weight_bytes == ModelProfile.preset(f"h3-{fmt}").weight_bytes


def test_quantization_metadata_names_the_format(tmp_path):
    sd = tiny_h3_state_dict(TINY_DIMS, variant="bf16")
    from longmedia.h3.checkpoint_scan import entries_from_state_dict
    entries, _ = entries_from_state_dict(sd)
    layers = {f"blocks.{i}.mlp.fc1": {"format": "float8_e4m3fn"} for i in range(TINY_DIMS.num_blocks)}
    path = tmp_path / "meta.safetensors"
    _write_header_only(path, entries, {"_quantization_metadata": json.dumps({"layers": layers})})
    p = ModelProfile.from_safetensors(str(path))
    assert dict(p.layer_formats)["fp8"] == TINY_DIMS.num_blocks


def test_module_profile_counts_shared_storage_once():
    sd = tiny_h3_state_dict(TINY_DIMS, variant="bf16")
    root = torch.nn.Module()
    for key, value in sd.items():
        *path, leaf = key.split(".")
        mod = root
        for part in path:
            if not hasattr(mod, part):
                mod.add_module(part, torch.nn.Module())
            mod = getattr(mod, part)
        mod.register_parameter(leaf, torch.nn.Parameter(value, requires_grad=False))
    p = ModelProfile.from_module(root)
    assert p.dims == TINY_DIMS and p.weight_bytes == sum(v.untyped_storage().nbytes() for v in sd.values())
    # tie block 1's fc2 to block 0's: one storage, counted once
    shared = root.blocks._modules["0"].mlp.fc2.weight
    root.blocks._modules["1"].mlp.fc2.weight = shared
    tied = ModelProfile.from_module(root)
    assert tied.weight_bytes == p.weight_bytes - shared.untyped_storage().nbytes()


def test_module_profile_reads_comfy_kitchen_int8_weights():
    int8 = pytest.importorskip("comfy_kitchen.tensor.int8")
    from comfy_kitchen.tensor.base import QuantizedTensor

    lin = torch.nn.Linear(64, 32, bias=False)
    w = torch.randn(32, 64, generator=torch.Generator().manual_seed(0))
    lin.weight = torch.nn.Parameter(QuantizedTensor.from_float(w, "TensorWiseINT8Layout"), requires_grad=False)
    lin.quant_format = "int8_tensorwise"
    from longmedia.h3.checkpoint_scan import entries_from_module
    entries, formats = entries_from_module(lin)
    assert formats == {"": "int8"}
    stored = [e for e in entries if e.name == "weight"]
    assert stored[0].dtype == "I8" and stored[0].nbytes == 32 * 64
    assert int8 is not None


def test_not_an_h3_checkpoint_is_an_input_error(tmp_path):
    with pytest.raises(LongMediaInputError, match="MiniMax H3"):
        ModelProfile.from_state_dict({"foo.weight": torch.zeros(2, 2)})
    bad = tmp_path / "bad.safetensors"
    bad.write_bytes(b"\x05\x00\x00\x00\x00\x00\x00\x00{nope")
    with pytest.raises(LongMediaInputError, match="valid JSON"):
        ModelProfile.from_safetensors(str(bad))
    with pytest.raises(LongMediaInputError, match="path"):
        ModelProfile.from_safetensors(str(tmp_path / "missing.safetensors"))


def test_card_presets():
    d = DeviceProfile.card(16, 64)
    assert d.vram_total_bytes == 16 * GIB and d.vram_free_bytes == d.vram_total_bytes - GIB // 2
    assert d.dynamic_vram and d.os_name == "linux" and d.ram_total_bytes == 64 * GIB
    assert d.pinned_budget_bytes == 48 * GIB                 # max(40%, min(90%, RAM-4, RAM-16 without swap))
    w = DeviceProfile.card(12, 32, os_name="windows", dynamic_vram=False)
    assert w.pinned_budget_bytes == int(0.4 * 32 * GIB) and not w.dynamic_vram
    assert w.vram_free_bytes < DeviceProfile.card(12, 32).vram_free_bytes
    with pytest.raises(LongMediaInputError, match="vram_gb"):
        DeviceProfile.card(0.5)


def test_pinned_budget_rules():
    assert pinned_ram_budget(16 * GIB, "linux") == int(0.4 * 16 * GIB)
    assert pinned_ram_budget(256 * GIB, "linux") == int(0.9 * 256 * GIB)     # 90% < RAM-4 and RAM-16
    assert pinned_ram_budget(64 * GIB, "linux") == 48 * GIB                  # RAM-16 without swap
    assert pinned_ram_budget(64 * GIB, "linux", swap_bytes=32 * GIB) == int(0.9 * 64 * GIB)


def test_detect_reads_this_machine():
    d = DeviceProfile.detect()
    assert d.ram_total_bytes > 0 and 0 < d.ram_available_bytes <= d.ram_total_bytes
    if not torch.cuda.is_available():
        assert d.vram_total_bytes == 0 and d.compute_capability is None and not d.dynamic_vram
