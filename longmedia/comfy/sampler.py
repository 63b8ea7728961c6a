"""The Sampler's ComfyUI side: checks (`pass_plan`) -> residency boundary -> plan -> patched copy of the guider ->
ComfyUI's own sampling -> report.

The residency boundary runs before the plan reads the device, so what an earlier run left behind is
released before free memory is measured (a seed-only rerun plans from the same state). Everything
enters through official seams on copies: the guider is copied with a cloned ModelPatcher and a cloned
`model_options`; streamed blocks go into `patches_replace["dit"]`, our attention override into
`transformer_options`, and a DIFFUSION_MODEL wrapper (per-call measurement, the call's own packed
table, and `prefetch_dynamic_vbars`, which can only be changed there) onto the cloned patcher, innermost.
With memory_mode=normal, attention_mode=existing and no manual chunk sizes nothing that computes is
touched.
"""

from __future__ import annotations

import copy
import dataclasses
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

import torch

from ..execution.guards import guards_for_device
from ..execution.linear import WeightAccess
from ..execution.probes import NO_OBSERVER, Observer, ProbeReport
from ..h3.profiles import DeviceProfile
from ..job.preflight import StagePass, check_plan_runs
from ..planning.around_blocks import stock_pass_bytes
from ..planning.types import ExecutionPlan, PlanRequest
from ..report.memory import Reader
from ..report.oom import PHASES, LongMediaOOM, OOMContext, is_oom, phase, report_for
from ..report.run_report import PredictedPeaks, RunReport, StepRecord
from ..report.segmented import SegmentedReport
from . import inputs
from .host_features import host_features
from .memory_facts import comfy_reading, vbar_release
from .oom_phase import traced_phase
from .pass_plan import check_pass, load_device_profile, plan_pass
from .probes_env import probes_from_env
from .residency import residency_boundary

WRAPPER_KEY = "longmedia"


@dataclass(frozen=True)
class SamplingResult:
    """What the Sampler, Hi-Res and Refiner return: the output and denoised latents and the run's report.

    plan: the pass's plan (None for a segmented job: each pass's plan is in its report);
    sigmas: the schedule a Hi-Res or Refiner pass ran (None for the Sampler)."""

    output: dict
    denoised: dict
    report: RunReport | SegmentedReport
    plan: ExecutionPlan | None = None
    sigmas: torch.Tensor | None = None


TRITON_BACKENDS = ("qstream_triton", "qstream_triton_int8", "sol")


def _refuse_pinning(patcher) -> str:
    """Keep this clone's weights out of page-locked RAM (the plan rejected pinning this model).

    ComfyUI pins offloaded weights through `ModelPatcher.pin_weight_to_device`; there is no per-model
    switch, so the clone (ours alone) gets a no-op in its place. Process-wide limits stay untouched.
    Dynamic VRAM pins through comfy-aimdo host buffers at ops time, which has no per-model refusal.
    """
    if getattr(patcher, "is_dynamic", lambda: False)():
        return ("RAM pinning: the plan rejects pinning this model, but that is not enforceable under dynamic VRAM "
                "(ComfyUI pins through comfy-aimdo host buffers at ops time, within its own pinned budget, with no "
                "per-model switch): reported only")
    if not hasattr(patcher, "pin_weight_to_device"):
        return "RAM pinning: this ComfyUI has no pin_weight_to_device: nothing to refuse"
    patcher.pin_weight_to_device = lambda key: None  # this clone only
    return "RAM pinning refused for this model (on LongMedia's clone of the patcher only)"


