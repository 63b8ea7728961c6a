"""The exact streamed H3 block: the stock block's math in bounded activation memory.

Stock H3 (ComfyUI's `DiTBlock.forward`) materialises the fused QKV output [S, 3*inner] and fc1's
output [S, 2*ffn] for the whole packed sequence. Here, per `ChunkSizes`:

attention, all heads (heads_per_group = 0): K and V for the whole sequence are projected in row
  chunks from the k|v rows of the fused qkv weight (q/k RMSNorm + partial RoPE as stock); then per
  query chunk: norm1 rows again (row-wise, same numbers), Q projection, attention against the full
  K/V, out-projection in sub-chunks, gated residual added in place. A query chunk's update of x
  touches only its own rows, and every K/V row was made before the first update, so the result is
  the stock result up to GEMM row-blocking.
attention, head groups: the modulated norm1 output is kept for the whole sequence; per group of
  heads, K/V of those heads for the whole sequence, then per query chunk Q of those heads, attention,
  and the partial out-projection over that group's input columns folded into the gated residual.
MLP: per row chunk norm2, fc1, SwiGLU, fc2, gated residual in place.

Activation bytes follow `memory.block_memory`. `interrupt()` is called before every chunk; on any
exception the large buffers are dropped before it propagates.
"""

from __future__ import annotations

import contextlib
from typing import Callable

import torch

from ..attention.protocol import AttentionFn, sdpa_attention
from .chunks import ChunkSizes
from .linear import LinearWeight, WeightAccess, plain_weights
from .modulation import clip_mod_rows, gate_, modulate_
from .probes import NO_OBSERVER, Observer
from .rope import norm_rope_, norm_rope_pair_

ModRows = list[tuple[int, int, "int | torch.Tensor"]]
"""(start, stop, row): row is one adaLN modulation row, or (ComfyUI 0.38+, masked jobs) a per-token
LongTensor of stop - start rows. ComfyUI calls this table mod_segments; it may hold several text
runs (text_token_tags)."""


def _spans(n: int, chunk: int):
    step = chunk if chunk > 0 else n
    return [(a, min(a + step, n)) for a in range(0, n, step)]


