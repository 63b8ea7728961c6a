"""Fault injection for the card bench's extras, inside the bench process only (never product code).

`inject_oom(phase, diffusion_model)`: a context manager under which the loaded H3 runs out of memory in
`phase`, the way tests/comfyui/test_sampler_failure_reports.py injects it, at points that are reached in
normal mode (stock blocks) and in the streamed modes alike:

- before_block_0: the text token refiner's first MLP Linear (runs before block 0);
- qkv: block 1's norm1 (the modulated norm before the attention; stock and streamed blocks call it);
- attention: the H3 model module's `optimized_attention` for the joint sequence (k longer than
  `min_rows`; the refiner's short text attention passes), what ComfyUI's attention and LongMedia's
  `existing` attention both call (`attention_override.installed_attention`);
- mlp: block 1's norm2;
- final_output: the final layer's norm (stock and LongMedia's chunked final layer call it);
- prefetch_transport: `comfy.model_prefetch.make_prefetch_queue` hands out a queue whose pop runs out of
  memory inside `prefetch_queue_pop` (weight transport before block 0).

Module forwards are replaced on the instance (`module.__dict__["forward"]`) and module globals on their
module; everything is put back on exit. `interrupt_after(calls)`: ComfyUI's Cancel (the interrupt flag
set) at the `calls`-th interrupt check (`throw_exception_if_processing_interrupted`, which ComfyUI's ops
and LongMedia's executor call before every op / chunk) of the code run under it.
"""

from __future__ import annotations

import contextlib

import torch

PHASES = ("before_block_0", "qkv", "attention", "mlp", "final_output", "prefetch_transport")
BLOCK = 1  # the block the block phases fail in (the first one for attention); models have >= 2 blocks


class FaultTargetError(LookupError):
    """The model has no module the injection needs (the row records this)."""


def _oom(*args, **kwargs):
    raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB (injected by bench.cards)")


class _FailingQueue(list):
    """A prefetch queue whose transport runs out of memory (what staging the next block's weights can do)."""

    def pop(self, index=-1):
        _oom()


def _module(model, phase: str):
    try:
        if phase == "before_block_0":
            return model.token_refiner.blocks[0].mlp.fc1
        if phase == "qkv":
            return model.blocks[BLOCK].norm1
        if phase == "mlp":
            return model.blocks[BLOCK].norm2
        if phase == "final_output":
            return model.final_layer.norm
    except (AttributeError, IndexError) as error:  # named: another H3 layout; the row says which
        raise FaultTargetError(f"{phase}: the model has no injection target ({error})") from error
    return None


@contextlib.contextmanager
def _setattr(owner, name: str, value):
    had = name in vars(owner)
    old = vars(owner).get(name)
    setattr(owner, name, value)
    try:
        yield
    finally:
        if had:
            setattr(owner, name, old)
        else:
            delattr(owner, name)


def _joint_attention_fails(real, min_rows: int):
    def attention(q, k, v, heads, *args, **kwargs):
        keys = k.peek() if hasattr(k, "peek") else k
        if keys.shape[-2] > min_rows:  # skip_reshape layout [B, H, S, D]: the DiT's joint sequence
            _oom()
        return real(q, k, v, heads, *args, **kwargs)
    return attention


def inject_oom(phase: str, model, *, min_rows: int = 1024) -> contextlib.AbstractContextManager:
    """A context under which `model` (the H3 diffusion model) runs out of memory in `phase`."""
    if phase not in PHASES:
        raise ValueError(f"inject_oom: phase must be one of {', '.join(PHASES)}, got {phase!r}")
    if phase == "prefetch_transport":
        import comfy.model_prefetch

        return _setattr(comfy.model_prefetch, "make_prefetch_queue", lambda *a, **k: _FailingQueue([None]))
    if phase == "attention":
        import comfy.ldm.minimax.model as h3

        return _setattr(h3, "optimized_attention", _joint_attention_fails(h3.optimized_attention, min_rows))
    return _setattr(_module(model, phase), "forward", _oom)


class InterruptAfter:
    """ComfyUI's Cancel at the `calls`-th interrupt check made under `with` (counts in `seen`, `fired`)."""

    def __init__(self, calls: int):
        self.calls, self.seen, self.fired = int(calls), 0, False

    @contextlib.contextmanager
    def armed(self):
        import comfy.model_management as mm

        real = mm.throw_exception_if_processing_interrupted

        def check():
            self.seen += 1
            if self.seen == self.calls:
                self.fired = True
                mm.interrupt_current_processing(True)
            return real()

        with _setattr(mm, "throw_exception_if_processing_interrupted", check):
            try:
                yield self
            finally:
                mm.interrupt_current_processing(False)  # a flag never consumed must not cancel the next prompt