class _Run:
    """Mutable bookkeeping of one sampling run (per call, never module level)."""

    def __init__(self, plan: ExecutionPlan, device: torch.device, patcher=None):
        self.plan, self.device = plan, device
        self.notes: list[str] = []
        self.steps: list[StepRecord] = []
        self.boundaries: list[tuple[str, ...]] = []
        self.block_peaks: dict[int, int] = {}
        self.step_peak = 0  # peak of the current model call before the allocator counter was last reset
        self.step_device_used = 0  # most device memory in use seen in the current model call
        self.phase = "before_block_0"
        self.sampler_step = 0  # sampler steps completed (the sampler's callback), i.e. the step now running
        self.warmup_s = 0.0
        self.guards = guards_for_device(plan.guards, device,
                                        release=vbar_release(patcher))

    @property
    def cuda(self) -> bool:
        return self.device.type == "cuda"

    def sample_device_used(self) -> None:
        """Device memory in use now (all of it: torch, comfy-aimdo's VBARs, the CUDA context, other processes)."""
        if self.cuda:
            free, total = torch.cuda.mem_get_info(self.device)
            self.step_device_used = max(self.step_device_used, int(total - free))

    def oom_context(self) -> OOMContext:
        return OOMContext.from_plan(self.plan)


def _attention_factory(plan: ExecutionPlan, row_spans):
    """(transformer_options, heads) -> the AttentionFn of one streamed block call.

    Sol's sinks follow this call's own packed table: the layout ComfyUI publishes for the call (0.38+:
    transformer_options["minimax_h3_layout"]), else transformer_options[ROW_SPANS_KEY] (set per model call by
    the DIFFUSION_MODEL wrapper: the negative prompt's call has its own text length, guides and references);
    the plan's table (the positive prompt's) is the last fallback.
    """
    from .attention_override import ROW_SPANS_KEY, existing_attention_fn, host_layout_row_spans, progress_from_options

    choice = plan.attention.choice
    if choice is None or plan.attention.backend == "existing":
        return existing_attention_fn
    from ..attention.dispatcher import build_attention_fn

    def factory(topts, heads):
        table = host_layout_row_spans(topts)
        if table is None:
            table = topts.get(ROW_SPANS_KEY) or row_spans
        return build_attention_fn(choice, progress=progress_from_options(topts), row_spans=table,
                                  seq_len=table[-1][1] if table else None,
                                  existing=existing_attention_fn(topts, heads))

    return factory


def _needs_call_row_spans(plan: ExecutionPlan) -> bool:
    choice = plan.attention.choice
    return choice is not None and choice.sol is not None and choice.sol.sinks_keys and plan.attention.backend != "existing"


