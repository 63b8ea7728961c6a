"""Sol block-sparse attention in Triton (routing rules and reference: `sol_reference.py`).

Routing comes first, in torch (`sol_routing.routing_mask`): the proxy score of every (query block, key block) pair,
mean query . mean key, is one small batched GEMM; mu + tau * sigma over each query block's proxies, the
diagonal band, sink columns and exact-query rows turn it into a uint8 mask [B, H, query blocks, key
blocks], built per launch (so it stays within LIST_BUDGET_BYTES / 4). One program then owns 64 or 128
query rows (one or two Sol query blocks) of one head and makes two passes. (1) Approximation: each
group of key blocks reads its mask bits; approximate blocks enter the online softmax as `count` copies
of the mean key with the summed V (one [rows, group] x [group, D] dot per group); exact blocks are
appended to a per-program list (int32: block * 4 + which halves want it). (2) Exact blocks: a
pipelinable loop over that list, one or two listed blocks per step, real keys, rows of a half that did
not pick the block masked out. Scores use exp2 with log2e folded into sm_scale; accumulators are fp32.
From Hopper on (and under the interpreter) K/V tiles and key summaries come through TMA descriptors when
their strides allow it (`_tma_ready`): 187 -> 165 ms at 104k on the H200, the addressing being most of
what the pointer loads of listed blocks cost. One-block float steps mask only the ragged last block and
fold sm_scale into the exponent's FMA: 165 -> 157 ms.
"""

from __future__ import annotations

import inspect
from typing import Sequence

import torch
import triton
import triton.language as tl

from .launch import (
    HOPPER_SOL,
    INTERPRETER_SOL,
    AttentionArgumentError,
    LaunchConfig,
    check_kv,
    check_out,
    check_qkv,
    empty_output,
)
from .qstream_attention import LOG2E, dot, interpreting, softmax_step, while_loops
from .qstream_reference import default_sm_scale
from .sol_reference import LIST_BUDGET_BYTES, SolKeySummaries, SolStats, check_block, check_sol_args, query_block_span
from .sol_reference import sol_key_summaries as torch_key_summaries
from .sol_routing import routing_mask

try:  # host-side TMA descriptors (Triton >= 3.4); without them every launch takes the pointer path
    from triton.tools.tensor_descriptor import TensorDescriptor
except ImportError:
    TensorDescriptor = None

__all__ = ["sol_attention", "sol_key_summaries"]


@triton.jit
def _load_rows(base, desc, b32, h32, row0, offs_r, valid_r, offs_d, stride_n, stride_d, TMA: tl.constexpr):
    """[len(offs_r), D] rows row0 + offs_r of one head (zeros past the end): a TMA tile of the descriptor
    `desc` ([B, H, rows, D], block [1, 1, len(offs_r), D]) when TMA, else pointer loads from `base`."""
    if TMA:
        tile = desc.load([b32, h32, row0, 0])
        out = tile.reshape(offs_r.shape[0], offs_d.shape[0])
    else:
        rows = (row0 + offs_r).to(tl.int64)
        out = tl.load(base + rows[:, None] * stride_n + offs_d[None, :] * stride_d, mask=valid_r[:, None], other=0.0)
    return out


