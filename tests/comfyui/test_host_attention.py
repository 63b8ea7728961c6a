"""Reading which attention ComfyUI runs (longmedia/comfy/host/attention.py) on the real host, and auto's
decision over it (the decision table on fakes: tests/core/test_host_attention_decision.py)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import types
from pathlib import Path

import pytest
import torch

from longmedia.attention.dispatcher import resolve_attention
from longmedia.comfy.host.attention import host_attention
from longmedia.comfy.patching.attention_override import OVERRIDE_KEY, LongMediaAttentionOverride

REPO = Path(__file__).resolve().parents[2]
H3 = dict(seq_len=100_000, heads=56, head_dim=128, dtype=torch.bfloat16, device_capability=(9, 0))
FLAGGED = (("attention_sage", "use_sage_attention"), ("attention_flash", "use_flash_attention"),
           ("attention_comfy_kitchen_int8", "use_ck_attention"), ("attention_split", "use_split_cross_attention"),
           ("attention_sub_quad", "use_quad_cross_attention"), ("attention_pytorch", "use_pytorch_cross_attention"))


def test_reads_what_this_host_chose(comfy_inprocess):
    """The in-process host runs with --cpu and no attention flag: ComfyUI's own pick, which auto swaps."""
    import comfy.ldm.modules.attention as attention

    found = host_attention()
    assert found.function == attention.optimized_attention.__name__
    assert found.kind in ("sub_quad", "pytorch") and not found.chosen and found.swappable, found
    choice = resolve_attention("auto", **H3, host_attention=found, available={"sdpa_cudnn", "sdpa"})
    assert choice.backend == "sdpa_cudnn" and "its default pick: swapped" in choice.reasons[0]


@pytest.mark.parametrize("function, flag", FLAGGED)
def test_each_flag_names_the_host_function_it_selects(comfy_inprocess, function, flag):
    import comfy.ldm.modules.attention as attention

    fn = getattr(attention, function, None)
    if fn is None:
        pytest.skip(f"this ComfyUI has no {function}")
    found = host_attention(args=types.SimpleNamespace(**{flag: True}), attention=fn)
    assert (found.function, found.source, found.chosen) == (function, "--" + flag.replace("_", "-"), True)
    choice = resolve_attention("auto", **H3, host_attention=found, available={"sdpa_cudnn"}, streamed=True)
    if found.kind == "pytorch":
        assert choice.backend == "sdpa_cudnn" and "PyTorch attention: swapped" in choice.reasons[0]
    else:
        assert choice.backend == "existing" and choice.exact == found.exact, choice.reason
        assert f"keeps {function} (--{flag.replace('_', '-')})" in choice.reason
    unflagged = host_attention(args=types.SimpleNamespace(), attention=fn)
    assert unflagged.swappable == (found.kind in ("pytorch", "sub_quad"))


def test_an_override_on_the_model_is_the_users_choice(comfy_inprocess):
    def patched_attention(func, *args, **kwargs):
        return func(*args, **kwargs)

    options = {"transformer_options": {OVERRIDE_KEY: patched_attention}}
    found = host_attention({}, options)  # the guider's options first, then the patcher's
    assert found.function.endswith("patched_attention") and found.chosen and "override" in found.source
    ours = LongMediaAttentionOverride(choice=None, previous=patched_attention)
    assert host_attention({"transformer_options": {OVERRIDE_KEY: ours}}) == found  # ours is looked through
    bare = host_attention({"transformer_options": {OVERRIDE_KEY: LongMediaAttentionOverride(choice=None)}})
    assert bare == host_attention()


def test_a_host_started_with_split_cross_attention(comfyui_root):
    """A fresh ComfyUI process started with --use-split-cross-attention: detection reads the flag's function,
    and auto keeps it, streamed per query chunk."""
    script = textwrap.dedent("""
        import sys
        sys.argv = ["main.py", "--cpu", "--use-split-cross-attention"]
        import comfy.options
        comfy.options.enable_args_parsing()
        import torch
        from longmedia.attention.dispatcher import resolve_attention
        from longmedia.comfy.host.attention import host_attention
        found = host_attention()
        choice = resolve_attention("auto", seq_len=4096, heads=4, head_dim=64, dtype=torch.float32,
                                   device_capability=None, host_attention=found, streamed=True,
                                   available={"sdpa"})
        print("FOUND", found.function, "|", found.source, "|", found.chosen)
        print("CHOICE", choice.backend, "|", choice.reasons[0])
    """)
    env = {**os.environ, "PYTHONPATH": str(REPO)}  # after the working directory (the checkout), which -c puts first
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300, env=env,
                          cwd=str(comfyui_root))
    assert done.returncode == 0, done.stderr[-3000:]
    lines = dict(line.split(" ", 1) for line in done.stdout.splitlines() if line.startswith(("FOUND", "CHOICE")))
    assert lines["FOUND"] == "attention_split | --use-split-cross-attention | True"
    assert lines["CHOICE"].startswith("existing | auto: keeps attention_split (--use-split-cross-attention)")
    assert "called once per query chunk" in lines["CHOICE"]


