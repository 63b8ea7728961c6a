"""What LongMedia installs on its copy of the guider (a cloned ModelPatcher, cloned `model_options`) for one run,
and the run's mutable state the installed hooks fill in (`RunState`).

Everything enters through official seams on the copies: streamed blocks go into `patches_replace["dit"]`, our
attention override into `transformer_options`, the chunked final layer as an object patch, and a DIFFUSION_MODEL
wrapper (per-call measurement, the call's own packed table, and `prefetch_dynamic_vbars`, which can only be changed
there) onto the cloned patcher, innermost. Triton backends and flash-attn-4 are compiled on the plan's call shapes
before the first step. With memory_mode=normal, attention_mode=existing and no manual chunk sizes nothing that
computes is touched.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import torch

from ...attention.warmup import TRITON_BACKENDS, Warmup, warm_up
from ...execution.guards import guards_for_device
from ...execution.linear import WeightAccess
from ...execution.probes import NO_OBSERVER, Observer
from ...planning.types import ExecutionPlan
from ...report.oom import OOMContext, phase
from ...report.run_report import StepRecord
from ..host.memory import comfy_reading, vbar_release
from ..passes import sampler_inputs

WRAPPER_KEY = "longmedia"


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


class RunState:
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
    from ...attention.choice import build_attention_fn

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


def install_on_clone(g, plan: ExecutionPlan, run: RunState, row_spans, observer: Observer = NO_OBSERVER,
                     weights: WeightAccess | None = None, seq_lens: tuple[int, ...] = (),
                     ranks=None, block_start: Callable[[int], None] | None = None) -> tuple[int, ...]:
    """Install `plan` on the guider copy `g` (its cloned ModelPatcher and cloned model_options), recording notes,
    warm-up time and, through the hooks, peaks and steps in `run`; returns the indices of the streamed blocks.

    seq_lens: the prompts' packed lengths to compile Triton kernels for (`sampler.prompt_seq_lens`; empty off CUDA);
    ranks: the sequence-parallel workers (`sp.run.start_ranks`), or None for one device;
    block_start: told the index of each block as it starts, where weights stream from disk (`host_ram.HostRamGuard`):
    streamed blocks tell it through their block hook, stock blocks through a replacement that runs them unchanged."""
    import comfy.patcher_extension as ext
    from comfy.model_patcher import set_model_options_patch_replace

    from ...execution.final_layer import chunked_final_forward
    from ...planning.around_blocks import FINAL_CHUNK_ROWS
    from .attention_override import ROW_SPANS_KEY
    from .block_patch import (
        block_start_replacement,
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
    choice = plan.attention.choice
    used = () if choice is None or plan.attention.backend == "existing" else (choice.backend, choice.exact_backend)
    if TRITON_BACKENDS.intersection(used):
        from ...kernels.triton_bootstrap import bootstrap_triton

        fix = bootstrap_triton()  # Windows embedded Python: Triton's compiler finds its headers (this process)
        if fix.applied or fix.plan.problems:
            run.notes.extend(fix.lines)
    if run.cuda and used:  # warm_up picks the backends that compile on first use
        warmed = _warm_up(plan, used, run.device, seq_lens)
        run.warmup_s = warmed.seconds
        run.notes.extend(warmed.lines())
    blocks = g.model_patcher.model.diffusion_model.blocks
    if blocks and getattr(blocks[0].attn, "to_gate_compress", None) is not None:
        run.notes.append("VSA gate (gate_compress checkpoint): left unused, as ComfyUI's dense attention leaves it; "
                         "only BlockSparseAttention's vsa method reads it")
    streamed: tuple[int, ...] = ()
    run.notes.extend(w for w in plan.warnings if "has no effect" in w)  # controls that cannot act, said again
    if ranks is not None:  # sequence parallel: every block sharded over the ranks, stock or streamed per the plan
        from ..sp.run import install_sp

        g.model_options = opts
        streamed = install_sp(g, plan, ranks, on_block=_on_block(run), observer=observer, weights=weights)
        opts = g.model_options
        run.notes.append(f"sequence parallel on {ranks.world} ranks ({', '.join(map(str, ranks.devices))}, "
                         f"{ranks.backend}); link measured at {ranks.link_gbps:.2f} GB/s")
    if not plan.chunks.is_stock and ranks is None:
        factory, on_block = _attention_factory(plan, row_spans), _on_block(run, block_start)
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
    elif block_start is not None and ranks is None:  # stock blocks: told when each starts, run unchanged
        installed = dict(opts["transformer_options"].get("patches_replace", {}).get("dit", {}))
        for i in range(len(blocks)):
            fn = block_start_replacement(i, block_start, previous=chained_previous(installed.get(("double_block", i))))
            opts = set_model_options_patch_replace(opts, fn, "dit", "double_block", i)
        run.notes.append("weights stream from disk: each stock block tells the host-RAM guard when it starts (it "
                         "watches RAM available and reads the next blocks' weights ahead where asked; values "
                         "unchanged)")
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
            transformer_options[ROW_SPANS_KEY] = sampler_inputs.call_row_spans(x, context, kwargs.get("minimax_payload"))
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


def _warm_up(plan: ExecutionPlan, names: tuple[str, ...], device: torch.device, seq_lens: tuple[int, ...]):
    """Compile the plan's attention kernels `names` on its call shapes before the first step (attention/warmup.py)."""
    from ...attention.backends import default_registry

    done = [warm_up(names, default_registry(), seq_len=seq,
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


def _on_block(run: RunState, block_start: Callable[[int], None] | None = None):
    def hook(index: int, when: str) -> None:
        if when == "start":
            if block_start is not None:
                block_start(index)
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


__all__ = ["RunState", "install_on_clone"]