@triton.jit
def _route_step(g0, q, kc_base, vc_base, KC, VC, b32, h32, last_cnt, m_base0, m_base1, list_base, offs_gr, offs_d, half, nk,
                stride_kcn, stride_kcd, stride_vcn, stride_vcd, stride_mn, qk_scale, live1,
                acc, l_i, m_i, n_list, ex0, ex1, QB: tl.constexpr, IEEE: tl.constexpr, TMA: tl.constexpr,
                BLK: tl.constexpr):
    """Pass 1 over one group: read each block's routing bits, fold the approximate blocks in (each as
    BLK copies of its mean key, `last_cnt` for the ragged last block), append the exact ones. Every
    cross-thread reduction here costs about a millisecond at 104k, so the exact-block counts (stats) are
    kept only where the list length does not give them (QB == 2)."""
    offs_g = g0 + offs_gr
    valid_g = offs_g < nk
    kc = _load_rows(kc_base, KC, b32, h32, g0, offs_gr, valid_g, offs_d, stride_kcn, stride_kcd, TMA)
    s = dot(q, q, tl.trans(kc), IEEE) * qk_scale
    e0 = tl.load(m_base0 + offs_g * stride_mn, mask=valid_g, other=0) != 0
    if QB == 2:
        e1 = tl.load(m_base1 + offs_g * stride_mn, mask=valid_g & live1, other=0) != 0
        apx = valid_g[None, :] & tl.where(half[:, None] == 0, (~e0)[None, :], (~e1)[None, :])
        union = e0 | e1
        code = offs_g * 4 + e0.to(tl.int32) + 2 * e1.to(tl.int32)
        ex0 += tl.sum(e0.to(tl.int32), axis=0)
        ex1 += tl.sum(e1.to(tl.int32), axis=0)
    else:
        apx = valid_g[None, :] & (~e0)[None, :]
        union = e0
        code = offs_g * 4 + e0.to(tl.int32)
    s = tl.where(apx, s, float("-inf"))
    m_new = tl.maximum(m_i, tl.max(s, axis=1))
    alpha = tl.math.exp2(m_i - m_new)
    p = tl.math.exp2(s - m_new[:, None])
    cnt = tl.where(offs_g == nk - 1, last_cnt, BLK * 1.0)  # blocks past the end have p = 0 already
    l_i = l_i * alpha + tl.sum(p * cnt[None, :], axis=1)
    vc = _load_rows(vc_base, VC, b32, h32, g0, offs_gr, valid_g, offs_d, stride_vcn, stride_vcd, TMA)
    acc = acc * alpha[:, None] + dot(q, p, vc, IEEE)
    pos = n_list + tl.cumsum(union.to(tl.int32), axis=0) - 1
    tl.store(list_base + pos, code, mask=union)
    return acc, l_i, m_new, n_list + tl.sum(union.to(tl.int32), axis=0), ex0, ex1


