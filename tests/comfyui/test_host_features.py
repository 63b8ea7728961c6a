"""Host features read on the real trees (0.33.0, the upstream overlay, its bsa-chaining variant): each against the
thing it names, the tool's output, and the Sampler's report carrying it."""

from __future__ import annotations

import importlib
import inspect
import json
import os
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import torch
from harness import tiny_sampler_job

from longmedia.planning.types import PlanRequest

REPO = Path(__file__).resolve().parents[2]


def _has(module: str, name: str) -> bool:
    try:
        return hasattr(importlib.import_module(module), name)
    except ImportError:  # named reason: the module is absent on this tree
        return False


def test_each_feature_matches_this_tree(comfy_inprocess, comfyui_root):
    from longmedia.comfy.host.features import host_features

    found = host_features(comfyui_root)
    import comfy.ldm.minimax.model as h3
    import comfy.model_prefetch as prefetch

    assert found.comfyui_version == importlib.import_module("comfyui_version").__version__
    assert found.malloc_graphs == hasattr(prefetch, "pause_malloc_graph")
    assert found.per_token_rows == hasattr(h3, "_mod_row")
    assert found.pdd_heads == ("sample_sigmas" in inspect.signature(h3.FinalLayer.forward).parameters)
    assert found.block_attention_handoff == ("attention" in inspect.signature(h3.DiTBlock.forward).parameters)
    assert found.bsa_present == _has("comfy_extras.nodes_sparse_attention", "BlockSparseAttention")
    if found.bsa_present:
        bsa = importlib.import_module("comfy_extras.nodes_sparse_attention")
        assert found.bsa_chaining == ("previous" in inspect.signature(bsa.make_h3_block_patch).parameters)
    else:
        assert not found.bsa_chaining
    assert found.model_attention_backend == _has("comfy_extras.nodes_model_advanced", "ModelAttentionBackend")
    assert found.kitchen_version == metadata.version("comfy-kitchen")
    assert found.aimdo_version == metadata.version("comfy-aimdo") and found.aimdo_raising is False  # 0.4.13 / 0.5.5
    import comfy.cli_args

    flags = comfy.cli_args.parser._option_string_actions
    assert found.fast_disk_flag == ("--fast-disk" in flags) and found.fast_disk_flag  # 0.33.0 has it
    assert found.disable_fast_disk_flag == ("--disable-fast-disk" in flags)
    assert found.pin_eviction == _has("comfy.model_management", "free_pins") and found.pin_eviction
    assert found.cgroup_aware_ram == _has("comfy.system_memory", "virtual_memory_available")
    # the trees differ where they should: 0.33.0 has none of upstream's H3 features, the overlays have them all
    upstream = found.malloc_graphs
    assert (found.per_token_rows, found.pdd_heads, found.vsa_gates, found.bsa_present) == (upstream,) * 4


def test_the_tool_prints_it(comfyui_root):
    env = {**os.environ, "PYTHONPATH": ""}
    out = subprocess.run([sys.executable, "-m", "tools.host_features", "--comfyui", str(comfyui_root),
                          "--cpu", "--json"], capture_output=True, text=True, timeout=240, cwd=REPO, env=env)
    assert out.returncode == 0, out.stderr[-2000:]
    data = json.loads(out.stdout)
    assert data["kitchen_version"] == metadata.version("comfy-kitchen")
    assert data["malloc_graphs"] == _has("comfy.model_prefetch", "pause_malloc_graph")
    lines = subprocess.run([sys.executable, "-m", "tools.host_features", "--comfyui", str(comfyui_root),
                            "--cpu"], capture_output=True, text=True, timeout=240, cwd=REPO, env=env).stdout
    assert lines.startswith("generation: ComfyUI ") and "BlockSparseAttention chaining: " in lines


def test_the_sampler_report_carries_it(comfy_inprocess, tiny_checkpoints, comfyui_root):
    import comfy.sd

    from longmedia.comfy.host.features import host_features
    from longmedia.comfy.passes.sampler import run_sampler

    patcher = comfy.sd.load_diffusion_model(str(tiny_checkpoints["fp32"]))
    with torch.inference_mode():
        result = run_sampler(*tiny_sampler_job(patcher, seed=5), PlanRequest(memory_mode="normal"))
    expected = host_features()
    assert result.report.host == expected and expected.comfyui_version is not None
    assert json.loads(result.report.to_json())["host"]["bsa_present"] == expected.bsa_present
