"""Where a weight handed out by ComfyUI's cast context came from, told to the run's observer while it is held.

`cast_bias_weight(..., offloadable=True)`'s state is (weight, bias, (offload stream, VBAR fault info, ...)): no
stream, the weight needed no transfer (resident); a stream and a fault, it was faulted into comfy-aimdo's pages
(vbar); a stream and no fault, it sits at the start of that stream's cast buffer (cast_buffer).
"""

from __future__ import annotations

import contextlib
from typing import Iterator

from ...execution.probes import Observer


def offload_stream_of(state) -> object | None:
    """The offload stream in a `cast_bias_weight(..., offloadable=True)` result (weight, bias, (stream, ...)),
    None when the weight needed no transfer."""
    info = state[2] if state is not None and len(state) > 2 else None
    return info[0] if isinstance(info, tuple) and info else None


def held_weight_origin(state) -> str:
    """resident, vbar or cast_buffer (module docstring) for a cast context's state."""
    if offload_stream_of(state) is None:
        return "resident"
    info = state[2]
    return "vbar" if len(info) > 1 and info[1] is not None else "cast_buffer"


@contextlib.contextmanager
def reported(observer: Observer, module, state) -> Iterator[None]:
    """`observer` told that `module`'s weight (cast `state`) is held for the `with` block, and when it goes back."""
    stream = offload_stream_of(state)
    origin, key = held_weight_origin(state), (id(stream) if stream is not None else None)
    observer.weight_held(origin, key, module)
    try:
        yield
    finally:
        observer.weight_released(origin, key, module)
