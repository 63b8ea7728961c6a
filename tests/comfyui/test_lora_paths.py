"""A LoRA loaded by ComfyUI's stock LoraLoaderModelOnly reaches every LongMedia path (in-process, tiny checkpoints).

Each LongMedia run is compared with stock SamplerCustomAdvanced on the same LoRA'd patcher (normal + existing: bit
for bit; streamed modes: as test_sampler_inprocess.py states them), and each LoRA'd output is checked to differ
from the un-LoRA'd one by far more than that tolerance, so a path that dropped the patch fails. The LoRA files are
`longmedia.testing.tiny_lora` (every linear of every block and refiner block, random, never zero).
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest
import torch
from harness import SAMPLER_HEIGHT, SAMPLER_LENGTH, SAMPLER_WIDTH, run_longmedia, tiny_sampler_job

from longmedia.planning.types import PlanRequest
from longmedia.testing.tiny_h3 import TINY_DIMS
from longmedia.testing.tiny_lora import TinyLoraSpec, write_tiny_lora

NORMAL = PlanRequest(memory_mode="normal", attention_mode="existing")
LOW = PlanRequest(memory_mode="low_vram", attention_mode="existing", sol_qkv_chunk_tokens=64, mlp_chunk_tokens=96)
ULTRA = PlanRequest(memory_mode="ultra_low_vram", attention_mode="existing", sol_qkv_chunk_tokens=64,
                    sol_out_proj_chunk_tokens=64, mlp_chunk_tokens=64)
MODES = {"normal": NORMAL, "low_vram": LOW, "ultra_low_vram": ULTRA}
# a LoRA'd output sits at least this far (relative L2) from the un-LoRA'd one. Measured (ComfyUI 0.33.0, CPU): the
# second LoRA of a stack 0.067..0.076, one LoRA 0.091..0.101, Hi-Res 0.105, Refiner 0.125. 0.05 is below every one
# and 4x the loosest tolerance against stock (1.25e-2), so a path that dropped the patch cannot pass both checks
LORA_MOVES_AT_LEAST = 0.05


@dataclass(frozen=True)
class LoraFiles:
    """The two tiny LoRAs of this module, by their names in ComfyUI's `loras` folder."""

    first: str
    second: str


@pytest.fixture(scope="module")
def loras(sampler_env, tmp_path_factory):
    import folder_paths

    folder = tmp_path_factory.mktemp("loras")
    files = LoraFiles(write_tiny_lora(folder, spec=TinyLoraSpec(rank=4, seed=100)).name,
                      write_tiny_lora(folder, spec=TinyLoraSpec(rank=2, alpha=1.0, seed=200)).name)
    with pytest.MonkeyPatch.context() as mp:
        _, exts = folder_paths.folder_names_and_paths["loras"]
        mp.setitem(folder_paths.folder_names_and_paths, "loras", ([str(folder)], exts))
        mp.setattr(folder_paths, "filename_list_cache", {})
        yield files


def lora_model(patcher, *stack: tuple[str, float]):
    """`patcher` through stock LoraLoaderModelOnly once per (lora name, strength) of `stack`, in order."""
    import nodes

    for name, strength in stack:
        (patcher,) = nodes.LoraLoaderModelOnly().load_lora_model_only(patcher, name, strength)
    return patcher


def job(patcher, seed: int = 3, size: tuple[int, int, int] = (SAMPLER_WIDTH, SAMPLER_HEIGHT, SAMPLER_LENGTH)):
    width, height, frames = size
    return tiny_sampler_job(patcher, width=width, height=height, frames=frames, seed=seed)


@pytest.fixture(scope="module")
def stock(sampler_env, loras):
    """stock(variant, *stack): SamplerCustomAdvanced's (video, audio) on the `variant` patcher with `stack` applied
    through LoraLoaderModelOnly, computed once per module (several tests compare with the same stock run)."""
    done: dict = {}

    def run(variant: str, *stack: tuple[str, float]):
        if (variant, stack) not in done:
            patcher = lora_model(sampler_env["models"][variant], *stack)
            done[variant, stack] = sampler_env["ncs"].SamplerCustomAdvanced.execute(*job(patcher)).result[0][
                "samples"].unbind()
        return done[variant, stack]

    return run


def ours(env, patcher, request):
    (video, audio), _, result = run_longmedia(env, request, *job(patcher))
    return video, audio, result


def rel(a, b):
    return ((a.float() - b.float()).norm() / b.float().norm()).item()