def test_the_sampler_plans_with_what_the_host_runs(comfy_inprocess, tiny_checkpoints):
    """plan_for reads the host's attention into the request: on this --cpu host ComfyUI's own pick is swapped,
    and a node's override on the model is kept (stock blocks: nothing of ours installed)."""
    import comfy.samplers
    import comfy.sd
    from comfy_extras import nodes_minimax_h3 as h3n

    from longmedia.comfy.passes.pass_plan import plan_for
    from longmedia.planning.types import PlanRequest
    from longmedia.testing import conditioning as tc
    from longmedia.testing.tiny_h3 import TINY_DIMS

    patcher = comfy.sd.load_diffusion_model(str(tiny_checkpoints["fp32"]))
    guider = comfy.samplers.CFGGuider(patcher)
    guider.set_conds(tc.random_conditioning(11, dims=TINY_DIMS, seed=1), tc.random_conditioning(5, dims=TINY_DIMS,
                                                                                                  seed=2))
    sigmas = comfy.samplers.calculate_sigmas(patcher.get_model_object("model_sampling"), "simple", 2).cpu()
    latent = h3n.EmptyMiniMaxH3LatentAV.execute(128, 96, 39).result[0]
    with torch.inference_mode():
        plan, _ = plan_for(guider, latent, sigmas, PlanRequest(memory_mode="normal"))
    assert plan.attention.backend != "existing"
    assert "its default pick: swapped" in plan.attention.reasons[0], plan.attention.reasons

    def patched_attention(func, *args, **kwargs):
        return func(*args, **kwargs)

    guider.model_options = {**guider.model_options, "transformer_options": {
        **guider.model_options.get("transformer_options", {}), OVERRIDE_KEY: patched_attention}}
    with torch.inference_mode():
        kept, _ = plan_for(guider, latent, sigmas, PlanRequest(memory_mode="normal"))
    assert kept.attention.backend == "existing", kept.attention.reasons
    assert "keeps " in kept.attention.reasons[0] and "patched_attention" in kept.attention.reasons[0]


def _tiny_job(tiny_checkpoints, steps=2):
    import comfy.samplers
    import comfy.sd
    from comfy_extras import nodes_custom_sampler as ncs
    from comfy_extras import nodes_minimax_h3 as h3n

    from longmedia.testing import conditioning as tc
    from longmedia.testing.tiny_h3 import TINY_DIMS

    patcher = comfy.sd.load_diffusion_model(str(tiny_checkpoints["fp32"]))
    guider = comfy.samplers.CFGGuider(patcher)
    guider.set_conds(tc.random_conditioning(11, dims=TINY_DIMS, seed=1), tc.random_conditioning(5, dims=TINY_DIMS,
                                                                                                  seed=2))
    guider.set_cfg(3.0)
    sigmas = comfy.samplers.calculate_sigmas(patcher.get_model_object("model_sampling"), "simple", steps).cpu()
    latent = h3n.EmptyMiniMaxH3LatentAV.execute(128, 96, 39).result[0]
    return patcher, (ncs.Noise_RandomNoise(3), guider, comfy.samplers.sampler_object("euler"), sigmas, latent)


@pytest.mark.parametrize("memory_mode, chunks", [("normal", {}),
                                                 ("low_vram", dict(sol_qkv_chunk_tokens=64, mlp_chunk_tokens=96))])