@triton.jit
def _exact_step(i, n_list, q, list_base, k_base, v_base, K, V, b32, h32, ks_base, vs_base, offs_n, offs_d, half, skv,
                stride_kn, stride_kd, stride_vn, stride_vd, stride_ksn, stride_vsn, qk_scale, acc, l_i, m_i,
                BLOCK_M: tl.constexpr, BLK: tl.constexpr, QB: tl.constexpr, KV_INT8: tl.constexpr,
                IEEE: tl.constexpr, PAIR: tl.constexpr, TMA: tl.constexpr):
    """Pass 2, listed key blocks i, i+1, ... (len(offs_n) // BLK of them): real keys; rows of a half that
    did not pick a block, and slots past the end of the list, are masked out. TMA (one block a step):
    K and V tiles come through the descriptors K and V, rows past the sequence as zeros."""
    if PAIR == 1:  # one scalar list load: the cheapest addressing
        code = tl.load(list_base + i)
        keys = (code >> 2) * BLK + offs_n
        valid_n = keys < skv
    else:
        slot = i + offs_n // BLK
        live = slot < n_list
        code = tl.load(list_base + slot, mask=live, other=0)
        keys = (code >> 2) * BLK + offs_n % BLK
        valid_n = live & (keys < skv)
    keys64 = keys.to(tl.int64)
    if TMA:
        tl.static_assert(PAIR == 1, "TMA steps one listed key block at a time")
        kt = tl.trans(K.load([b32, h32, (code >> 2) * BLK, 0]).reshape(BLK, offs_d.shape[0]))
    else:
        kt = tl.load(k_base + keys64[None, :] * stride_kn + offs_d[:, None] * stride_kd, mask=valid_n[None, :],
                     other=0.0)
    s = dot(q, q, kt, IEEE)
    if QB == 1 and PAIR == 1 and not KV_INT8:
        # One float block: only the ragged last block has keys to mask (a uniform branch), and sm_scale
        # folds into the exponent (one FMA per score). 4% of the whole call at 104k on the H200.
        if (code >> 2) * BLK + BLK > skv:
            s = tl.where(valid_n[None, :], s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, axis=1) * qk_scale)
        p = tl.math.exp2(s * qk_scale - m_new[:, None])
        alpha = tl.math.exp2(m_i - m_new)
        l_i = l_i * alpha + tl.sum(p, axis=1)
        vt = _load_rows(v_base, V, b32, h32, (code >> 2) * BLK, offs_n, valid_n, offs_d, stride_vn, stride_vd, TMA)
        return acc * alpha[:, None] + dot(q, p, vt, IEEE), l_i, m_new
    if KV_INT8:
        k_sc = tl.load(ks_base + keys64 * stride_ksn, mask=valid_n, other=0.0)
        s = s * (k_sc * qk_scale)[None, :]
    else:
        s = s * qk_scale
    if QB == 2:
        if PAIR == 1:
            want = tl.where(half == 0, (code & 1) != 0, (code & 2) != 0)[:, None] & valid_n[None, :]
        else:
            want = tl.where(half[:, None] == 0, (code & 1)[None, :] != 0, (code & 2)[None, :] != 0) & valid_n[None, :]
    else:
        want = tl.zeros([BLOCK_M, 1], dtype=tl.int1) | valid_n[None, :]
    s = tl.where(want, s, float("-inf"))
    p, alpha, l_i, m_new = softmax_step(s, m_i, l_i)
    if PAIR == 1:
        vt = _load_rows(v_base, V, b32, h32, (code >> 2) * BLK, offs_n, valid_n, offs_d, stride_vn, stride_vd, TMA)
    else:  # two listed blocks: their keys are not one run of rows
        vt = tl.load(v_base + keys64[:, None] * stride_vn + offs_d[None, :] * stride_vd, mask=valid_n[:, None],
                     other=0.0)
    if KV_INT8:
        p = p * tl.load(vs_base + keys64 * stride_vsn, mask=valid_n, other=0.0)[None, :]
    return acc * alpha[:, None] + dot(q, p, vt, IEEE), l_i, m_new


