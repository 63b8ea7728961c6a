"""Exact query-streaming attention in Triton: FlashAttention-2 style forward of a query chunk over full K/V.

q [B, H, Sq, D] and k/v [B, H, Skv, D] may be any strided views (H3 keeps them inside fused
buffers); all pointer math is 64-bit. K/V are float, or int8 with per-token-per-head fp32 scales
that are applied in registers as column scalings (of the scores for K, of the probabilities for V).
The output is [B, H, Sq, D] laid out [B, Sq, H, D], so the caller's head merge is a free view.
"""

from __future__ import annotations

import os

import torch
import triton
import triton.language as tl

from .launch import HOPPER_QSTREAM, INTERPRETER_QSTREAM, LaunchConfig, check_out, check_qkv, empty_output
from .qstream_reference import default_sm_scale

LOG2E = 1.4426950408889634


@triton.jit
def dot(q, a, b, IEEE: tl.constexpr):
    """a @ b in q's dtype with fp32 accumulation; IEEE: full-precision fp32 products (fp32 q)."""
    if IEEE:
        out = tl.dot(a.to(q.dtype), b.to(q.dtype), input_precision="ieee")
    else:
        out = tl.dot(a.to(q.dtype), b.to(q.dtype))
    return out


@triton.jit
def softmax_step(s, m_i, l_i):
    """Online-softmax bookkeeping for masked log2 scores s [M, N]: (p, alpha, l_i, m_new); the caller
    then does acc = acc * alpha[:, None] + p @ v."""
    m_new = tl.maximum(m_i, tl.max(s, axis=1))
    alpha = tl.math.exp2(m_i - m_new)
    p = tl.math.exp2(s - m_new[:, None])
    return p, alpha, l_i * alpha + tl.sum(p, axis=1), m_new


@triton.jit
def _attend_tile(acc, l_i, m_i, q, k_base, v_base, ks_base, vs_base, start_n, skv,
                 stride_kn, stride_kd, stride_vn, stride_vd, stride_ksn, stride_vsn, qk_scale,
                 HEAD_DIM: tl.constexpr, BLOCK_N: tl.constexpr, KV_INT8: tl.constexpr, MASK_N: tl.constexpr,
                 IEEE: tl.constexpr):
    offs_n = start_n + tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, HEAD_DIM)
    rows_n = offs_n.to(tl.int64)
    k_ptrs = k_base + rows_n[None, :] * stride_kn + offs_d[:, None] * stride_kd  # [D, BLOCK_N]
    v_ptrs = v_base + rows_n[:, None] * stride_vn + offs_d[None, :] * stride_vd  # [BLOCK_N, D]
    if MASK_N:
        valid_n = offs_n < skv
        kt = tl.load(k_ptrs, mask=valid_n[None, :], other=0.0)
    else:
        kt = tl.load(k_ptrs)
    s = dot(q, q, kt, IEEE)
    if KV_INT8:
        if MASK_N:
            k_sc = tl.load(ks_base + rows_n * stride_ksn, mask=valid_n, other=0.0)
        else:
            k_sc = tl.load(ks_base + rows_n * stride_ksn)
        s = s * (k_sc * qk_scale)[None, :]
    else:
        s = s * qk_scale
    if MASK_N:
        s = tl.where(valid_n[None, :], s, float("-inf"))
    p, alpha, l_i, m_new = softmax_step(s, m_i, l_i)
    if MASK_N:
        vt = tl.load(v_ptrs, mask=valid_n[:, None], other=0.0)
    else:
        vt = tl.load(v_ptrs)
    if KV_INT8:
        if MASK_N:
            v_sc = tl.load(vs_base + rows_n * stride_vsn, mask=valid_n, other=0.0)
        else:
            v_sc = tl.load(vs_base + rows_n * stride_vsn)
        p = p * v_sc[None, :]
    return acc * alpha[:, None] + dot(q, p, vt, IEEE), l_i, m_new


