"""bench/cards.py's diagnostics of a LongMedia run (the `longmedia_nan_probe`, `longmedia_owned_weights` and
`longmedia_sync_release` rows), installed for one run and removed after it.

- `nan_probe`: the first executor stage, or chunked final layer, whose packed sequence stops being finite;
- `weight_access`: where each weight the executor holds came from, and two ways to hold it differently;
- `kernel_table`: the CUDA kernels one prompt ran (torch.profiler), to name its attention and matmul kernels.

They patch LongMedia's own classes and `block_patch.comfy_weights` in the bench process only (never ComfyUI).
"""

from __future__ import annotations

import contextlib


@contextlib.contextmanager
def nan_probe():
    """The streamed executor's stages and the chunked final layer checked after each call (a device sync each): the
    first stage whose output, or input, holds NaN or inf is printed to stderr with its call count, then that probe
    goes quiet."""
    import sys

    import torch

    from longmedia.execution import final_layer, streamed_block

    run = streamed_block._Run
    real = {name: getattr(run, name) for name in ("stock_attention", "streamed_attention", "stock_mlp", "streamed_mlp")}
    seen = {"calls": 0, "done": False}

    def checked(name, fn):
        def stage(self):
            if seen["done"]:
                return fn(self)
            seen["calls"] += 1
            before = bool(torch.isfinite(self.x).all())
            out = fn(self)
            after = bool(torch.isfinite(self.x).all())
            if not (before and after):
                seen["done"] = True
                amax = float(self.x.float().abs().nan_to_num(0, 0, 0).max())
                print(f"NAN PROBE: stage {name} call {seen['calls']}: input finite {before}, output finite {after}, "
                      f"finite max |x| {amax:.4g}, rows {self.x.shape[0]}", file=sys.stderr, flush=True)
            return out
        return stage

    real_final = final_layer.chunked_final_forward

    def checked_final(*args, **kwargs):
        forward = real_final(*args, **kwargs)

        def final(x, *rest, **kw):
            seen["final_calls"] = seen.get("final_calls", 0) + 1
            video, audio = forward(x, *rest, **kw)
            if not seen.get("final_done") and not all(bool(torch.isfinite(t).all()) for t in (x, video, audio)):
                seen["final_done"] = True
                print(f"NAN PROBE: final layer call {seen['final_calls']}: input finite "
                      f"{bool(torch.isfinite(x).all())}, video {bool(torch.isfinite(video).all())}, audio "
                      f"{bool(torch.isfinite(audio).all())}", file=sys.stderr, flush=True)
            return video, audio
        return final

    for name, fn in real.items():
        setattr(run, name, checked(name, fn))
    final_layer.chunked_final_forward = checked_final
    try:
        yield
    finally:
        for name, fn in real.items():
            setattr(run, name, fn)
        final_layer.chunked_final_forward = real_final
        print(f"NAN PROBE: {seen['calls']} stage calls checked, non-finite seen: {seen['done']}", file=sys.stderr,
              flush=True)


@contextlib.contextmanager
def weight_access(probe: bool, mode: str):
    """The executor's weight access (`block_patch.comfy_weights`) changed for the run.

    probe: each weight is classified from ComfyUI's cast state as resident (no transfer), vbar (faulted into
    comfy-aimdo's pages) or cast_buffer (the fault failed: the weight sits at the start of an offload stream's
    cast buffer); the run's counts, and how often two held cast-buffer weights shared one stream, go to stderr.
    The classified access orders each weight's stream after compute on release, as the product's does.
    mode "unordered": that ordering left out (the access before the fix: ComfyUI's uncast alone);
    "sync_release": `torch.cuda.synchronize()` before each weight goes back; "owned": copies, the cast
    released at once (`block_patch._owned`).
    """
    import sys

    import torch

    from longmedia.comfy import block_patch

    if mode not in ("", "unordered", "sync_release", "owned"):
        raise ValueError(f"weights must be '', 'unordered', 'sync_release' or 'owned', got {mode!r}")
    real = block_patch.comfy_weights
    counts = {"resident": 0, "vbar": 0, "cast_buffer": 0, "shared_stream": 0}

    def classified():
        import comfy.model_management as mm
        import comfy.ops as ops

        held: list[tuple[str, int | None]] = []

        @contextlib.contextmanager
        def access(module, like):
            ctx = ops.CastBiasWeightContext(module, like, offloadable=True)
            info = ctx.state[2] if len(ctx.state) > 2 else None
            stream = block_patch.offload_stream_of(ctx.state)
            kind = "resident" if stream is None else "vbar" if info[1] is not None else "cast_buffer"
            sid = id(stream) if stream is not None else None
            if kind == "cast_buffer" and any(k == "cast_buffer" and h == sid for k, h in held):
                counts["shared_stream"] += 1
                if counts["shared_stream"] == 1:
                    print(f"WEIGHT PROBE: two held cast-buffer weights on one offload stream ({type(module).__name__} "
                          f"{tuple(module.weight.shape)})", file=sys.stderr, flush=True)
            counts[kind] += 1
            held.append((kind, sid))
            try:
                with ctx as pair:
                    try:
                        yield pair
                    finally:
                        if mode != "unordered":
                            block_patch.order_after_compute(stream, like, mm)
            finally:
                held.pop()
        return access

    def changed():
        access = classified() if probe or mode == "unordered" else real()
        if mode == "owned":
            return block_patch._owned(access)
        if mode != "sync_release":
            return access

        @contextlib.contextmanager
        def synced(module, like):
            with access(module, like) as pair:
                try:
                    yield pair
                finally:
                    if like.is_cuda:
                        torch.cuda.synchronize(like.device)
        return synced

    block_patch.comfy_weights = changed
    try:
        yield
    finally:
        block_patch.comfy_weights = real
        if probe:
            print(f"WEIGHT PROBE: {counts}", file=sys.stderr, flush=True)


@contextlib.contextmanager
def kernel_table(row: dict, top: int = 25):
    """Profile the CUDA kernels run inside the block and write the `top` by device time into `row["kernels"]`:
    [name (first 160 characters), calls, total ms], most time first."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        yield
    events = [e for e in prof.key_averages() if _device_us(e) > 0]
    events.sort(key=_device_us, reverse=True)
    row["kernels"] = [[e.key[:160], int(e.count), round(_device_us(e) / 1e3, 3)] for e in events[:top]]


def _device_us(event) -> float:
    """An averaged event's own device time in microseconds (torch renamed the field from cuda to device)."""
    for name in ("self_device_time_total", "self_cuda_time_total"):
        value = getattr(event, name, None)
        if value is not None:
            return float(value)
    return 0.0
