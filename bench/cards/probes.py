"""The card bench's diagnostics and controls of a LongMedia run (the `longmedia_nan_probe`, `longmedia_owned_weights`,
`longmedia_sync_release` and `longmedia_unordered` rows), composed from the product's own seams: nothing of the
product is patched.

- `diagnostics(nan_probe, weights)`: the observer and the weight access one run hands `run_sampler` (`observer=`,
  `weights=`). The NaN probe is the product's `FiniteProbe` with its `WeightOriginProbe` (LONGMEDIA_PROBES=nan,weights
  in a user's ComfyUI), their findings printed to stderr as they happen and their closing lines at the end;
- `weight_access(mode, observer)`: how the executor holds its weights, from product-public pieces;
- `kernel_table`: the CUDA kernels one prompt ran (torch.profiler), to name its attention and matmul kernels.
"""

from __future__ import annotations

import contextlib
import sys
from typing import Iterator

from longmedia.execution.linear import WeightAccess
from longmedia.execution.probes import NO_OBSERVER, Observer, Observers, probes_named

WEIGHT_MODES = ("", "unordered", "sync_release", "owned")


def _stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


@contextlib.contextmanager
def diagnostics(nan_probe: bool, weights: str) -> Iterator[tuple[Observers | None, WeightAccess]]:
    """(observer, weight access) for one run. `nan_probe`: the product's NaN and weight-origin probes (their
    findings to stderr when made, every closing line on exit); `weights`: `weight_access`'s mode."""
    if weights not in WEIGHT_MODES:
        raise ValueError(f"weights must be '', 'unordered', 'sync_release' or 'owned', got {weights!r}")
    said: list[str] = []

    def say(line: str) -> None:
        said.append(line)
        _stderr(line)

    observer = probes_named(("nan", "weights"), say=say) if nan_probe else None
    try:
        yield observer, weight_access(weights, observer or NO_OBSERVER)
    finally:
        for line in observer.lines() if observer is not None else ():
            if line not in said:
                _stderr(line)


def weight_access(mode: str, observer: Observer = NO_OBSERVER) -> WeightAccess:
    """The executor's weight access for a control run (`observer` told where each held weight came from).

    "": the product's (`block_patch.comfy_weights`: each weight's offload stream ordered after compute on
    release); "unordered": ComfyUI's cast context alone, as before that fix; "sync_release": the product's, with
    `torch.cuda.synchronize()` before each weight goes back; "owned": copies, the cast released at once
    (`block_patch.owned`)."""
    from longmedia.comfy.patching import block_patch

    if mode not in WEIGHT_MODES:
        raise ValueError(f"weights must be '', 'unordered', 'sync_release' or 'owned', got {mode!r}")
    if mode == "unordered":
        return _unordered(observer)
    product = block_patch.comfy_weights(observer)
    if mode == "owned":
        return block_patch.owned(product)
    return _synced(product) if mode == "sync_release" else product


def _unordered(observer: Observer) -> WeightAccess:
    import comfy.ops as ops

    from longmedia.comfy.patching.weight_origin import reported

    @contextlib.contextmanager
    def access(module, like):
        ctx = ops.CastBiasWeightContext(module, like, offloadable=True)
        with reported(observer, module, ctx.state), ctx as pair:
            yield pair
    return access


def _synced(access: WeightAccess) -> WeightAccess:
    import torch

    @contextlib.contextmanager
    def synced(module, like):
        with access(module, like) as pair:
            try:
                yield pair
            finally:
                if like.is_cuda:
                    torch.cuda.synchronize(like.device)
    return synced


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