@triton.jit
def _qstream_fwd(Q, K, V, KS, VS, O,
                 stride_qb, stride_qh, stride_qm, stride_qd,
                 stride_kb, stride_kh, stride_kn, stride_kd,
                 stride_vb, stride_vh, stride_vn, stride_vd,
                 stride_ksb, stride_ksh, stride_ksn,
                 stride_vsb, stride_vsh, stride_vsn,
                 stride_ob, stride_oh, stride_om, stride_od,
                 heads, sq, skv, qk_scale,
                 HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                 KV_INT8: tl.constexpr, IEEE: tl.constexpr, WHILE_LOOPS: tl.constexpr):
    pid_m = tl.program_id(0)
    pid_bh = tl.program_id(1)
    b = (pid_bh // heads).to(tl.int64)
    h = (pid_bh % heads).to(tl.int64)
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, HEAD_DIM)
    valid_m = offs_m < sq
    rows_m = offs_m.to(tl.int64)
    q_ptrs = Q + b * stride_qb + h * stride_qh + rows_m[:, None] * stride_qm + offs_d[None, :] * stride_qd
    q = tl.load(q_ptrs, mask=valid_m[:, None], other=0.0)
    k_base = K + b * stride_kb + h * stride_kh
    v_base = V + b * stride_vb + h * stride_vh
    ks_base = KS + b * stride_ksb + h * stride_ksh
    vs_base = VS + b * stride_vsb + h * stride_vsh
    acc = tl.zeros([BLOCK_M, HEAD_DIM], dtype=tl.float32)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
    n_full = (skv // BLOCK_N) * BLOCK_N
    if WHILE_LOOPS:  # interpreter: see `while_loops`
        start_n = 0
        while start_n < n_full:
            acc, l_i, m_i = _attend_tile(acc, l_i, m_i, q, k_base, v_base, ks_base, vs_base, start_n, skv,
                                         stride_kn, stride_kd, stride_vn, stride_vd, stride_ksn, stride_vsn, qk_scale,
                                         HEAD_DIM, BLOCK_N, KV_INT8, False, IEEE)
            start_n += BLOCK_N
    else:
        for start_n in range(0, n_full, BLOCK_N):
            acc, l_i, m_i = _attend_tile(acc, l_i, m_i, q, k_base, v_base, ks_base, vs_base, start_n, skv,
                                         stride_kn, stride_kd, stride_vn, stride_vd, stride_ksn, stride_vsn, qk_scale,
                                         HEAD_DIM, BLOCK_N, KV_INT8, False, IEEE)
    if n_full < skv:
        acc, l_i, m_i = _attend_tile(acc, l_i, m_i, q, k_base, v_base, ks_base, vs_base, n_full, skv,
                                     stride_kn, stride_kd, stride_vn, stride_vd, stride_ksn, stride_vsn, qk_scale,
                                     HEAD_DIM, BLOCK_N, KV_INT8, True, IEEE)
    acc = acc / l_i[:, None]
    o_ptrs = O + b * stride_ob + h * stride_oh + rows_m[:, None] * stride_om + offs_d[None, :] * stride_od
    tl.store(o_ptrs, acc.to(O.dtype.element_ty), mask=valid_m[:, None])


def _autotuned():
    """The kernel wrapped in triton.autotune over HOPPER_QSTREAM (Triton keeps the tuning cache on it)."""
    configs = [triton.Config({"BLOCK_M": c.block_m, "BLOCK_N": c.block_n}, num_warps=c.num_warps,
                             num_stages=c.num_stages) for c in HOPPER_QSTREAM]
    return triton.autotune(configs=configs, key=["HEAD_DIM", "KV_INT8", "IEEE"])(_qstream_fwd)


_qstream_fwd_tuned = _autotuned()


def interpreting() -> bool:
    """True under TRITON_INTERPRET=1 (CPU tensors run through Triton's interpreter)."""
    return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


def while_loops() -> bool:
    """Loops with runtime bounds as `while` (interpreter only; compiled code keeps pipelined `for` loops).

    Triton 3.6's interpreter turns `range(bound)` into `int(1-element array)`, which NumPy >= 2.4 rejects;
    a `while` condition only needs `bool()`, which works with every NumPy.
    """
    return interpreting()


def qstream_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, k_scale: torch.Tensor | None = None,
                      v_scale: torch.Tensor | None = None, sm_scale: float | None = None,
                      out: torch.Tensor | None = None, config: LaunchConfig | None = None) -> torch.Tensor:
    """Exact attention of q against every key; returns [B, H, Sq, D] whose storage is [B, Sq, H, D].

    config=None: autotune over HOPPER_QSTREAM on CUDA, INTERPRETER_QSTREAM under the interpreter.
    """
    kv_int8 = check_qkv(q, k, v, k_scale, v_scale)
    if out is None:
        out = empty_output(q)
    check_out(out, q)
    b, h, sq, d = q.shape
    if sq == 0:
        return out
    skv = k.shape[2]
    qk_scale = default_sm_scale(d, sm_scale) * LOG2E
    ks = k_scale if kv_int8 else torch.ones(1, 1, 1, dtype=torch.float32, device=q.device)
    vs = v_scale if kv_int8 else ks
    ieee = q.dtype == torch.float32
    args = (q, k, v, ks, vs, out, *q.stride(), *k.stride(), *v.stride(), *ks.stride(), *vs.stride(), *out.stride(),
            h, sq, skv, qk_scale)
    if config is None and interpreting():
        config = INTERPRETER_QSTREAM
    if config is None:
        grid = lambda meta: (triton.cdiv(sq, meta["BLOCK_M"]), b * h)  # noqa: E731
        _qstream_fwd_tuned[grid](*args, HEAD_DIM=d, KV_INT8=kv_int8, IEEE=ieee, WHILE_LOOPS=False)
    else:
        grid = (triton.cdiv(sq, config.block_m), b * h)
        _qstream_fwd[grid](*args, HEAD_DIM=d, BLOCK_M=config.block_m, BLOCK_N=config.block_n, KV_INT8=kv_int8,
                           IEEE=ieee, WHILE_LOOPS=while_loops(), num_warps=config.num_warps,
                           num_stages=config.num_stages)
    return out