def assert_matches_stock(variant, mode, result, got, want):
    """test_sampler_inprocess.py's rule: normal and whole-head streamed plans bit for bit; head groups (out-proj as
    partial products over column slices) within a bound. fp32: 1e-6 as there. INT8: each slice's activations are
    quantised with their own per-row scale, which that file bounds at 1e-2 without a LoRA (measured here at seeds
    0..2: 0.0076..0.0081); with the LoRA'd weights re-quantised it is larger: one LoRA 0.0088..0.0096, two stacked
    0.0098..0.0103 (seeds 0..3, ComfyUI 0.33.0 CPU). Bound: that max and a fifth."""
    if mode == "normal" or result.plan.chunks.heads_per_group == 0:
        assert all(torch.equal(g, w) for g, w in zip(got, want)), [rel(g, w) for g, w in zip(got, want)]
    else:
        tol = 1e-6 if variant == "fp32" else 1.25e-2
        assert all(0 < rel(g, w) <= tol for g, w in zip(got, want)), [rel(g, w) for g, w in zip(got, want)]


def assert_lora_moved(got, base):
    assert all(rel(g, b) > LORA_MOVES_AT_LEAST for g, b in zip(got, base)), [rel(g, b) for g, b in zip(got, base)]


@pytest.mark.parametrize("variant", ["fp32", "int8"])
@pytest.mark.parametrize("mode", list(MODES))
@pytest.mark.parametrize("strength", [1.0, -1.0])
def test_one_lora_reaches_every_memory_mode(sampler_env, loras, stock, variant, mode, strength):
    patched = lora_model(sampler_env["models"][variant], (loras.first, strength))
    video, audio, result = ours(sampler_env, patched, MODES[mode])
    if mode != "normal":
        assert result.report.streamed_blocks == tuple(range(TINY_DIMS.num_blocks))
    assert_matches_stock(variant, mode, result, (video, audio), stock(variant, (loras.first, strength)))
    assert_lora_moved((video, audio), stock(variant))


@pytest.mark.parametrize("variant", ["fp32", "int8"])
@pytest.mark.parametrize("mode", ["normal", "ultra_low_vram"])
def test_strength_zero_is_the_model_without_lora(sampler_env, loras, stock, variant, mode):
    video, audio, result = ours(sampler_env, lora_model(sampler_env["models"][variant], (loras.first, 0.0)),
                                MODES[mode])
    assert_matches_stock(variant, mode, result, (video, audio), stock(variant))


@pytest.mark.parametrize("variant", ["fp32", "int8"])
@pytest.mark.parametrize("mode", list(MODES))
def test_two_stacked_loras_reach_every_memory_mode(sampler_env, loras, stock, variant, mode):
    stack = ((loras.first, 1.0), (loras.second, 0.7))
    video, audio, result = ours(sampler_env, lora_model(sampler_env["models"][variant], *stack), MODES[mode])
    assert_matches_stock(variant, mode, result, (video, audio), stock(variant, *stack))
    assert_lora_moved((video, audio), stock(variant, stack[0]))     # the second LoRA counts too


# --- Hi-Res, Refiner, segmented ------------------------------------------------------------------------------------

STAGE_SIZE = (64, 64, 22)     # test_stage_nodes.py's size: 7 latent frames x 4 rows, 37 audio latent frames


def nested(video, audio):
    import comfy.nested_tensor

    return comfy.nested_tensor.NestedTensor((video, audio))


def stock_masked(env, guider, sigmas, latent, seed):
    """SamplerCustomAdvanced with a nested noise mask, video 1 and audio 0 (test_stage_nodes.py's reference)."""
    video, audio = latent["samples"].unbind()
    mask = nested(torch.ones((1, 1) + tuple(video.shape[2:])), torch.zeros((1, 1) + tuple(audio.shape[2:])))
    return env["ncs"].SamplerCustomAdvanced.execute(env["ncs"].Noise_RandomNoise(seed), guider,
                                                    env["samplers"].sampler_object("euler"), sigmas,
                                                    {**latent, "noise_mask": mask}).result[0]["samples"].unbind()


def first_pass(env, patcher):
    """A normal LongMedia pass at STAGE_SIZE (= stock bit for bit, above): the guider and its output latent."""
    from longmedia.comfy.passes import stages

    noise, guider, sampler, sigmas, latent = job(patcher, seed=11, size=STAGE_SIZE)
    return guider, stages.run_sampler(noise, guider, sampler, sigmas, latent, NORMAL).output


def stage_sigmas(env, patcher, steps):
    return env["samplers"].calculate_sigmas(patcher.get_model_object("model_sampling"), "simple", steps).cpu()