class _Run:
    """One block call: its inputs, settings and the phase functions."""

    def __init__(self, block, x, t_emb, mod_rows, rope, chunks, attention, weights, interrupt, cast_small, phase):
        self.block, self.x, self.t_emb, self.mod_rows, self.rope = block, x, t_emb, mod_rows, rope
        self.chunks, self.attention, self.weights, self.cast_small = chunks, attention, weights, cast_small
        self.interrupt, self.phase = interrupt, phase
        attn = block.attn
        self.heads, self.head_dim = attn.heads, attn.head_dim
        self.inner = self.heads * self.head_dim
        self.eps = attn.q_norm.eps
        self.mods = block.adaln_proj(t_emb)

    def tick(self):
        if self.interrupt is not None:
            self.interrupt()

    def norm_rows(self, norm, shift, scale, a, b):
        return modulate_(norm(self.x[a:b]), shift, scale, clip_mod_rows(self.mod_rows, a, b))

    def norm_weights(self):
        attn = self.block.attn
        return self.cast_small(attn.q_norm.weight, self.x), self.cast_small(attn.k_norm.weight, self.x)

    # --- stock phases (chunk size 0) -------------------------------------------------------------
    def stock_attention(self):
        shift, scale, gate = self.mods[0], self.mods[1], self.mods[2]
        s = self.x.shape[0]
        h = self.norm_rows(self.block.norm1, shift, scale, 0, s)
        with self.weights(self.block.attn.qkv_proj, h) as (w, b):
            qkv = LinearWeight.of(w, b)(h)
        del h
        q, k, v = qkv.split(self.inner, dim=-1)
        q = q.view(1, s, self.heads, self.head_dim)
        k = k.view(1, s, self.heads, self.head_dim)
        qw, kw = self.norm_weights()
        norm_rope_pair_(q, k, self.rope, qw, kw, self.eps)
        v = v.reshape(s, self.heads, self.head_dim)
        out = self.attention(q[0].transpose(0, 1).unsqueeze(0), k[0].transpose(0, 1).unsqueeze(0),
                             v.transpose(0, 1).unsqueeze(0), q_offset=0)
        del q, k, v, qkv
        with self.weights(self.block.attn.out_proj, out) as (w, b):
            y = LinearWeight.of(w, b)(out.squeeze(0))
        gate_(self.x, gate, y, self.mod_rows)

    def stock_mlp(self):
        shift, scale, gate = self.mods[3], self.mods[4], self.mods[5]
        s = self.x.shape[0]
        h = self.norm_rows(self.block.norm2, shift, scale, 0, s)
        with self.weights(self.block.mlp.fc1, h) as (w1, b1), self.weights(self.block.mlp.fc2, h) as (w2, b2):
            u = LinearWeight.of(w1, b1)(h)
            del h
            y = LinearWeight.of(w2, b2)(u, input_act="swiglu")
        del u
        gate_(self.x, gate, y, self.mod_rows)

    # --- streamed phases ---------------------------------------------------------------------------
    def streamed_attention(self):
        g = self.chunks.group_heads(self.heads)
        attn = self.block.attn
        with self.weights(attn.qkv_proj, self.x) as (wq, bq), self.weights(attn.out_proj, self.x) as (wo, bo):
            qkv, out_proj = LinearWeight.of(wq, bq), LinearWeight.of(wo, bo)
            if g == self.heads:
                self._attention_all_heads(qkv, out_proj)
            else:
                self._attention_head_groups(qkv, out_proj, g)

    def _kv_rows(self, h_rows, w_k, w_v, rope_rows, kw, k_buf, v_buf, a, b, heads):
        k = w_k(h_rows)
        norm_rope_(k.view(1, b - a, heads, self.head_dim), rope_rows, kw, self.eps)
        k_buf[a:b] = k
        del k
        v_buf[a:b] = w_v(h_rows)

    def _query_rows(self, h_rows, w_q, rope_rows, qw, k_buf, v_buf, a, heads):
        rows = h_rows.shape[0]
        q = w_q(h_rows)
        del h_rows
        q4 = q.view(1, rows, heads, self.head_dim)
        norm_rope_(q4, rope_rows, qw, self.eps)
        s = k_buf.shape[0]
        kv_view = (1, s, heads, self.head_dim)
        return self.attention(q4[0].transpose(0, 1).unsqueeze(0),
                              k_buf.view(kv_view)[0].transpose(0, 1).unsqueeze(0),
                              v_buf.view(kv_view)[0].transpose(0, 1).unsqueeze(0), q_offset=a).squeeze(0)

    def _out_rows(self, o, out_proj, gate, a):
        p_chunk = self.chunks.out_proj_chunk_tokens
        for pa, pb in _spans(o.shape[0], p_chunk):
            y = out_proj(o[pa:pb])
            gate_(self.x[a + pa:a + pb], gate, y, clip_mod_rows(self.mod_rows, a + pa, a + pb))
            del y

    def _attention_all_heads(self, qkv: LinearWeight, out_proj: LinearWeight):
        shift, scale, gate = self.mods[0], self.mods[1], self.mods[2]
        s, inner, x = self.x.shape[0], self.inner, self.x
        qw, kw = self.norm_weights()
        w_q, w_k, w_v = qkv.rows(0, inner), qkv.rows(inner, 2 * inner), qkv.rows(2 * inner, 3 * inner)
        spans = _spans(s, self.chunks.qkv_chunk_tokens)
        with self.phase("qkv"):
            k_buf = x.new_empty(s, inner)
            v_buf = x.new_empty(s, inner)
            for a, b in spans:
                self.tick()
                h = self.norm_rows(self.block.norm1, shift, scale, a, b)
                self._kv_rows(h, w_k, w_v, self.rope[:, a:b], kw, k_buf, v_buf, a, b, self.heads)
                del h
        with self.phase("attention"):
            for a, b in spans:
                self.tick()
                h = self.norm_rows(self.block.norm1, shift, scale, a, b)
                o = self._query_rows(h, w_q, self.rope[:, a:b], qw, k_buf, v_buf, a, self.heads)
                del h
                self._out_rows(o, out_proj, gate, a)
                del o

    def _attention_head_groups(self, qkv: LinearWeight, out_proj: LinearWeight, g: int):
        shift, scale, gate = self.mods[0], self.mods[1], self.mods[2]
        s, inner, d = self.x.shape[0], self.inner, self.head_dim
        qw, kw = self.norm_weights()
        spans = _spans(s, self.chunks.qkv_chunk_tokens)
        h = self.x.new_empty(s, self.x.shape[1])  # norm1 in row chunks: a whole-sequence norm has temporaries
        for a, b in spans:
            self.tick()
            h[a:b] = self.norm_rows(self.block.norm1, shift, scale, a, b)
        for c0 in range(0, self.heads, g):
            heads = min(g, self.heads - c0)
            lo, hi = c0 * d, (c0 + heads) * d
            w_q, w_k, w_v = qkv.rows(lo, hi), qkv.rows(inner + lo, inner + hi), qkv.rows(2 * inner + lo, 2 * inner + hi)
            w_o = out_proj.cols(lo, hi)
            with self.phase("qkv"):
                k_buf = self.x.new_empty(s, hi - lo)
                v_buf = self.x.new_empty(s, hi - lo)
                for a, b in spans:
                    self.tick()
                    self._kv_rows(h[a:b], w_k, w_v, self.rope[:, a:b], kw, k_buf, v_buf, a, b, heads)
            with self.phase("attention"):
                for a, b in spans:
                    self.tick()
                    o = self._query_rows(h[a:b], w_q, self.rope[:, a:b], qw, k_buf, v_buf, a, heads)
                    self._out_rows(o, w_o, gate, a)
                    del o
            del k_buf, v_buf

    def streamed_mlp(self):
        shift, scale, gate = self.mods[3], self.mods[4], self.mods[5]
        mlp = self.block.mlp
        with self.weights(mlp.fc1, self.x) as (w1, b1), self.weights(mlp.fc2, self.x) as (w2, b2):
            fc1, fc2 = LinearWeight.of(w1, b1), LinearWeight.of(w2, b2)
            for a, b in _spans(self.x.shape[0], self.chunks.mlp_chunk_tokens):
                self.tick()
                h = self.norm_rows(self.block.norm2, shift, scale, a, b)
                u = fc1(h)
                del h
                y = fc2(u, input_act="swiglu")
                del u
                gate_(self.x[a:b], gate, y, clip_mod_rows(self.mod_rows, a, b))
                del y