def _install(g, plan: ExecutionPlan, run: _Run, row_spans, observer: Observer = NO_OBSERVER,
             weights: WeightAccess | None = None, seq_lens: tuple[int, ...] = (), ranks=None) -> tuple[int, ...]:
    import comfy.patcher_extension as ext
    from comfy.model_patcher import set_model_options_patch_replace

    from ..execution.final_layer import chunked_final_forward
    from ..planning.around_blocks import FINAL_CHUNK_ROWS
    from .attention_override import ROW_SPANS_KEY
    from .block_patch import (
        chained_previous,
        comfy_interrupt,
        comfy_weights,
        outside_malloc_graph,
        streamed_replacement,
    )

    opts = g.model_options
    opts.setdefault("transformer_options", {})
    if plan.pinning.mode == "none" and plan.memory.streamed_weight_bytes > 0:  # weights stream, pinning rejected
        run.notes.append(_refuse_pinning(g.model_patcher))
    if plan.attention.backend in TRITON_BACKENDS:
        from ..kernels.triton_bootstrap import bootstrap_triton

        fix = bootstrap_triton()  # Windows embedded Python: Triton's compiler finds its headers (this process)
        if fix.applied or fix.plan.problems:
            run.notes.extend(fix.lines)
        if run.cuda:
            warmed = _warm_up(plan, run.device, seq_lens)
            run.warmup_s = warmed.seconds
            run.notes.extend(warmed.lines())
    blocks = g.model_patcher.model.diffusion_model.blocks
    if blocks and getattr(blocks[0].attn, "to_gate_compress", None) is not None:
        run.notes.append("VSA gate (gate_compress checkpoint): left unused, as ComfyUI's dense attention leaves it; "
                         "only BlockSparseAttention's vsa method reads it")
    streamed: tuple[int, ...] = ()
    run.notes.extend(w for w in plan.warnings if "has no effect" in w)  # controls that cannot act, said again
    if ranks is not None:  # sequence parallel: every block sharded over the ranks, stock or streamed per the plan
        from .sp_run import install_sp

        g.model_options = opts
        streamed = install_sp(g, plan, ranks, on_block=_on_block(run), observer=observer, weights=weights)
        opts = g.model_options
        run.notes.append(f"sequence parallel on {ranks.world} ranks ({', '.join(map(str, ranks.devices))}, "
                         f"{ranks.backend}); link measured at {ranks.link_gbps:.2f} GB/s")
    if not plan.chunks.is_stock and ranks is None:
        factory, on_block = _attention_factory(plan, row_spans), _on_block(run)
        installed = dict(opts["transformer_options"].get("patches_replace", {}).get("dit", {}))
        chained = 0
        for i, block in enumerate(blocks):
            phase_for = (lambda i: lambda name: phase(name, context=run.oom_context(), reader=comfy_reading(),
                                                      block_index=i))(i)
            previous = chained_previous(installed.get(("double_block", i)))  # another node's: it runs first
            chained += previous is not None
            fn = streamed_replacement(block, i, plan.chunks, factory, previous=previous, memory_mode=plan.memory_mode,
                                      on_block=on_block, phase=phase_for, weights=weights, observer=observer)
            opts = set_model_options_patch_replace(opts, fn, "dit", "double_block", i)
        if chained:
            run.notes.append(f"{chained} double-block replacement(s) another node installed chained: each runs "
                             "first and its call of the original block runs LongMedia's streamed block")
        streamed = tuple(range(len(blocks)))
    if not plan.chunks.is_stock:
        # the final layer's whole-sequence temporaries would otherwise set the peak of a long pass
        final = g.model_patcher.model.diffusion_model.final_layer
        forward = chunked_final_forward(final, FINAL_CHUNK_ROWS, comfy_interrupt,
                                        weights=weights if weights is not None else comfy_weights(observer),
                                        observer=observer)
        g.model_patcher.add_object_patch("diffusion_model.final_layer.forward", outside_malloc_graph(forward))
    if plan.attention.choice is not None and plan.attention.backend != "existing" and ranks is None:
        from .attention_override import install_attention_override

        install_attention_override(opts["transformer_options"], plan.attention.choice,
                                   row_spans=row_spans)
    g.model_options = opts

    call_row_spans = _needs_call_row_spans(plan)

    def diffusion_model(executor, x, timestep, context, transformer_options, *args, **kwargs):
        if not plan.prefetch:
            transformer_options["prefetch_dynamic_vbars"] = False  # only honoured here: _apply_model resets it
        if call_row_spans:  # this call's own table (cond and uncond differ); transformer_options is per call
            transformer_options[ROW_SPANS_KEY] = inputs.call_row_spans(x, context, kwargs.get("minimax_payload"))
        if run.cuda:
            torch.cuda.reset_peak_memory_stats(run.device)
        start, run.phase, run.step_peak, run.step_device_used = time.perf_counter(), "before_block_0", 0, 0
        out = executor(x, timestep, context, transformer_options, *args, **kwargs)
        peak = max(run.step_peak, torch.cuda.max_memory_allocated(run.device)) if run.cuda else 0
        run.sample_device_used()
        sigma = float(timestep.flatten()[0]) / 1000.0
        run.steps.append(StepRecord(len(run.steps), sigma, time.perf_counter() - start, int(peak),
                                    run.step_device_used, run.sampler_step))
        run.guards.on_step_end(len(run.steps) - 1)
        return out

    # on the cloned patcher, not in model_options: ComfyUI appends a patcher's wrappers after model_options' when
    # sampling starts (sampler_helpers.prepare_model_patcher), and in the clone ours follow every wrapper another node
    # put on the model, so ours runs innermost and sees only the calls that reach the model: a step cache's
    # (EasyCache's) skipped calls return before it, and the report counts them as skipped steps
    g.model_patcher.add_wrapper_with_key(ext.WrappersMP.DIFFUSION_MODEL, WRAPPER_KEY, diffusion_model)
    return streamed