def test_a_checkpoints_attention_config_is_kept_in_stock_and_streamed_blocks(comfy_inprocess, tiny_checkpoints,
                                                                            memory_mode, chunks):
    """ComfyUI 0.38+: a checkpoint's attention config (ComfyAttention, e.g. comfy_kitchen_int8) selects each
    layer's attention. auto keeps it, and the streamed executor hands it on per query chunk as H3 does."""
    import comfy.ldm.modules.attention as attention

    if not hasattr(attention, "ComfyAttention"):
        pytest.skip("this ComfyUI has no ComfyAttention (a checkpoint's attention config, ComfyUI 0.38+)")
    from longmedia.comfy.passes import sampler as comfy_sampler
    from longmedia.comfy.passes.pass_plan import plan_for
    from longmedia.planning.types import PlanRequest

    calls = []

    @attention.wrap_attn  # as ComfyUI's own functions are: takes H3's tensor containers
    def attention_from_config(q, k, v, heads, **kwargs):  # what a layer's config selects (kitchen's is CUDA-only)
        calls.append((q.shape[-2], k.shape[-2]))
        return attention.attention_pytorch(q, k, v, heads, **kwargs)

    patcher, job = _tiny_job(tiny_checkpoints)
    model = patcher.model.diffusion_model
    assert host_attention(diffusion_model=model).function == attention.optimized_attention.__name__  # no config
    for block in model.blocks:
        block.attn.comfy_attention.function = attention.attention_comfy_kitchen_int8
    found = host_attention(diffusion_model=model)
    assert (found.function, found.chosen, found.exact) == ("attention_comfy_kitchen_int8", True, False)
    with torch.inference_mode():  # kitchen's int8 kernel cannot run on this CPU host: swapped, and said so
        cpu_plan, _ = plan_for(job[1], job[4], job[3], PlanRequest(memory_mode=memory_mode, **chunks))
    assert cpu_plan.attention.backend != "existing"
    assert "cannot run in the planned path (needs a CUDA device): swapped" in cpu_plan.attention.reasons[0]
    for block in model.blocks:
        block.attn.comfy_attention.function = attention_from_config
    result = comfy_sampler.run_sampler(*job, PlanRequest(memory_mode=memory_mode, **chunks))
    reasons = result.plan.attention.reasons
    assert result.plan.attention.backend == "existing", reasons
    assert reasons[0].startswith("auto: keeps attention_from_config (the checkpoint's attention config")
    assert calls, "the checkpoint's attention never ran"
    if memory_mode == "low_vram":  # per query chunk against every key
        assert any(rows < keys for rows, keys in calls) and max(rows for rows, _ in calls) <= 64
    else:
        assert all(rows == keys for rows, keys in calls)


def _backend_node_state(attention_module, backend: str):
    """(a patcher as ComfyUI's ModelAttentionBackend node leaves it, the function it names). The real node where this
    ComfyUI has it (V3 `execute`, or the 0.33 V1 `patch`), else the two calls it makes (get_attention_function, then
    ModelPatcher.set_model_optimized_attention)."""
    import importlib

    import comfy.model_patcher as mp

    if not hasattr(mp.ModelPatcher, "set_model_optimized_attention") or not hasattr(attention_module,
                                                                                     "get_attention_function"):
        pytest.skip("this ComfyUI lacks the feature: ModelPatcher.set_model_optimized_attention "
                    "(what ModelAttentionBackend writes)")
    fn = attention_module.get_attention_function(backend, None)
    patcher = mp.ModelPatcher(torch.nn.Linear(3, 3), torch.device("cpu"), torch.device("cpu"))
    node = getattr(importlib.import_module("comfy_extras.nodes_model_advanced"), "ModelAttentionBackend", None)
    if fn is None:  # comfy-kitchen's INT8 attention is not registered on a CPU: a stand-in of that name, set the same way
        def attention_comfy_kitchen_int8(q, k, v, heads, **kwargs):
            raise AssertionError("only named, never called")

        fn, node = attention_comfy_kitchen_int8, None
    label = {"pytorch": "pytorch attention", "comfy_kitchen_int8": "comfy kitchen attention"}[backend]
    if node is None:
        patched = patcher.clone()
        patched.set_model_optimized_attention(fn)
    elif hasattr(node, "execute"):
        patched = node.execute(patcher, label).result[0]
    else:
        patched = node().patch(patcher, label)[0]
    return patched, fn


@pytest.mark.parametrize("backend", ["pytorch", "comfy_kitchen_int8"])
def test_the_model_attention_backend_nodes_choice_is_read_through(comfy_inprocess, backend):
    import comfy.ldm.modules.attention as attention

    patcher, fn = _backend_node_state(attention, backend)
    found = host_attention(None, patcher.model_options)
    assert found.function == fn.__name__ and found.chosen and "ModelAttentionBackend" in found.source, found
    assert found.kind == ("pytorch" if backend == "pytorch" else "kitchen_int8")
    choice = resolve_attention("auto", **H3, host_attention=found, available={"sdpa_cudnn"}, streamed=True)
    if backend == "pytorch":
        assert choice.backend == "sdpa_cudnn"  # PyTorch attention, named by the node: auto may swap it (exact)
    else:
        assert choice.backend == "existing" and not choice.exact  # the user's quantised pick is kept
    ours = LongMediaAttentionOverride(choice=None, previous=patcher.model_options["transformer_options"][OVERRIDE_KEY])
    assert host_attention({"transformer_options": {OVERRIDE_KEY: ours}}) == found  # ours looked through to it


def test_a_foreign_closure_named_like_the_setters_is_not_mistaken(comfy_inprocess):
    def optimized_attention_override(func, *args, **kwargs):  # same name, another module, no closure
        return func(*args, **kwargs)

    found = host_attention({"transformer_options": {OVERRIDE_KEY: optimized_attention_override}})
    assert "ModelAttentionBackend" not in found.source and found.function.endswith("optimized_attention_override")