@triton.jit
def _sol_fwd(Q, K, V, KS, VS, KC, VC, MASK, LIST, STATS, O,
             stride_qb, stride_qh, stride_qm, stride_qd,
             stride_kb, stride_kh, stride_kn, stride_kd,
             stride_vb, stride_vh, stride_vn, stride_vd,
             stride_ksb, stride_ksh, stride_ksn,
             stride_vsb, stride_vsh, stride_vsn,
             stride_kcb, stride_kch, stride_kcn, stride_kcd,
             stride_vcb, stride_vch, stride_vcn, stride_vcd,
             stride_mb, stride_mh, stride_mq, stride_mn,
             stride_sb, stride_sh, stride_sq,
             stride_ob, stride_oh, stride_om, stride_od,
             heads, sq, skv, nk, nq, row0, qk_scale, last_cnt,
             HEAD_DIM: tl.constexpr, BLK: tl.constexpr, QB: tl.constexpr, GROUP: tl.constexpr,
             KV_INT8: tl.constexpr, IEEE: tl.constexpr, WITH_STATS: tl.constexpr, WHILE_LOOPS: tl.constexpr,
             PAIR: tl.constexpr, TMA: tl.constexpr):
    """K, V, KC, VC: pointers, or (TMA) tensor descriptors with blocks [1, 1, BLK, D] (K, V) and
    [1, 1, GROUP, D] (KC, VC)."""
    BLOCK_M: tl.constexpr = QB * BLK
    pid_m = tl.program_id(0)
    pid_bh = tl.program_id(1)
    b = (pid_bh // heads).to(tl.int64)
    h = (pid_bh % heads).to(tl.int64)
    offs_r = tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, HEAD_DIM)
    offs_gr = tl.arange(0, GROUP)
    offs_n = tl.arange(0, BLK * PAIR)  # pass 2 steps PAIR listed key blocks at a time
    rows = row0 + pid_m * BLOCK_M + offs_r
    valid_r = (rows >= 0) & (rows < sq)
    half = offs_r // BLK
    q = tl.load(Q + b * stride_qb + h * stride_qh + rows[:, None].to(tl.int64) * stride_qm
                + offs_d[None, :] * stride_qd, mask=valid_r[:, None], other=0.0)
    n0 = tl.sum((valid_r & (half == 0)).to(tl.int32), axis=0)
    n1 = tl.sum((valid_r & (half == 1)).to(tl.int32), axis=0)
    lqb0 = pid_m * QB
    live1 = (offs_gr * 0 + n1) > 0  # the second half has rows (a GROUP-wide vector, as the interpreter needs)
    b32, h32 = b.to(tl.int32), h.to(tl.int32)
    if TMA:  # the descriptors address by (b, h, row, 0); the pointer bases are unused
        kc_base, vc_base, k_base, v_base = KS, KS, KS, KS
    else:
        kc_base = KC + b * stride_kcb + h * stride_kch
        vc_base = VC + b * stride_vcb + h * stride_vch
        k_base = K + b * stride_kb + h * stride_kh
        v_base = V + b * stride_vb + h * stride_vh
    m_base0 = MASK + b * stride_mb + h * stride_mh + lqb0 * stride_mq
    m_base1 = m_base0 + stride_mq

    # pass 1: fold approximate blocks in; list exact blocks
    acc = tl.zeros([BLOCK_M, HEAD_DIM], dtype=tl.float32)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    m_i = tl.full([BLOCK_M], -1.0e30, dtype=tl.float32)  # finite: rows may see no key in a step
    list_base = LIST + (pid_bh * tl.num_programs(0) + pid_m).to(tl.int64) * nk
    n_list = tl.zeros([], dtype=tl.int32)
    ex0 = tl.zeros([], dtype=tl.int32)
    ex1 = tl.zeros([], dtype=tl.int32)
    if WHILE_LOOPS:
        g0 = 0
        while g0 < nk:
            acc, l_i, m_i, n_list, ex0, ex1 = _route_step(
                g0, q, kc_base, vc_base, KC, VC, b32, h32, last_cnt, m_base0, m_base1, list_base, offs_gr, offs_d,
                half, nk, stride_kcn, stride_kcd, stride_vcn, stride_vcd, stride_mn, qk_scale, live1,
                acc, l_i, m_i, n_list, ex0, ex1, QB, IEEE, TMA, BLK)
            g0 += GROUP
    else:
        for g0 in range(0, nk, GROUP):
            acc, l_i, m_i, n_list, ex0, ex1 = _route_step(
                g0, q, kc_base, vc_base, KC, VC, b32, h32, last_cnt, m_base0, m_base1, list_base, offs_gr, offs_d,
                half, nk, stride_kcn, stride_kcd, stride_vcn, stride_vcd, stride_mn, qk_scale, live1,
                acc, l_i, m_i, n_list, ex0, ex1, QB, IEEE, TMA, BLK)
    tl.debug_barrier()  # the list written above is read by other threads of this program below

    # pass 2: exact key blocks
    ks_base = KS + b * stride_ksb + h * stride_ksh
    vs_base = VS + b * stride_vsb + h * stride_vsh
    if WHILE_LOOPS:
        i = 0
        while i < n_list:
            acc, l_i, m_i = _exact_step(i, n_list, q, list_base, k_base, v_base, K, V, b32, h32, ks_base, vs_base, offs_n,
                                        offs_d, half, skv, stride_kn, stride_kd, stride_vn, stride_vd, stride_ksn,
                                        stride_vsn, qk_scale, acc, l_i, m_i, BLOCK_M, BLK, QB, KV_INT8, IEEE, PAIR, TMA)
            i += PAIR
    else:
        for i in range(0, n_list, PAIR):
            acc, l_i, m_i = _exact_step(i, n_list, q, list_base, k_base, v_base, K, V, b32, h32, ks_base, vs_base, offs_n,
                                        offs_d, half, skv, stride_kn, stride_kd, stride_vn, stride_vd, stride_ksn,
                                        stride_vsn, qk_scale, acc, l_i, m_i, BLOCK_M, BLK, QB, KV_INT8, IEEE, PAIR, TMA)

    acc = acc / l_i[:, None]
    tl.store(O + b * stride_ob + h * stride_oh + rows[:, None].to(tl.int64) * stride_om + offs_d[None, :] * stride_od,
             acc.to(O.dtype.element_ty), mask=valid_r[:, None])
    if WITH_STATS:
        s_base = STATS + b * stride_sb + h * stride_sh
        if QB == 1:
            ex0 = n_list
        tl.store(s_base + lqb0 * stride_sq, ex0, mask=n0 > 0)
        if QB == 2:
            tl.store(s_base + (lqb0 + 1) * stride_sq, ex1, mask=n1 > 0)