def prompt_seq_lens(guider, latent, plan: ExecutionPlan) -> tuple[int, ...]:
    """Packed rows of the positive and the negative prompt's calls (their text lengths differ, and so may the
    kernels Triton compiles for them); the plan's own length where a prompt's table cannot be read."""
    lengths = {plan.geometry.seq_len}
    video, audio = inputs.av_latents(latent)
    for name in ("positive", "negative"):
        conds = (getattr(guider, "original_conds", {}) or {}).get(name)
        if conds:
            table = inputs.stock_row_spans(video, audio, [[conds[0].get("cross_attn"), conds[0]]])
            lengths.add(int(table[-1][1]))
    return tuple(sorted(lengths))


def _warm_up(plan: ExecutionPlan, device: torch.device, seq_lens: tuple[int, ...]):
    """Compile the plan's Triton attention kernels on its call shapes before the first step (attention/warmup.py)."""
    from ..attention.backends import default_registry
    from ..attention.warmup import Warmup, warm_up

    choice = plan.attention.choice
    done = [warm_up((choice.backend, choice.exact_backend), default_registry(), seq_len=seq,
                    query_chunk=plan.chunks.qkv_chunk_tokens, heads=plan.model.dims.heads,
                    group=plan.chunks.heads_per_group, head_dim=plan.model.dims.head_dim, dtype=torch.bfloat16,
                    device=device, capability=plan.device.compute_capability,
                    free_bytes=int(torch.cuda.mem_get_info(device)[0]))
            for seq in seq_lens]
    if any(w.calls for w in done):  # the warm calls' freed blocks go back before ComfyUI loads the weights
        import comfy.model_management

        comfy.model_management.soft_empty_cache()
    return Warmup(sum(w.seconds for w in done), tuple(c for w in done for c in w.calls),
                  "; ".join(dict.fromkeys(w.note for w in done if w.note)))


def _on_block(run: _Run):
    def hook(index: int, when: str) -> None:
        if when == "start":
            run.phase = "qkv"
            if run.cuda:  # close the stretch before this block, so the counter measures this block alone
                run.step_peak = max(run.step_peak, torch.cuda.max_memory_allocated(run.device))
                torch.cuda.reset_peak_memory_stats(run.device)
            return
        if run.cuda:
            block_peak = torch.cuda.max_memory_allocated(run.device)
            run.step_peak = max(run.step_peak, block_peak)
            run.block_peaks[index] = max(run.block_peaks.get(index, 0), block_peak)
            run.sample_device_used()
        run.guards.on_block_end(index, step=len(run.steps))
        run.phase = "final_output" if index == run.plan.model.dims.num_blocks - 1 else "qkv"

    return hook


