"""Rank 0's side of a sequence-parallel Sampler run: the plan made for the ranks, the workers started, and the
copied guider patched through official seams only: every block's `patches_replace` entry (`sp.block`), and an
APPLY_MODEL wrapper that hands each model call's inputs to the workers before rank 0 runs it.
"""

from __future__ import annotations

import dataclasses

from ...execution.linear import WeightAccess
from ...execution.probes import NO_OBSERVER, Observer
from ...planning.types import ExecutionPlan, PlanRequest
from .devices import backend_for, parse_devices
from .ranks import SPRanks

SP_WRAPPER_KEY = "longmedia_sp"
INIT_ENV = "LONGMEDIA_SP_INIT"  # env:// for a multi-host launch (the other ranks started on their hosts)
TIMING_ENV = "LONGMEDIA_SP_TIMING"  # 1: time every all-to-all on rank 0 (a device sync around each; benches)


def sp_request(request: PlanRequest, devices_text: str | None, load_device):
    """(request with sp_degree, devices) for the Sampler's device list; () devices = one device."""
    import os

    devices = parse_devices(devices_text, load_device, remote=bool(os.environ.get(INIT_ENV)))
    if not devices:
        return request, ()
    return dataclasses.replace(request, sp_degree=len(devices)), devices


def start_ranks(devices, patcher, plan: ExecutionPlan) -> SPRanks:
    import os

    from ..patching.block_patch import comfy_interrupt

    init = os.environ.get(INIT_ENV) or None
    ranks = SPRanks(devices, backend_for(devices), init_method=init, timed=os.environ.get(TIMING_ENV) == "1",
                    cancel=comfy_interrupt)  # ComfyUI's Cancel while the workers start ends the start
    try:
        return ranks.start(patcher, plan.chunks, plan.attention.query_chunk_tokens)
    except BaseException:
        ranks.close(clean=False)  # a start cut short (Cancel, a failure): the workers may be mid-load, never messaged
        raise


def install_sp(g, plan: ExecutionPlan, ranks: SPRanks, *, on_block=None, observer: Observer = NO_OBSERVER,
               weights: WeightAccess | None = None) -> tuple[int, ...]:
    """The SP blocks and the call hand-over on the copied guider `g`; returns the blocks it runs."""
    import comfy.model_management as mm
    import comfy.patcher_extension as ext

    from ..patching.attention_override import existing_attention_fn
    from ..patching.block_patch import comfy_interrupt
    from .block import install_sp_blocks

    blocks = g.model_patcher.model.diffusion_model.blocks
    opts = install_sp_blocks(g.model_options, blocks, ranks.group, plan.chunks, existing_attention_fn,
                             mm.processing_interrupted, comfy_interrupt, query_chunk=plan.attention.query_chunk_tokens,
                             weights=weights, on_block=on_block, observer=observer)

    def apply_model(executor, x, t, c_concat=None, c_crossattn=None, control=None, transformer_options=None, **kwargs):
        transformer_options = {} if transformer_options is None else transformer_options
        if control is not None:
            from ...errors import LongMediaInputError

            raise LongMediaInputError("guider", "a ControlNet", "no ControlNet with sequence parallelism",
                                      "Remove the ControlNet, or leave the devices input empty.")
        ranks.call((x, t, c_concat, c_crossattn, None), kwargs, transformer_options)
        return executor(x, t, c_concat, c_crossattn, control, transformer_options, **kwargs)

    ext.add_wrapper_with_key(ext.WrappersMP.APPLY_MODEL, SP_WRAPPER_KEY, apply_model, opts, is_model_options=True)
    g.model_options = opts
    return tuple(range(len(blocks)))
