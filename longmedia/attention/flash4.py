"""flash-attn-4 (PyPI `flash-attn-4`, CuTe DSL) as a declared exact backend: `flash4`.

`flash_attn.cute.flash_attn_func(q, k, v, softmax_scale=, causal=False)` takes q/k/v as [B, S, H, D] (the last dim
contiguous), bf16 or fp16, head_dim 64 / 96 / 128, on compute capability 9.x (Hopper: its SM90 path), 10.x and
11.x (Blackwell), and returns the output [B, S, H, D] (with the log-sum-exp in newer releases: a tuple). It
allocates its output and nothing else at num_splits=1 without grad, so it declares no workspace. Its first call
per process compiles (about 2.5 s on the H200, 1.9 s on an H100). The Sampler's kernel warm-up (warmup.py) makes that
call at the planned shapes before step 1, so step 1 runs at the steady speed also when the speed timing's results come from
disk (before, the first model call paid 4.2-4.6 s at full depth on an H100; docs/lab/2026-12-05-speed-goals.md).

Measured on the H200 at H3's shape (bf16, 56 x 128, non-causal, 104,466 rows): 480 ms against cuDNN's 575 ms and
FlashAttention-2's 889 ms, rel-L2 3.1e-3 against cuDNN (issue 29). The package is optional: without it auto orders
cuDNN, FlashAttention-2 and our Triton kernel by the speed timing as before. `flash_attn.cute` is imported inside the
factory only (it pulls nvidia-cutlass-dsl): this floor imports without it, and its availability check only looks it up.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from types import ModuleType

import torch

from .protocol import AttentionFn
from .registry import BackendSpec, BackendUnavailableError, BuildContext

PACKAGE = "flash-attn-4"
MODULE = "flash_attn.cute"
REQUIRES = f"{PACKAGE} (pip install {PACKAGE}; needs nvidia-cutlass-dsl, quack-kernels, apache-tvm-ffi, " \
           "torch-c-dlpack-ext)"
HEAD_DIMS = (64, 96, 128)
HALF = frozenset({torch.float16, torch.bfloat16})


def find_module() -> bool:
    """Whether `flash_attn.cute` can be found (without importing it: that would load the CuTe DSL)."""
    try:
        return importlib.util.find_spec(MODULE) is not None
    except (ImportError, ValueError):  # no `flash_attn` parent at all, or a broken one: not installed
        return False


def import_module() -> ModuleType:
    import flash_attn.cute as cute  # the CuTe DSL and its CUDA libraries load here, on first use
    return cute


def flash4_availability(find: Callable[[], bool] = find_module) -> Callable[[], tuple[bool, str]]:
    """(installed?, why); `find` is the fact read (injectable for tests)."""
    def check() -> tuple[bool, str]:
        if not find():
            return False, f"{PACKAGE} is not installed (optional, Hopper and newer: {REQUIRES})"
        return True, f"{PACKAGE} ({MODULE}.flash_attn_func)"
    return check


def _flash4_factory(module: Callable[[], ModuleType] = import_module) -> Callable[[BuildContext], AttentionFn]:
    def factory(context: BuildContext) -> AttentionFn:
        try:
            cute = module()
        # ImportError: a dependency is missing; OSError/RuntimeError: its CUDA libraries do not load here
        except (ImportError, OSError, RuntimeError) as err:
            raise BackendUnavailableError(f"{PACKAGE} is not importable ({type(err).__name__}: {err})") from err
        attention = getattr(cute, "flash_attn_func", None)
        if not callable(attention):
            raise BackendUnavailableError(f"{PACKAGE}'s {MODULE} has no flash_attn_func")
        scale = context.sm_scale

        def flash4(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, q_offset: int = 0) -> torch.Tensor:
            del q_offset  # exact attention does not depend on where the chunk sits
            b, h, rows, d = q.shape
            # [B, H, S, D] views of H3's [B, S, H, D] buffers: transposing back is free, the last dim stays contiguous
            out = attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), softmax_scale=scale,
                            causal=False)
            if isinstance(out, tuple):  # (out, lse) in newer releases
                out = out[0]
            return out.reshape(b, rows, h * d)
        return flash4
    return factory


def flash4_spec(*, find: Callable[[], bool] = find_module,
                module: Callable[[], ModuleType] = import_module) -> BackendSpec:
    """The declaration (find / module: the package lookup and import, injectable for tests)."""
    return BackendSpec(name="flash4", exact=True, dtypes=HALF, head_dims=HEAD_DIMS, min_capability=(9, 0),
                       max_capability=(11, 9), speed_rank=0, factory=_flash4_factory(module),
                       availability=flash4_availability(find), requires=REQUIRES,
                       description="flash-attn-4 (CuTe DSL) flash_attn_func: exact, Hopper and Blackwell (SM90-SM11x), "
                                   "any query rows against all keys; optional package")
