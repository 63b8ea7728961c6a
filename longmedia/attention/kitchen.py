"""comfy-kitchen's attention kernels as declared backends: `kitchen_int8`, `kitchen_sol`, `kitchen_sol_chunked`.

comfy-kitchen (>= 0.2.36) ships `int8_attention` (SageAttention-style INT8 Q/K/V and P, [B, H, S, D]),
`sol_attn` (Sol-Attn: a tau threshold or SLA top-k over 64-token blocks, [B, T, H, 128], q/k/v of one
shape) and `sol_attn_chunked` (a QKV producer: it takes the block's fused qkv projection chunks, RoPE
and q/k-norm weights and writes INT8 carriers, so it replaces the projections, not an attention call).
The signatures read here are the same in 0.2.36 and 0.2.40.

comfy_kitchen is imported inside availability checks and factories only: this floor imports without it. An
availability check answers (False, why) without the package, on an older one, without CUDA, or when kitchen says
its compiled kernel cannot run on this GPU.
"""

from __future__ import annotations

import importlib.util
import math
from collections.abc import Callable
from types import ModuleType

import torch

from .protocol import AttentionFn, merge_heads
from .registry import BackendSpec, BackendUnavailableError, BuildContext

PACKAGE = "comfy-kitchen"
MIN_VERSION = (0, 2, 36)
REQUIRES = f"{PACKAGE} >= {'.'.join(map(str, MIN_VERSION))}"
SOL_BLOCK = 64
SOL_HEAD_DIM = 128
HALF = frozenset({torch.float16, torch.bfloat16})
FLOATS = frozenset({torch.float16, torch.bfloat16, torch.float32})
PRODUCER_REASON = (
    "sol_attn_chunked is a QKV producer: it takes the block's fused qkv projection chunks, RoPE and q/k-norm "
    "weights and writes INT8 carriers itself, so it replaces the block's projections, not one attention call; "
    "LongMedia's executor hands finished q/k/v to an attention function and cannot run it (ComfyUI's "
    "BlockSparseAttention node runs it on stock blocks, which LongMedia composes with)")


def parse_version(text: str) -> tuple[int, ...]:
    """'0.2.40' -> (0, 2, 40); a pre-release or local tail ('0.3.0rc1', '0.2.40.dev1+cu128') ends the numbers."""
    numbers = []
    for part in text.split("+")[0].split("."):
        digits = part[:len(part) - len(part.lstrip("0123456789"))]
        if digits:
            numbers.append(int(digits))
        if not digits or digits != part:
            break
    return tuple(numbers)


def installed_version() -> tuple[int, ...] | None:
    """comfy-kitchen's version from its distribution metadata, else its module's __version__; None = absent."""
    if importlib.util.find_spec("comfy_kitchen") is None:
        return None
    from importlib.metadata import PackageNotFoundError, version
    try:
        return parse_version(version(PACKAGE))
    except PackageNotFoundError:  # importable without metadata (a bare copy on sys.path)
        import comfy_kitchen
        text = getattr(comfy_kitchen, "__version__", None)
        return parse_version(text) if text else None


def import_kitchen() -> ModuleType:
    import comfy_kitchen
    return comfy_kitchen


def kitchen_availability(entry: str, available: str | None, *,
                  version: Callable[[], tuple[int, ...] | None] = installed_version,
                  cuda: Callable[[], bool] = torch.cuda.is_available,
                  module: Callable[[], ModuleType] = import_kitchen) -> Callable[[], tuple[bool, str]]:
    """(usable?, why) for kitchen's `entry`; `available` names kitchen's own can-it-run check. The keyword
    arguments are the facts read (injectable for tests)."""
    def check() -> tuple[bool, str]:
        have = version()
        if have is None:
            return False, f"{PACKAGE} is not installed (needs {REQUIRES})"
        shown = ".".join(map(str, have))
        if have < MIN_VERSION:
            return False, f"{PACKAGE} {shown} is older than {REQUIRES}: it has no {entry}"
        if not cuda():
            return False, f"{PACKAGE} {shown}: {entry}'s kernels need a CUDA device, torch sees none"
        try:
            ck = module()
        # ImportError: a broken install; OSError/RuntimeError: its CUDA library does not load here
        except (ImportError, OSError, RuntimeError) as err:
            return False, f"{PACKAGE} {shown} is not importable ({type(err).__name__}: {err})"
        if not callable(getattr(ck, entry, None)):
            return False, f"{PACKAGE} {shown} has no {entry}"
        check = getattr(ck, available, None) if available else None
        if check is not None and not check():
            return False, f"{PACKAGE} {shown}: {available}() is False (compiled kernel missing or GPU too old)"
        return True, f"{PACKAGE} {shown} {entry}"
    return check


def _kitchen_fn(entry: str) -> Callable:
    try:
        ck = import_kitchen()
    except (ImportError, OSError, RuntimeError) as err:  # as in the availability check
        raise BackendUnavailableError(f"{PACKAGE} is not importable: {err}") from err
    fn = getattr(ck, entry, None)
    if not callable(fn):
        raise BackendUnavailableError(f"{PACKAGE} has no {entry} (needs {REQUIRES})")
    return fn


