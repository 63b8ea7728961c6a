"""Launch configs for the attention kernels and the argument checks every entry point shares.

A `LaunchConfig` is injectable so the Triton interpreter (which cannot autotune over several
configs) runs one small config, while a GPU run either autotunes over a short list or takes the
config a benchmark hands in.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

FLOAT_DTYPES = (torch.float16, torch.bfloat16, torch.float32)
HEAD_DIMS = (32, 64, 128)


class AttentionArgumentError(ValueError):
    """An attention kernel argument is outside what the kernels support."""


def _power_of_two(x: int) -> bool:
    return x > 0 and (x & (x - 1)) == 0


@dataclass(frozen=True)
class LaunchConfig:
    """Tile sizes and scheduling of one kernel launch.

    block_m: query rows per program (Sol: 64 or 128, one or two Sol query blocks).
    block_n: keys per inner step of the exact kernel (Sol: 1 or 2 listed Sol key blocks per exact step).
    group:   Sol only: key blocks scored per routing step.
    tma:     Sol only: read K/V tiles and key summaries through TMA descriptors where the device (Hopper
             on, or the interpreter), Triton and the strides allow it; False keeps pointer loads.
    """

    block_m: int = 128
    block_n: int = 64
    num_warps: int = 8
    num_stages: int = 3
    group: int = 32
    tma: bool = True

    def __post_init__(self) -> None:
        for name in ("block_m", "block_n", "group"):
            value = getattr(self, name)
            if not isinstance(value, int) or not _power_of_two(value) or value < 16:
                raise AttentionArgumentError(
                    f"LaunchConfig.{name} must be a power of two >= 16 (tl.dot's smallest tile), got {value!r}")
        if self.num_warps not in (1, 2, 4, 8, 16):
            raise AttentionArgumentError(f"LaunchConfig.num_warps must be 1, 2, 4, 8 or 16, got {self.num_warps!r}")
        if not isinstance(self.num_stages, int) or not 1 <= self.num_stages <= 6:
            raise AttentionArgumentError(f"LaunchConfig.num_stages must be an integer in [1, 6], got {self.num_stages!r}")


INTERPRETER_QSTREAM = LaunchConfig(block_m=32, block_n=32, num_warps=4, num_stages=1)
"""One small config for TRITON_INTERPRET=1 runs of the exact kernel."""

INTERPRETER_SOL = LaunchConfig(block_m=64, block_n=64, num_warps=4, num_stages=1, group=16)
"""One small config for TRITON_INTERPRET=1 runs of the Sol kernel (block_m must cover whole Sol blocks)."""

HOPPER_QSTREAM = (
    LaunchConfig(block_m=128, block_n=128, num_warps=8, num_stages=3),
    LaunchConfig(block_m=128, block_n=64, num_warps=8, num_stages=3),
    LaunchConfig(block_m=128, block_n=64, num_warps=4, num_stages=3),
    LaunchConfig(block_m=128, block_n=128, num_warps=8, num_stages=2),
)
"""Autotune set of the exact kernel on CUDA (first entry: the default when autotune is off)."""

HOPPER_SOL = (
    LaunchConfig(block_m=64, block_n=64, num_warps=4, num_stages=3, group=64),
    LaunchConfig(block_m=64, block_n=64, num_warps=4, num_stages=3, group=32),
    LaunchConfig(block_m=64, block_n=64, num_warps=4, num_stages=2, group=64),
)
"""Sol configs on CUDA. From compute capability 9.0 the first one runs as is: on the H200 at 104k it was the
fastest of every config swept (bench/sol_configs.py: with TMA 167 ms, group 32 170, 2 stages 175, 4 stages
198, 8 warps 260, two query blocks per program 200), and an autotune pick is made on whatever shape comes
first. Older GPUs (no TMA) autotune over all three. Two query blocks per program (block_m 128) compute the
union of both blocks' exact lists; two listed blocks per step (block_n 128) never won and cannot use TMA;
both stay available as explicit configs."""


def check_kv(k: torch.Tensor, v: torch.Tensor, k_scale: torch.Tensor | None, v_scale: torch.Tensor | None,
             dtype: torch.dtype | None = None) -> bool:
    """Validate K/V (float of `dtype`, or int8 with fp32 [B, H, S] scales); return whether they are int8."""
    for name, t in (("k", k), ("v", v)):
        if t.dim() != 4:
            raise AttentionArgumentError(
                f"{name} must be 4-D [batch, heads, seq, head_dim], got shape {tuple(t.shape)}; add the batch dim")
    if k.shape != v.shape or k.shape[3] not in HEAD_DIMS:
        raise AttentionArgumentError(
            f"k and v must be equal [batch, heads, seq, head_dim] with head_dim in {HEAD_DIMS}, "
            f"got k {tuple(k.shape)} and v {tuple(v.shape)}")
    if k.shape[2] < 1:
        raise AttentionArgumentError("k/v sequence length must be >= 1, got 0; there is nothing to attend to")
    if k.device != v.device:
        raise AttentionArgumentError(f"k and v must share a device, got {k.device} and {v.device}")
    int8 = k.dtype == torch.int8
    if int8 != (v.dtype == torch.int8):
        raise AttentionArgumentError(f"k and v must both be int8 or both be float, got {k.dtype} and {v.dtype}")
    if int8:
        for name, s in (("k_scale", k_scale), ("v_scale", v_scale)):
            if s is None or tuple(s.shape) != tuple(k.shape[:3]) or s.dtype != torch.float32 or s.device != k.device:
                got = None if s is None else (tuple(s.shape), s.dtype, str(s.device))
                raise AttentionArgumentError(
                    f"int8 K/V need {name} as float32 {list(k.shape[:3])} on {k.device} (see quantize_kv_int8), "
                    f"got {got}")
        return True
    if k_scale is not None or v_scale is not None:
        raise AttentionArgumentError("k_scale/v_scale are only for int8 K/V; drop them for float K/V")
    want = dtype or k.dtype
    if k.dtype not in FLOAT_DTYPES or k.dtype != want or v.dtype != want:
        raise AttentionArgumentError(
            f"float k/v must both be {want} (q's dtype; or int8 with scales), got {k.dtype}, {v.dtype}")
    return False


def check_qkv(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
              k_scale: torch.Tensor | None, v_scale: torch.Tensor | None) -> bool:
    """Validate shapes, dtypes and scales; return whether K/V are int8."""
    if q.dim() != 4:
        raise AttentionArgumentError(
            f"q must be 4-D [batch, heads, seq, head_dim], got shape {tuple(q.shape)}; add the batch dim")
    if q.dtype not in FLOAT_DTYPES:
        raise AttentionArgumentError(f"q dtype must be one of {FLOAT_DTYPES}, got {q.dtype}; cast q first")
    b, h, _, d = q.shape
    if d not in HEAD_DIMS:
        raise AttentionArgumentError(f"head_dim must be one of {HEAD_DIMS}, got {d}; pad or reshape the heads")
    int8 = check_kv(k, v, k_scale, v_scale, q.dtype)
    if k.shape[0] != b or k.shape[1] != h or k.shape[3] != d:
        raise AttentionArgumentError(
            f"k and v must be [{b}, {h}, seq, {d}] to match q {tuple(q.shape)}, got {tuple(k.shape)}")
    if q.device != k.device:
        raise AttentionArgumentError(f"q and k/v must share a device, got {q.device} and {k.device}")
    return int8


def check_out(out: torch.Tensor, q: torch.Tensor) -> None:
    """`out` must be q-shaped and q-typed (any strides)."""
    if tuple(out.shape) != tuple(q.shape) or out.dtype != q.dtype or out.device != q.device:
        raise AttentionArgumentError(
            f"out must be {tuple(q.shape)} {q.dtype} on {q.device} (e.g. torch.empty(b, s, h, d).transpose(1, 2)), "
            f"got {tuple(out.shape)} {out.dtype} on {out.device}")


def empty_output(q: torch.Tensor) -> torch.Tensor:
    """[B, H, Sq, D] view of a [B, Sq, H, D] buffer, so the head merge after attention is free."""
    b, h, s, d = q.shape
    return torch.empty(b, s, h, d, dtype=q.dtype, device=q.device).transpose(1, 2)