@triton.jit
def _summaries_fwd(K, V, KS, VS, KC, VC, stride_kb, stride_kh, stride_kn, stride_kd, stride_vb, stride_vh, stride_vn,
                   stride_vd, stride_ksb, stride_ksh, stride_ksn, stride_vsb, stride_vsh, stride_vsn,
                   stride_cb, stride_ch, stride_cn, heads, skv,
                   HEAD_DIM: tl.constexpr, BLK: tl.constexpr, KV_INT8: tl.constexpr):
    """One key block of one head: mean key and summed value, fp32 math."""
    j = tl.program_id(0)
    b = (tl.program_id(1) // heads).to(tl.int64)
    h = (tl.program_id(1) % heads).to(tl.int64)
    keys = j * BLK + tl.arange(0, BLK)
    valid = keys < skv
    rows = keys.to(tl.int64)[:, None]
    offs_d = tl.arange(0, HEAD_DIM)[None, :]
    kk = tl.load(K + b * stride_kb + h * stride_kh + rows * stride_kn + offs_d * stride_kd, mask=valid[:, None],
                 other=0.0).to(tl.float32)
    vv = tl.load(V + b * stride_vb + h * stride_vh + rows * stride_vn + offs_d * stride_vd, mask=valid[:, None],
                 other=0.0).to(tl.float32)
    if KV_INT8:
        kk = kk * tl.load(KS + b * stride_ksb + h * stride_ksh + rows * stride_ksn, mask=valid[:, None], other=0.0)
        vv = vv * tl.load(VS + b * stride_vsb + h * stride_vsh + rows * stride_vsn, mask=valid[:, None], other=0.0)
    count = tl.sum(valid.to(tl.float32), axis=0)
    out = b * stride_cb + h * stride_ch + j * stride_cn + offs_d
    tl.store(KC + out, (tl.sum(kk, axis=0) / count)[None, :].to(KC.dtype.element_ty))
    tl.store(VC + out, tl.sum(vv, axis=0)[None, :].to(VC.dtype.element_ty))


def sol_key_summaries(k: torch.Tensor, v: torch.Tensor, *, block: int = 64, k_scale: torch.Tensor | None = None,
                      v_scale: torch.Tensor | None = None, dtype: torch.dtype = torch.float32) -> SolKeySummaries:
    """Mean key and summed value per key block: one Triton pass over K/V (the torch version off-GPU)."""
    if k.device.type != "cuda" and not interpreting():
        return torch_key_summaries(k, v, block=block, k_scale=k_scale, v_scale=v_scale, dtype=dtype)
    check_block(block)
    kv_int8 = check_kv(k, v, k_scale, v_scale)
    b, h, s, d = k.shape
    nk = triton.cdiv(s, block)
    means = torch.empty(b, h, nk, d, dtype=dtype, device=k.device)
    sums = torch.empty(b, h, nk, d, dtype=dtype, device=k.device)
    ks = k_scale if kv_int8 else torch.ones(1, 1, 1, dtype=torch.float32, device=k.device)
    vs = v_scale if kv_int8 else ks
    _summaries_fwd[(nk, b * h)](k, v, ks, vs, means, sums, *k.stride(), *v.stride(), *ks.stride(), *vs.stride(),
                                *means.stride()[:3], h, s, HEAD_DIM=d, BLK=block, KV_INT8=kv_int8, num_warps=4)
    return SolKeySummaries(means, sums, block, s)


def _autotuned():
    """The kernel under triton.autotune over HOPPER_SOL (Triton keeps the tuning cache on it, and on disk beside its
    compiled kernels where this Triton has `cache_results`); used below compute capability 9.0, where no config
    was measured and there is no TMA. tau is no kernel argument: routing runs in torch, so no tau recompiles."""
    configs = [triton.Config({"QB": c.block_m // 64, "GROUP": c.group, "PAIR": c.block_n // 64},
                             num_warps=c.num_warps, num_stages=c.num_stages) for c in HOPPER_SOL]
    cache = {"cache_results": True} if "cache_results" in inspect.signature(triton.autotune).parameters else {}
    return triton.autotune(configs=configs, key=["HEAD_DIM", "BLK", "KV_INT8", "IEEE", "WITH_STATS"], **cache)(_sol_fwd)


_sol_fwd_tuned = _autotuned()


def autotuned_config():
    """The launch config triton.autotune picked for the last tuned shape (None before any tuned call), as
    bench/sol_configs.py prints it."""
    return getattr(_sol_fwd_tuned, "best_config", None)


def _tma_ready(*tensors: torch.Tensor) -> bool:
    """Whether K/V and the key summaries can be read through TMA descriptors here: Hopper or newer (or the
    interpreter), Triton with host-side descriptors, contiguous head_dim, 16-byte aligned base and strides."""
    if TensorDescriptor is None:
        return False
    dev = tensors[0].device
    if not interpreting() and (dev.type != "cuda" or torch.cuda.get_device_capability(dev) < (9, 0)):
        return False
    return all(t.stride(-1) == 1 and t.data_ptr() % 16 == 0
               and all(st * t.element_size() % 16 == 0 for st in t.stride()[:-1]) for t in tensors)


def _descriptor(t: torch.Tensor, rows: int) -> "TensorDescriptor":
    """[B, H, S, D] tensor -> descriptor of [1, 1, rows, D] tiles (rows past S read as zeros)."""
    return TensorDescriptor(t, list(t.shape), list(t.stride()), [1, 1, rows, t.shape[3]])


def _launch(q, k, v, ks, vs, summ, mask, stats, out, lst, *, q_offset, qk_scale, kv_int8, with_stats,
            config):
    b, h, sq, d = q.shape
    blk = summ.block
    first, nq = query_block_span(q_offset, sq, blk)
    row0 = first * blk - q_offset
    kc, vc = summ.key_means, summ.value_sums
    # autotuned launches (below sm90) have no TMA; the descriptors' tiles follow the config
    tma = config is not None and config.tma and config.block_n <= blk and _tma_ready(k, v, kc, vc)
    k_strides, v_strides, kc_strides, vc_strides = k.stride(), v.stride(), kc.stride(), vc.stride()
    if tma:
        k, v = _descriptor(k, blk), _descriptor(v, blk)
        kc, vc = _descriptor(kc, config.group), _descriptor(vc, config.group)
    args = (q, k, v, ks, vs, kc, vc, mask, lst, stats, out,
            *q.stride(), *k_strides, *v_strides, *ks.stride(), *vs.stride(), *kc_strides, *vc_strides,
            *mask.stride(), *stats.stride(), *out.stride(),
            h, sq, k.shape[2], summ.num_blocks, nq, row0, qk_scale,
            float(summ.seq_len - (summ.num_blocks - 1) * blk))  # keys in the last block
    flags = dict(HEAD_DIM=d, BLK=blk, KV_INT8=kv_int8, IEEE=q.dtype == torch.float32, WITH_STATS=with_stats, TMA=tma)
    if config is None:
        grid = lambda meta: (triton.cdiv(nq, meta["QB"]), b * h)  # noqa: E731
        _sol_fwd_tuned[grid](*args, WHILE_LOOPS=False, **flags)
    else:
        qb, pair = max(1, config.block_m // blk), max(1, config.block_n // blk)
        if qb not in (1, 2) or pair not in (1, 2):
            raise AttentionArgumentError(
                f"Sol config.block_m and block_n must each be 1 or 2 Sol blocks ({blk} or {2 * blk}), "
                f"got block_m {config.block_m}, block_n {config.block_n}")
        _sol_fwd[(triton.cdiv(nq, qb), b * h)](*args, QB=qb, GROUP=config.group, PAIR=pair, WHILE_LOOPS=while_loops(),
                                               num_warps=config.num_warps, num_stages=config.num_stages, **flags)


def sol_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, tau: float, q_offset: int = 0,
                  sink_ranges: Sequence[tuple[int, int]] = (), exact_query_ranges: Sequence[tuple[int, int]] = (),
                  k_scale: torch.Tensor | None = None, v_scale: torch.Tensor | None = None,
                  sm_scale: float | None = None, block: int = 64, config: LaunchConfig | None = None,
                  return_stats: bool = False, summaries: SolKeySummaries | None = None,
                  out: torch.Tensor | None = None):
    """Sol attention of a query chunk against every key; semantics in `sol_reference`.

    Returns out ([B, H, Sq, D], storage [B, Sq, H, D]) or (out, SolStats) with return_stats.
    Pass `summaries=sol_key_summaries(k, v, block=block, dtype=q.dtype)` to reuse them across chunks.
    config=None: HOPPER_SOL[0] from compute capability 9.0, autotune over HOPPER_SOL on older CUDA GPUs,
    INTERPRETER_SOL under the interpreter.
    """
    kv_int8 = check_qkv(q, k, v, k_scale, v_scale)
    sinks, exact_q = check_sol_args(q, k, tau, q_offset, block, summaries, sink_ranges, exact_query_ranges)
    if out is None:
        out = empty_output(q)
    check_out(out, q)
    b, h, sq, d = q.shape
    if summaries is None:
        summaries = sol_key_summaries(k, v, block=block, k_scale=k_scale, v_scale=v_scale, dtype=q.dtype)
    summ = summaries.to(q.dtype)
    nk = summ.num_blocks
    first, nq = query_block_span(q_offset, sq, block)
    stats = torch.zeros(b, h, nq if return_stats else 1, dtype=torch.int32, device=q.device)
    if sq == 0:
        return (out, SolStats(stats[:, :, :0], nk)) if return_stats else out
    if config is None and interpreting():
        config = INTERPRETER_SOL
    elif config is None and q.is_cuda and torch.cuda.get_device_capability(q.device) >= (9, 0):
        config = HOPPER_SOL[0]  # measured fastest on Hopper; autotune picks on the first shape it sees
    ks = k_scale if kv_int8 else torch.ones(1, 1, 1, dtype=torch.float32, device=q.device)
    vs = v_scale if kv_int8 else ks
    scale = default_sm_scale(d, sm_scale)
    common = dict(qk_scale=scale * LOG2E, kv_int8=kv_int8, with_stats=return_stats, config=config)
    blocks_per_launch = max(2, LIST_BUDGET_BYTES // (4 * b * h * nk))
    # one int32 per (program, key block); sized for one Sol block per program, the most programs
    lst = torch.empty(b * h * min(nq, blocks_per_launch) * nk, dtype=torch.int32, device=q.device)
    qb0 = 0  # local query block where the next launch starts
    while qb0 < nq:
        qb1 = min(nq, qb0 + blocks_per_launch)
        r0 = max(0, (first + qb0) * block - q_offset)
        r1 = min(sq, (first + qb1) * block - q_offset)
        qc = q[:, :, r0:r1]
        mask = routing_mask(qc, summ, q_offset + r0, tau, scale, sinks, exact_q)
        st = stats[:, :, qb0:qb1] if return_stats else stats
        _launch(qc, k, v, ks, vs, summ, mask, st, out[:, :, r0:r1], lst, q_offset=q_offset + r0, **common)
        del mask
        qb0 = qb1
    if return_stats:
        return out, SolStats(stats, nk)
    return out