def sink_blocks(ranges: tuple[tuple[int, int], ...], seq_len: int) -> list[int]:
    """Token ranges [start, stop) -> kitchen's one [first, end) range of 64-token blocks: the hull of all
    ranges, rounded outwards (kitchen takes a single range; covering more keeps more exact, never less)."""
    ranges = tuple((a, min(b, seq_len)) for a, b in ranges if min(b, seq_len) > a)
    if not ranges:
        return [0, 0]
    start, stop = min(a for a, _ in ranges), max(b for _, b in ranges)
    return [start // SOL_BLOCK, math.ceil(stop / SOL_BLOCK)]


def _int8_factory(context: BuildContext) -> AttentionFn:
    attention = _kitchen_fn("int8_attention")

    def kitchen_int8(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, q_offset: int = 0) -> torch.Tensor:
        del q_offset  # dense attention: position-free
        return merge_heads(attention(q, k, v, scale=context.sm_scale))
    return kitchen_int8


def _staged(x: torch.Tensor) -> torch.Tensor:
    """kitchen's fused sol_attn reads the last dim contiguously, 16-byte aligned, leading strides % 8 == 0."""
    aligned = x.stride(-1) == 1 and x.data_ptr() % 16 == 0 and all(
        x.shape[d] <= 1 or x.stride(d) % 8 == 0 for d in range(x.dim() - 1))
    return x if aligned else x.contiguous()


def _sol_factory(context: BuildContext) -> AttentionFn:
    if context.tau is None and not context.topk_ratio:
        raise BackendUnavailableError("kitchen_sol needs a tau (BuildContext(tau=...)) or a topk_ratio > 0")
    attention = _kitchen_fn("sol_attn")
    tau = 1.0 if context.tau is None else float(context.tau)

    def kitchen_sol(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, q_offset: int = 0) -> torch.Tensor:
        b, h, rows, d = q.shape
        seq = k.shape[2]
        if rows != seq or q_offset != 0:
            raise BackendUnavailableError(
                f"kitchen_sol takes whole-sequence calls only (q rows = keys, q_offset 0): got {rows} query rows "
                f"at offset {q_offset} against {seq} keys")
        out = attention(*(_staged(t.transpose(1, 2)) for t in (q, k, v)), tau=tau, scale=context.sm_scale,
                        sink_blocks=sink_blocks(context.sink_ranges, seq),
                        sink_q=sink_blocks(context.exact_query_ranges, seq), topk_ratio=float(context.topk_ratio))
        return out.reshape(b, rows, h * d)  # [B, T, H, D] contiguous -> heads merged, free
    return kitchen_sol


def _producer_factory(context: BuildContext) -> AttentionFn:
    raise BackendUnavailableError(f"kitchen_sol_chunked: {PRODUCER_REASON}")


def _producer_availability() -> tuple[bool, str]:
    return False, f"declared, not runnable here: {PRODUCER_REASON}"


def _kernel_head_dim(head_dim: int) -> int:
    return 64 if head_dim <= 64 else 128 if head_dim <= 128 else 256


def int8_workspace(*, seq_len: int, heads: int, head_dim: int, dtype_bytes: int, query_rows: int) -> int:
    """int8_attention's allocations per call (comfy_kitchen/sage_attention.py): INT8 copies of q, k and v
    at the kernel's head size (64 / 128 / 256), their fp32 scales (q per 32 rows, k per 64 keys, v per
    channel), and a padded output where the head size is padded."""
    kd = _kernel_head_dim(head_dim)
    padded_k = math.ceil(seq_len / 128) * 128
    copies = heads * (query_rows + seq_len + padded_k) * kd
    scales = 4 * heads * (math.ceil(query_rows / 32) + math.ceil(seq_len / 64) + kd)
    padded_out = heads * query_rows * kd * dtype_bytes if kd != head_dim else 0
    return int(copies + scales + padded_out)


def sol_workspace(*, seq_len: int, heads: int, head_dim: int, dtype_bytes: int, query_rows: int) -> int:
    """sol_attn's workspace (sized by its compiled sol_attn_plan, not readable from Python): INT8 q/k/v
    carriers (3 bytes per element) plus block statistics and scratch, modelled as 4 bytes per element. At
    106,496 tokens x 56 heads x 128 that is 2.84 GiB, plus the 1.42 GiB output 4.26 GiB, against the 4.2 GiB
    extra measured on the H200 (issue 15); bench/attention.py prints measured against this model."""
    del dtype_bytes, query_rows  # whole-sequence calls: the keys set the size
    return int(4 * heads * seq_len * head_dim)


def kitchen_backends() -> tuple[BackendSpec, ...]:
    """Declarations of comfy-kitchen's attention kernels (approximate; none is picked as an exact backend)."""
    return (
        BackendSpec(name="kitchen_sol", exact=False, dtypes=HALF, head_dims=(SOL_HEAD_DIM,), min_capability=(8, 0),
                    workspace=sol_workspace, speed_rank=1, takes_tau=True, call_shape="whole_sequence",
                    factory=_sol_factory, availability=kitchen_availability("sol_attn", "sol_attn_is_available"),
                    requires=REQUIRES, rel_l2_bound=0.12,
                    description="comfy-kitchen's Sol-Attn (tau threshold or SLA top-k, INT8 carriers): approximate, "
                                "one call over the whole sequence"),
        BackendSpec(name="kitchen_int8", exact=False, dtypes=FLOATS, max_head_dim=256, min_capability=(7, 5),
                    workspace=int8_workspace, speed_rank=20, factory=_int8_factory,
                    availability=kitchen_availability("int8_attention", "int8_attention_is_available"),
                    requires=REQUIRES, rel_l2_bound=1e-2,
                    description="comfy-kitchen's INT8 attention (INT8 Q/K/V and P, fp32 softmax): approximate, "
                                "any query rows against all keys"),
        BackendSpec(name="kitchen_sol_chunked", exact=False, dtypes=frozenset({torch.bfloat16}),
                    head_dims=(SOL_HEAD_DIM,), min_capability=(8, 0), workspace=sol_workspace, speed_rank=90,
                    takes_tau=True, call_shape="qkv_producer", factory=_producer_factory, availability=_producer_availability,
                    requires=REQUIRES, description="comfy-kitchen's chunked Sol-Attn QKV producer (see the reason)"),
    )