def run_sampler(noise, guider, sampler, sigmas, latent, request: PlanRequest,
                device_profile: DeviceProfile | Callable[[], DeviceProfile] | None = None, *,
                memory_reader: Reader | None = None, observer: Observer | None = None,
                weights: WeightAccess | None = None, stage: StagePass | None = None,
                devices: str | None = None) -> SamplingResult:
    """Check every input, run the residency boundary, plan from the memory measured after it, patch a copy of
    `guider`, and sample exactly as SamplerCustomAdvanced does.

    device_profile: a fixed profile (planned once, e.g. a card to plan for), a probe called after the boundary,
    or None to plan from the boundary's own reading of the load device after it ran.
    memory_reader: how the boundary reads device memory (`residency.Reader`, device -> MemorySnapshot); None reads
    torch and comfy-aimdo. Benchmarks and tests hand in their own readings here. observer: diagnostics of the
    streamed phases and held weights (`execution/probes.py`); None: the probes LONGMEDIA_PROBES names, usually none.
    weights: how the streamed phases hold their weights; None: ComfyUI's cast context (`block_patch.comfy_weights`).
    stage: a Hi-Res or Refiner pass (`job.preflight.StagePass`): its refusals name that node's inputs.
    devices: the Sampler's device list for sequence parallelism ("gpu:0,gpu:1"; `sp_devices`); None or empty: one
    device. The workers live for this run (`sp_workers`): started after the residency boundary, ended before it
    returns or raises; the plan is made again once they have measured their link (the cost model reads it)."""
    from .sp_run import sp_request, start_ranks

    check_runs = stage.check_runs if stage is not None else check_plan_runs
    checked = check_pass(guider, latent, sigmas, request, stage=stage)  # every input checked first
    load_device = guider.model_patcher.load_device
    sp_checked, sp_devices = sp_request(checked.request, devices, load_device)
    checked = dataclasses.replace(checked, request=sp_checked)
    row_spans = list(checked.row_spans)
    if isinstance(device_profile, DeviceProfile):  # a card to plan for: planned once, refused before the boundary
        plan = plan_pass(checked, device_profile)
        runs = check_runs(plan)
        required = plan.memory.predicted_peak_bytes + plan.activation_reserve_bytes
    else:  # planned once, after the boundary, from the memory it leaves
        plan, required = None, stock_pass_bytes(checked.profile, checked.geometry)
    # release what an earlier run (or seed) left behind, then plan from the memory measured after it
    boundary = residency_boundary(device=load_device, reader=memory_reader, keep=guider.model_patcher,
                                  memory_required=required)
    if plan is None:
        device = device_profile() if device_profile is not None else load_device_profile(load_device, boundary.after)
        plan = plan_pass(checked, device)
        runs = check_runs(plan)
    ranks, clean = None, False
    if sp_devices:
        ranks = start_ranks(sp_devices, guider.model_patcher, plan)
    try:
        if ranks is not None:  # the link as measured on the ranks' own group: the plan's cost model reads it
            checked = dataclasses.replace(checked, request=dataclasses.replace(
                checked.request, sp_link_gbps=max(ranks.link_gbps, 0.001), sp_link_measured=True))
            plan = plan_pass(checked, plan.device)
        result = _sample(noise, guider, sampler, sigmas, latent, plan, row_spans, boundary, runs, observer, weights,
                         ranks)
        clean = True
    except RuntimeError as error:  # named: a collective failing because a worker died mid-run
        if ranks is not None and ranks.settled_failure(error):
            raise ranks.failure(error) from error
        raise
    finally:
        if ranks is not None:
            ranks.close(clean=clean)
    return result


