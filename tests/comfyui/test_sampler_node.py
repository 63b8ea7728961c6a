"""The LongMedia Sampler node in a real ComfyUI server: schema, API prompts, bit equality with the stock sampler."""

from __future__ import annotations

import pytest
import torch
from harness import ComfyHarnessError, raise_on_error, t2va_prompt
from safetensors.torch import load_file

from longmedia.planning.types import MANUAL_FIELDS
from longmedia.testing.tiny_h3 import TINY_DIMS

WIDTH, HEIGHT, LENGTH = 128, 96, 39


def _prompt(out_name: str, variant: str = "fp32", **sampler_inputs) -> dict:
    prompt = t2va_prompt(f"tiny_h3_{variant}.safetensors", out_name, width=WIDTH, height=HEIGHT, length=LENGTH,
                         text_dim=TINY_DIMS.text_dim)
    if sampler_inputs:
        inputs = dict(prompt["sample"]["inputs"])
        inputs["latent"] = inputs.pop("latent_image")
        inputs.update(sampler_inputs)
        prompt["sample"] = {"class_type": "LongMediaSampler", "inputs": inputs}
    return prompt


def test_pack_imports_and_schema_has_tooltips(comfy_server):
    assert comfy_server.custom_node_import_error() is None
    info = comfy_server.object_info()["LongMediaSampler"]
    inputs = {**info["input"]["required"], **info["input"].get("optional", {})}
    for name in ("noise", "guider", "sampler", "sigmas", "latent", "memory_mode", "attention_mode", *MANUAL_FIELDS):
        assert name in inputs, name
        assert inputs[name][1].get("tooltip"), f"{name} has no tooltip"
    assert inputs["memory_mode"][1]["default"] == "auto" and inputs["mlp_chunk_tokens"][1]["default"] == -1
    assert info["output_name"][:2] == ["output", "denoised_output"]


@pytest.mark.parametrize("variant", ["fp32", "int8"])
def test_normal_mode_equals_sampler_custom_advanced(comfy_server, variant):
    comfy_server.run(_prompt(f"stock_{variant}.safetensors", variant), timeout=180)
    entry = comfy_server.run(_prompt(f"lm_{variant}.safetensors", variant, memory_mode="normal",
                                     attention_mode="existing"), timeout=180)
    stock = load_file(str(comfy_server.output_path(f"stock_{variant}.safetensors")))
    ours = load_file(str(comfy_server.output_path(f"lm_{variant}.safetensors")))
    for stream in ("video", "audio"):
        assert torch.isfinite(stock[stream]).all() and stock[stream].std() > 0.05
        assert torch.equal(ours[stream], stock[stream]), stream
    report = entry["outputs"]["sample"]["longmedia_report"][0]
    assert report["plan"]["memory_mode"] == "normal" and report["streamed_blocks"] == []


def test_streamed_prompt_matches_stock_within_tolerance(comfy_server):
    comfy_server.run(_prompt("stock_ref.safetensors"), timeout=180)
    entry = comfy_server.run(_prompt("lm_low.safetensors", memory_mode="low_vram", attention_mode="existing",
                                     sol_qkv_chunk_tokens=64, mlp_chunk_tokens=64), timeout=180)
    stock = load_file(str(comfy_server.output_path("stock_ref.safetensors")))
    ours = load_file(str(comfy_server.output_path("lm_low.safetensors")))
    for stream in ("video", "audio"):
        err = ((ours[stream] - stock[stream]).norm() / stock[stream].norm()).item()
        assert err <= 1e-5, (stream, err)
    report = entry["outputs"]["sample"]["longmedia_report"][0]
    assert report["plan"]["memory_mode"] == "low_vram"
    assert set(report["manual_fields"]) == {"sol_qkv_chunk_tokens", "mlp_chunk_tokens"}


def test_out_of_range_control_is_rejected_before_running(comfy_server):
    with pytest.raises(ComfyHarnessError, match="mlp_chunk_tokens"):
        comfy_server.submit(_prompt("never.safetensors", mlp_chunk_tokens=-5))


@pytest.mark.parametrize("name", ["sol_tau_start", "sol_tau_end", "sol_dense_percent"])
def test_a_nan_sol_setting_is_refused_as_a_longmedia_input_error(comfy_server, name):
    """Issue 49's input sweep (tools/input_sweep): NaN passes ComfyUI's own range check (no comparison with NaN is
    true), so the Sol settings refuse it themselves, as LongMedia's input error (titled, named, with its range and
    a fix) rather than a bare ValueError titled by the pack's file path."""
    prompt_id = comfy_server.submit(_prompt(f"nan_{name}.safetensors", memory_mode="auto", attention_mode="auto",
                                            **{name: float("nan")}))
    try:
        with pytest.raises(ComfyHarnessError, match=rf"failed: LongMedia input error: {name}=nan is not allowed: "
                                                    "expected "):
            raise_on_error(comfy_server.wait(prompt_id, timeout=180))
    finally:   # a NaN in the server's history is JSON no browser parses: the frontend's jobs list would fail on it
        comfy_server.request("POST", "/history", {"delete": [prompt_id]})