@pytest.mark.parametrize("mode", ["normal", "low_vram"])
def test_hires_with_lora_equals_resample_plus_masked_stock_sampling(sampler_env, loras, mode):
    from longmedia.comfy.passes import stages
    from longmedia.h3.latent_resample import resample_video

    def hires(patcher):
        guider, first = first_pass(sampler_env, patcher)
        result = stages.run_hires(sampler_env["ncs"].Noise_RandomNoise(12), guider,
                                  sampler_env["samplers"].sampler_object("euler"), stage_sigmas(sampler_env, patcher, 4),
                                  first, MODES[mode], scale=1.5, denoise=0.5)
        return guider, first, result

    patched = lora_model(sampler_env["models"]["fp32"], (loras.first, 1.0))
    guider, first, result = hires(patched)
    video, audio = first["samples"].unbind()
    want = stock_masked(sampler_env, guider, stage_sigmas(sampler_env, patched, 4)[-3:],
                        {"samples": nested(resample_video(video, (6, 6), "bicubic"), audio)}, 12)
    got = result.output["samples"].unbind()
    assert_matches_stock("fp32", mode, result, got[:1], want[:1])
    assert torch.equal(got[1], audio)
    assert_lora_moved(got[:1], hires(sampler_env["models"]["fp32"])[2].output["samples"].unbind()[:1])


@pytest.mark.parametrize("mode", ["normal", "ultra_low_vram"])
def test_refiner_with_lora_equals_masked_stock_sampling(sampler_env, loras, mode):
    from longmedia.comfy.passes import stages

    def refine(patcher):
        guider, first = first_pass(sampler_env, patcher)
        result = stages.run_refiner(sampler_env["ncs"].Noise_RandomNoise(18), guider,
                                    sampler_env["samplers"].sampler_object("euler"), first, MODES[mode], steps=2,
                                    denoise=0.3)
        return guider, first, result

    patched = lora_model(sampler_env["models"]["fp32"], (loras.first, 1.0), (loras.second, -0.5))
    guider, first, result = refine(patched)
    schedule = sampler_env["ncs"].BasicScheduler.execute(patched, "simple", 2, 0.3).result[0]
    want = stock_masked(sampler_env, guider, schedule, first, 18)
    got = result.output["samples"].unbind()
    assert_matches_stock("fp32", mode, result, got[:1], want[:1])
    assert torch.equal(got[1], first["samples"].unbind()[1])
    assert_lora_moved(got[:1], refine(sampler_env["models"]["fp32"])[2].output["samples"].unbind()[:1])


def test_segmented_job_with_lora_streamed_equals_normal(sampler_env, loras):
    """Two passes (39 frames, then 34 new behind 22 of context): the LoRA'd job streamed (low_vram, whole heads)
    equals it in normal mode (= stock, above) bit for bit, and differs from the job without the LoRA."""
    from longmedia.comfy.passes import segmented
    from longmedia.segments.timeline import plan_segments

    plan = plan_segments(total_frames=73, segment_seconds=39 / 24, context_frames=22)
    assert len(plan.segments) == 2

    def run(patcher, request):
        noise, guider, sampler, sigmas, latent = job(patcher, seed=5, size=(64, 64, plan.pixel_frames))
        result = segmented.run_segmented(noise, guider, sampler, sigmas, latent, request, plan)
        return result, result.output["samples"].unbind()

    patched = lora_model(sampler_env["models"]["fp32"], (loras.first, 1.0))
    _, normal = run(patched, NORMAL)
    result, low = run(patched, LOW)
    assert all(s.run.streamed_blocks == tuple(range(TINY_DIMS.num_blocks)) for s in result.report.segments)
    assert all(s.run.plan.chunks.heads_per_group == 0 for s in result.report.segments)
    assert all(torch.equal(a, b) for a, b in zip(low, normal))
    assert_lora_moved(normal, run(sampler_env["models"]["fp32"], NORMAL)[1])


@pytest.mark.parametrize("mode", ["low_vram", "ultra_low_vram"])
def test_int8_lora_through_lowvram_weight_functions(sampler_env, loras, mode):
    """ComfyUI's partial (lowvram) load, forced on the CPU: the LoRA is not baked into the weights but applied at
    every cast by a `LowVramPatch` in each Linear's `weight_function`, as on a GPU short of VRAM. Stock's INT8
    Linear then dequantises and runs a float matmul (no INT8 path with a weight_function); so does the streamed
    cast: whole heads bit for bit, head groups at fp32 rounding (measured 5.6e-7..5.9e-7)."""
    import comfy.model_management as mm
    import comfy.model_patcher

    real_load = mm.LoadedModel.model_load

    def one_byte_budget(self, lowvram_model_memory=0, force_patch_weights=False):
        return real_load(self, 1, force_patch_weights)

    patched = lora_model(sampler_env["models"]["int8"], (loras.first, 1.0))
    mm.unload_all_models()
    try:
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(mm.LoadedModel, "model_load", one_byte_budget)
            want = sampler_env["ncs"].SamplerCustomAdvanced.execute(*job(patched)).result[0]["samples"].unbind()
            functions = patched.model.diffusion_model.blocks[0].attn.qkv_proj.weight_function
            assert any(isinstance(f, comfy.model_patcher.LowVramPatch) for f in functions)
            video, audio, result = ours(sampler_env, patched, MODES[mode])
    finally:
        mm.unload_all_models()
    got = (video, audio)
    if result.plan.chunks.heads_per_group == 0:
        assert all(torch.equal(g, w) for g, w in zip(got, want)), [rel(g, w) for g, w in zip(got, want)]
    else:
        assert all(0 < rel(g, w) <= 1e-6 for g, w in zip(got, want)), [rel(g, w) for g, w in zip(got, want)]
    assert_lora_moved(got, sampler_env["ncs"].SamplerCustomAdvanced.execute(
        *job(sampler_env["models"]["int8"])).result[0]["samples"].unbind())