def _sample(noise, guider, sampler, sigmas, latent, plan, row_spans, boundary, runs, observer, weights, ranks):
    import comfy.model_management
    import comfy.model_patcher
    import comfy.sample
    import comfy.utils

    from .previews import comfy_preview_callback

    g = copy.copy(guider)
    g.model_patcher = guider.model_patcher.clone()
    g.model_options = comfy.model_patcher.create_model_options_clone(guider.model_options)
    run = _Run(plan, torch.device(g.model_patcher.load_device), g.model_patcher)
    run.boundaries.append((f"before: {boundary.before}", *boundary.lines, f"after: {boundary.after}"))
    run.notes.extend(runs)  # a chosen mode that does not fit runs, with its warning
    if observer is None:
        observer = probes_from_env()
    streamed = _install(g, plan, run, row_spans, observer or NO_OBSERVER, weights,
                        prompt_seq_lens(guider, latent, plan) if run.cuda else (), ranks)

    samples = comfy.sample.fix_empty_latent_channels(g.model_patcher, latent["samples"],
                                                     latent.get("downscale_ratio_spacial", None),
                                                     latent.get("downscale_ratio_temporal", None))
    x0_output: dict = {}
    callback = comfy_preview_callback(g.model_patcher, sigmas.shape[-1] - 1, x0_output)

    def counted(step: int, x0, x, total_steps: int):
        run.sampler_step = step + 1  # model calls after this belong to the next step
        return callback(step, x0, x, total_steps)
    try:
        out_samples = g.sample(noise.generate_noise(latent), samples, sampler, sigmas,
                               denoise_mask=latent.get("noise_mask"), callback=counted,
                               disable_pbar=not comfy.utils.PROGRESS_BAR_ENABLED, seed=noise.seed)
    except LongMediaOOM:
        raise
    except RuntimeError as error:  # named: an allocation failure (GPU or CPU) outside the streamed stages
        if not is_oom(error):
            raise
        model = g.model_patcher.model.diffusion_model
        traced = traced_phase(error.__traceback__, model.blocks, model.final_layer)
        where, block = (traced.phase, traced.block_index) if traced else (_oom_phase(run.phase), None)
        raise LongMediaOOM(report_for(where, error, context=run.oom_context(), reader=comfy_reading(),
                                      block_index=block)) from error
    if ranks is not None:
        line = ranks.link_line(plan.model.dims.num_blocks, len(run.steps))
        if line:
            run.notes.append(line)
    out_samples = out_samples.to(comfy.model_management.intermediate_device())
    finite = all_finite(out_samples)
    output, denoised = _outputs(g, latent, out_samples, x0_output)
    report = RunReport(plan=plan, attention_backend=plan.attention.backend, streamed_blocks=streamed,
                       boundaries=tuple(run.boundaries), steps=tuple(run.steps),
                       block_peak_bytes=tuple(run.block_peaks.get(i, 0) for i in sorted(run.block_peaks)),
                       guard_events=run.guards.report().lines, preview=callback.failure.summary
                       if callback.failure else "ok", manual_fields=plan.manual_fields, notes=tuple(run.notes),
                       predicted=PredictedPeaks.of(plan.memory, plan.device.dynamic_vram), output_finite=finite,
                       probes=ProbeReport(observer.lines()) if observer is not None else None,
                       host=host_features(), warmup_s=run.warmup_s, sampler_steps=int(sigmas.shape[-1] - 1))
    if not finite:
        logging.warning("LongMedia: %s", report.output_warning)
    return SamplingResult(output, denoised, report, plan)


def all_finite(samples: torch.Tensor) -> bool:
    """Whether a latent (H3's video+audio NestedTensor, or a plain tensor) holds only finite values."""
    parts = samples.unbind() if getattr(samples, "is_nested", False) else (samples,)
    return all(bool(torch.isfinite(p).all()) for p in parts)


def _oom_phase(current: str) -> str:
    return current if current in PHASES else "before_block_0"


def _outputs(g, latent: dict, samples, x0_output: dict) -> tuple[dict, dict]:
    import comfy.nested_tensor
    import comfy.utils

    out = {k: v for k, v in latent.items() if k not in ("downscale_ratio_spacial", "downscale_ratio_temporal")}
    out["samples"] = samples
    if "x0" not in x0_output:
        return out, out
    x0 = x0_output["x0"]
    if samples.is_nested and not x0.is_nested:
        x0 = comfy.nested_tensor.NestedTensor(comfy.utils.unpack_latents(x0, [x.shape for x in samples.unbind()]))
    denoised = dict(out)
    denoised["samples"] = g.model_patcher.model.process_latent_out(x0.cpu())
    return out, denoised


__all__ = ["SamplingResult", "all_finite", "prompt_seq_lens", "run_sampler"]