def _to_device(w: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    return w.to(device=like.device)


@torch.no_grad()
def run_block(block, x: torch.Tensor, t_emb: torch.Tensor, mod_rows: ModRows, rope_table: torch.Tensor, *,
              chunks: ChunkSizes, attention: AttentionFn | None = None, weights: WeightAccess | None = None,
              interrupt: Callable[[], None] | None = None,
              cast_small: Callable[[torch.Tensor, torch.Tensor], torch.Tensor] | None = None,
              phase: Callable[[str], contextlib.AbstractContextManager] | None = None,
              observer: Observer = NO_OBSERVER) -> torch.Tensor:
    """One H3 DiT block on the packed sequence `x` [S, hidden], updated in place and returned.

    `block` has H3's submodules (norm1, norm2, attn.{qkv_proj,q_norm,k_norm,out_proj}, mlp.{fc1,fc2},
    adaln_proj): ComfyUI's `DiTBlock` or `longmedia.testing.reference_block.ReferenceBlock`.
    `weights` hands out the large Linear weights once per phase; `cast_small(w, like)` moves the q/k
    norm weights next to the activations; `interrupt()` raises to cancel and runs before every chunk;
    `phase(name)` wraps each phase ("qkv", "attention", "mlp"), e.g. to turn an OOM into a fact report;
    `observer` sees `x` at each phase's edges (`probes.py`; by default nothing does).
    """
    phase = phase or (lambda name: contextlib.nullcontext())
    run = _Run(block, x, t_emb, mod_rows, rope_table, chunks, attention or sdpa_attention,
               weights or plain_weights, interrupt, cast_small or _to_device, phase)
    try:
        run.tick()
        name = "streamed_attention" if chunks.streams_attention else "stock_attention"
        observer.phase_in(name, x)
        if chunks.streams_attention:
            run.streamed_attention()
        else:
            with phase("attention"):
                run.stock_attention()
        observer.phase_out(name, x)
        name = "streamed_mlp" if chunks.streams_mlp else "stock_mlp"
        observer.phase_in(name, x)
        with phase("mlp"):
            run.streamed_mlp() if chunks.streams_mlp else run.stock_mlp()
        observer.phase_out(name, x)
    finally:
        run.mods = None  # drop references held by the run before an exception propagates
    return x