def test_the_samplers_plan_counts_the_loras_on_the_model(sampler_env, loras, tmp_path):
    """The Sampler's plan reads the LoRA tensors ComfyUI holds on the patcher (each once): their bytes are in the
    pass's host-RAM need, and one block's share is held on the card it plans on; a model without LoRA plans none."""
    import folder_paths

    from longmedia.h3.safetensors_header import read_header

    patcher = lora_model(sampler_env["models"]["fp32"], (loras.first, 1.0), (loras.second, 0.5))
    files = [folder_paths.get_full_path("loras", name) for name in (loras.first, loras.second)]
    on_disk = sum(t.nbytes for f in files for t in read_header(f).tensors)
    result = sampler_env["core"].run_sampler(*job(patcher), NORMAL)
    bare = sampler_env["core"].run_sampler(*job(sampler_env["models"]["fp32"]), NORMAL)
    hr, hr_bare = result.plan.host_ram, bare.plan.host_ram
    mapped = hr.patch_bytes
    assert 0 < mapped <= on_disk and mapped >= 0.9 * on_disk, (mapped, on_disk)   # every mapped LoRA tensor, once
    assert hr_bare.patch_bytes == 0
    assert hr.need_bytes - hr_bare.need_bytes == mapped
    assert any("LoRA tensors" in line for line in hr.lines())


def test_the_streamed_cast_asks_for_int8_weights_as_stocks_int8_layers_do(sampler_env):
    """Under Dynamic VRAM a LoRA applied at cast time comes back dequantized unless the cast asks for requantizing
    (`want_requant`), as ComfyUI's INT8 Linear and `linear_input_act` ask. The CPU has no comfy-aimdo VBAR, so the
    requantized weight itself is checked on the GPU (tests/gpu/test_int8_lora_dynamic_vram.py); here: the streamed
    cast's keywords for a real INT8 layer of this ComfyUI, and none for a plain one."""
    import comfy.ops as ops

    from longmedia.comfy.patching.block_patch import cast_options, requantized_type

    quantized = requantized_type(ops)
    assert quantized is not None
    like = torch.randn(3, 8, dtype=torch.bfloat16)
    int8 = sampler_env["models"]["int8"].model.diffusion_model.blocks[0].attn.qkv_proj
    plain = sampler_env["models"]["fp32"].model.diffusion_model.blocks[0].attn.qkv_proj
    assert cast_options(int8, like, quantized) == {"compute_dtype": torch.bfloat16, "want_requant": True}
    assert cast_options(plain, like, quantized) == {}
    assert cast_options(int8, like, None) == {}


def test_a_lora_reaches_every_sequence_parallel_rank(sampler_env, loras):
    """Two CPU ranks (gloo): each worker takes the patcher's weight patches (`sp.ranks.worker_start`), so the ranks'
    output with a LoRA equals the single process with it (fp32 1e-5, the sequence-parallel tests' bound) and sits
    far from the output without it. A worker that dropped the patches would fail the first check."""
    from longmedia.comfy.passes import sampler as core

    request = PlanRequest(memory_mode="low_vram", attention_mode="existing", sol_qkv_chunk_tokens=64,
                          mlp_chunk_tokens=64)
    patched = lora_model(sampler_env["models"]["fp32"], (loras.first, 1.0))

    def sample(patcher, devices=None):
        inputs = tiny_sampler_job(patcher, width=64, height=64, frames=22)
        return core.run_sampler(*inputs, request, devices=devices).output["samples"].unbind()

    one, ranks = sample(patched), sample(patched, "cpu,cpu")
    assert all(rel(r, o) <= 1e-5 for r, o in zip(ranks, one)), [rel(r, o) for r, o in zip(ranks, one)]
    assert_lora_moved(ranks, sample(sampler_env["models"]["fp32"]))
