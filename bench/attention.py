"""Attention benchmark: SDPA backends (whole and query-streamed), our exact Triton kernel (bf16 / int8 K/V),
our Sol, and comfy-kitchen's int8_attention and sol_attn (tau / SLA top-k), on H3-like structured inputs
(56 heads x 128, bf16, text rows + a video grid with 3-axis RoPE).

    python -m bench.attention --seq 8k,32k,64k,104k,150k --out out/attention.md     # GPU
    python -m bench.attention --smoke                                                # tiny CPU run, references

Kitchen's rows (comfy-kitchen >= 0.2.36) run whenever it is usable (--kitchen auto; on: required, off: none).
On the lent H200 with kitchen 0.2.40 (carry [".whl_kitchen"], built by KITCHEN_BENCH=0.2.40 build_carry.sh):

    . tools/gpu/kitchen_site.sh || exit 1; python -m bench.attention --seq 64k,104k,150k --kitchen on \
        --out $OUT/attention.md

Rows print as they finish and go to $OUT/attention_rows.jsonl (--json) as JSON lines. "Matched accuracy"
pairs each kitchen row with our fastest Sol tau (of --taus) and the fastest exact path (our exact kernel or
SDPA) whose rel-L2 is at most kitchen's. Every time includes what the caller needs: [1, S, H*D] heads
merged (SDPA pays the merge copy, our kernels and kitchen's sol_attn write merged storage directly).
Ratios are against the fastest SDPA backend of the same run. rel-L2 is measured on sampled heads and
rows against fp32 exact attention. The GPU command above takes about 3-5 minutes on an H200.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import platform
import statistics
import sys
import time
from dataclasses import dataclass
from typing import Callable

import torch
import torch.nn.functional as F  # noqa: E402

from bench import _attention_kitchen as kitchen_rows

PROFILES = {  # q/k projection coupling (RoPE locality) and logit gain
    "h3like": dict(align=0.8, gain=1.5),
    "diffuse": dict(align=0.5, gain=1.5),
    "peaked": dict(align=0.95, gain=2.0),
}
FRAME = (22, 40)  # latent rows x cols of one 704x1280 frame after VAE /16 and 2x2 patches


@dataclass(frozen=True)
class Row:
    method: str
    seq: int
    ms: float | None
    peak_mib: float | None
    rel_l2: float | None
    note: str = ""


@dataclass(frozen=True)
class Setup:
    device: torch.device
    dtype: torch.dtype
    heads: int
    head_dim: int
    chunk: int
    taus: tuple[float, ...]
    text: int
    profile: str
    repeats: int | None
    smoke: bool
    kitchen: bool = False
    kitchen_taus: tuple[float, ...] = ()
    kitchen_topks: tuple[float, ...] = ()


def parse_seq(text: str) -> list[int]:
    out = []
    for part in text.split(","):
        part = part.strip().lower()
        out.append(int(float(part[:-1]) * 1024) if part.endswith("k") else int(part))
    return out


def positions(seq: int, text: int) -> torch.Tensor:
    """[seq, 3] (t, y, x): text rows on the time axis, then video frames of FRAME rows."""
    hh, ww = FRAME
    frames = max(1, math.ceil((seq - text) / (hh * ww)))
    tt, yy, xx = torch.meshgrid(torch.arange(frames), torch.arange(hh), torch.arange(ww), indexing="ij")
    video = torch.stack([tt.reshape(-1) + text, yy.reshape(-1), xx.reshape(-1)], -1).float()
    words = torch.zeros(text, 3)
    words[:, 0] = torch.arange(text).float()
    return torch.cat([words, video], 0)[:seq]


def structured_qkv(s: Setup, seq: int, seed: int = 0):
    """Low-rank-plus-noise q/k/v per head, RMS-normed q/k with split-half RoPE on 3/4 of the head."""
    g = torch.Generator(device="cpu").manual_seed(seed)
    prof = PROFILES[s.profile]
    d, dev = s.head_dim, s.device
    pos = positions(seq, s.text).to(dev)
    freqs = (torch.randn(3, 16, generator=g) * torch.tensor([0.3, 0.2, 0.2])[:, None]).to(dev)
    feats = torch.cos(pos @ freqs + (torch.rand(16, generator=g) * 2 * math.pi).to(dev))
    rot = (3 * d // 4) // 6 * 6
    inv = (1.0 / (10000.0 ** (torch.arange(rot // 6).float() / (rot // 6)))).to(dev)
    ang = torch.cat([pos[:, a:a + 1] * inv for a in range(3)], -1)
    cos, sin = torch.cos(ang), torch.sin(ang)
    q, k, v = (torch.empty(1, s.heads, seq, d, dtype=s.dtype, device=dev) for _ in range(3))
    rank, align = 8, prof["align"]
    for h in range(s.heads):
        z = feats @ (torch.randn(16, rank, generator=g) / 4).to(dev)
        w_shared = torch.randn(rank, d, generator=g).to(dev)
        for i, dst in enumerate((q, k, v)):
            w = torch.randn(rank, d, generator=g).to(dev)
            if i < 2:
                w = align * w_shared + math.sqrt(1 - align * align) * w
            noise = torch.randn(seq, d, generator=g).to(dev) * 0.15 * math.sqrt(rank)
            x = z @ w + noise
            if i < 2:
                x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True)) * prof["gain"]
                a, b = x[:, :rot // 2], x[:, rot // 2:rot]
                x = torch.cat([a * cos - b * sin, a * sin + b * cos, x[:, rot:]], -1)
            dst[0, h] = x.to(s.dtype)
    return q, k, v


def exact_rows(q, k, v, heads: list[int], rows: torch.Tensor) -> torch.Tensor:
    """fp32 exact attention for the sampled heads and rows: [len(heads), len(rows), D]."""
    out = []
    for h in heads:
        kf, vf = k[0, h].float(), v[0, h].float()
        p = torch.softmax(q[0, h, rows].float() @ kf.T / math.sqrt(q.shape[-1]), dim=-1)
        out.append(p @ vf)
    return torch.stack(out)


def mass_concentration(q, k, heads: list[int], rows: torch.Tensor) -> float:
    """Mean number of keys holding 90% of a sampled row's attention mass."""
    counts = []
    for h in heads:
        p = torch.softmax(q[0, h, rows[:64]].float() @ k[0, h].float().T / math.sqrt(q.shape[-1]), dim=-1)
        counts.append((p.sort(-1, descending=True).values.cumsum(-1) < 0.9).sum(-1).float().mean())
    return float(torch.stack(counts).mean())


def sdpa_backends(device: torch.device) -> list[tuple[str, object]]:
    if device.type != "cuda":
        return [("sdpa", None)]
    from torch.nn.attention import SDPBackend
    return [("sdpa flash", SDPBackend.FLASH_ATTENTION), ("sdpa cudnn", SDPBackend.CUDNN_ATTENTION)]


def sdpa_call(backend, q, k, v):
    if backend is None:
        return F.scaled_dot_product_attention(q, k, v)
    from torch.nn.attention import sdpa_kernel
    with sdpa_kernel(backend):
        return F.scaled_dot_product_attention(q, k, v)


def sdpa_whole(backend, q, k, v):
    b, h, s, d = q.shape
    merged = sdpa_call(backend, q, k, v).transpose(1, 2).reshape(b, s, h * d)
    return merged.view(b, s, h, d).transpose(1, 2)


def sdpa_chunked(backend, q, k, v, chunk: int):
    b, h, s, d = q.shape
    out = torch.empty(b, s, h, d, dtype=q.dtype, device=q.device)
    for r0 in range(0, s, chunk):
        out[:, r0:r0 + chunk] = sdpa_call(backend, q[:, :, r0:r0 + chunk], k, v).transpose(1, 2)
    return out.transpose(1, 2)


def methods(s: Setup, q, k, v) -> list[tuple[str, Callable[[], torch.Tensor], str]]:
    """(name, call, note) for every method this device can run."""
    out = []
    for name, backend in sdpa_backends(s.device):
        out.append((name, lambda b=backend: sdpa_whole(b, q, k, v), "whole call + head merge"))
        out.append((f"{name}, chunks of {s.chunk}", lambda b=backend: sdpa_chunked(b, q, k, v, s.chunk),
                    "query-streamed"))
    from longmedia.kernels.int8_kv import kv_bytes, quantize_kv_int8
    k8, ks = quantize_kv_int8(k)
    v8, vs = quantize_kv_int8(v)
    if s.smoke:
        from longmedia.kernels.qstream_reference import qstream_attention
        from longmedia.kernels.sol_reference import sol_attention, sol_key_summaries
        kind = "torch reference"
    else:
        from longmedia.kernels.qstream_attention import qstream_attention
        from longmedia.kernels.sol_attention import sol_attention, sol_key_summaries
        kind = "triton"
    out.append((f"{kind} exact, {str(s.dtype)[6:]} K/V", lambda: qstream_attention(q, k, v), ""))
    shrink = kv_bytes(k8, ks) / kv_bytes(k)
    out.append((f"{kind} exact, int8 K/V", lambda: qstream_attention(q, k8, v8, k_scale=ks, v_scale=vs),
                f"K/V bytes x{shrink:.3f} (quantised outside the timing)"))
    sinks = ((0, s.text),) if s.text else ()
    for tau in s.taus:
        def sol(tau=tau):
            summ = sol_key_summaries(k, v, block=64, dtype=q.dtype)
            return sol_attention(q, k, v, tau=tau, sink_ranges=sinks, exact_query_ranges=sinks, summaries=summ,
                                 return_stats=True)
        out.append((f"{kind} sol tau={tau}", sol, "incl. key summaries"))
    if s.kitchen:
        out += kitchen_rows.methods(s.device, q, k, v, s.text, s.kitchen_taus, s.kitchen_topks)
    return out


def timed(s: Setup, fn: Callable[[], torch.Tensor], repeats: int) -> tuple[torch.Tensor, list[float], float | None]:
    """(output of the warm-up call, times in ms, peak extra MiB of the warm-up call)."""
    peak = None
    if s.device.type == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
        result = fn()
        torch.cuda.synchronize()
        peak = (torch.cuda.max_memory_allocated() - base) / 2**20
    else:
        result = fn()
    times = []
    for _ in range(repeats):
        if s.device.type == "cuda":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            torch.cuda.synchronize()
            times.append(start.elapsed_time(end))
        else:
            t0 = time.perf_counter()
            fn()
            times.append((time.perf_counter() - t0) * 1e3)
    return result, times, peak


def run_size(s: Setup, seq: int, done: Callable[[Row], None]) -> tuple[list[Row], str]:
    q, k, v = structured_qkv(s, seq)
    g = torch.Generator().manual_seed(seq)
    rows = torch.randperm(seq, generator=g)[:min(seq, 512)].sort().values.to(s.device)
    heads = sorted({0, s.heads // 3, 2 * s.heads // 3, s.heads - 1})
    exact = exact_rows(q, k, v, heads, rows)
    info = f"S={seq}: keys holding 90% of a row's mass ~{mass_concentration(q, k, heads, rows):.0f}"
    repeats = s.repeats or (5 if seq <= 32768 else 3 if seq <= 65536 else 2)
    out = []
    for name, fn, note in methods(s, q, k, v):
        try:
            result, times, peak = timed(s, fn, repeats)
        # RuntimeError: an SDPA backend that this build or GPU does not offer; ValueError: kitchen refusing inputs
        except (RuntimeError, ValueError) as e:
            out.append(Row(name, seq, None, None, None, f"n/a: {str(e).splitlines()[0][:80]}"))
            done(out[-1])
            continue
        if isinstance(result, tuple):  # Sol: (out, SolStats)
            note = f"exact-block density {result[1].density:.3f}, {note}"
            result = result[0]
        got = result[0][heads][:, rows].float()
        err = float((got - exact).norm() / exact.norm())
        out.append(Row(name, seq, statistics.median(times), peak, err, note))
        done(out[-1])
        del result
    return out, info


def targets(rows: list[Row]) -> list[str]:
    """The ratios the design targets name, per size."""
    lines = []
    for seq in sorted({r.seq for r in rows}):
        ok = {r.method: r for r in rows if r.seq == seq and r.ms is not None}
        whole = [r for n, r in ok.items() if n.startswith("sdpa") and "chunks" not in n]
        chunked = [r for n, r in ok.items() if n.startswith("sdpa") and "chunks" in n]
        if not whole:
            continue
        best = min(whole, key=lambda r: r.ms)
        parts = [f"S={seq}: fastest SDPA = {best.method}"]
        if chunked:
            parts.append(f"best streamed SDPA / best whole SDPA = {best.ms / min(r.ms for r in chunked):.3f}x")
        flash = ok.get("sdpa flash")
        for n, r in ok.items():
            if "exact" in n and flash is not None:
                parts.append(f"{n} / sdpa flash = {flash.ms / r.ms:.3f}x")
            if "sol tau=1.0" in n:
                parts.append(f"{n}: {best.ms / r.ms:.2f}x fastest SDPA at rel-L2 {r.rel_l2:.3f}")
        lines.append("; ".join(parts))
    return lines


def table(rows: list[Row], s: Setup) -> str:
    lines = ["| method | S | ms | TFLOP/s | x fastest SDPA | peak extra MiB | rel-L2 | note |",
             "|---|---:|---:|---:|---:|---:|---:|---|"]
    for seq in sorted({r.seq for r in rows}):
        group = [r for r in rows if r.seq == seq]
        whole = [r.ms for r in group if r.method.startswith("sdpa") and "chunks" not in r.method and r.ms]
        fastest = min(whole) if whole else None
        flops = 4.0 * seq * seq * s.heads * s.head_dim
        for r in group:
            if r.ms is None:
                lines.append(f"| {r.method} | {seq} | - | - | - | - | - | {r.note} |")
                continue
            ratio = f"{fastest / r.ms:.2f}x" if fastest else "-"
            peak = f"{r.peak_mib:.0f}" if r.peak_mib is not None else "-"
            lines.append(f"| {r.method} | {seq} | {r.ms:.2f} | {flops / r.ms / 1e9:.3g} | {ratio} | {peak} | "
                         f"{r.rel_l2:.2e} | {r.note} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seq", default="8k,32k,64k,104k,150k", help="comma list, k = 1024 (e.g. 8k,104k)")
    p.add_argument("--heads", type=int, default=56)
    p.add_argument("--head-dim", type=int, default=128)
    p.add_argument("--chunk", type=int, default=8192, help="query rows per streamed SDPA call")
    p.add_argument("--taus", default="0.0,0.2,0.4,0.6,0.8,1.0,1.3",
                   help="our Sol's taus (also the sweep the matched-accuracy lines pick from)")
    p.add_argument("--kitchen", choices=("auto", "on", "off"), default="auto",
                   help="comfy-kitchen rows: auto = when usable, on = required, off = none")
    p.add_argument("--kitchen-taus", default="0.5,1.0,1.5", help="kitchen sol_attn thresholds")
    p.add_argument("--kitchen-topk", default="0.1,0.2,0.3", help="kitchen sol_attn SLA top-k ratios")
    p.add_argument("--json", default=None, help="JSON rows file (default $OUT/attention_rows.jsonl when $OUT is set)")
    p.add_argument("--text", type=int, default=512, help="leading text rows (Sol sink and exact queries)")
    p.add_argument("--profile", choices=sorted(PROFILES), default="h3like")
    p.add_argument("--repeats", type=int, default=None, help="timed repeats (default 5 / 3 / 2 by size)")
    p.add_argument("--smoke", action="store_true", help="tiny CPU run of the torch references")
    p.add_argument("--out", default=None, help="also write the markdown table here")
    a = p.parse_args(argv)
    floats = lambda text: tuple(float(t) for t in text.split(",") if t.strip())  # noqa: E731
    if a.smoke:
        setup = Setup(torch.device("cpu"), torch.float32, 2, 128, 128, floats(a.taus), 16, a.profile, a.repeats or 2,
                      True)
        seqs = [320]
    else:
        if not torch.cuda.is_available():
            print("no CUDA device: run with --smoke for the CPU check", file=sys.stderr)
            return 2
        setup = Setup(torch.device("cuda"), torch.bfloat16, a.heads, a.head_dim, a.chunk, floats(a.taus), a.text,
                      a.profile, a.repeats, False)
        seqs = parse_seq(a.seq)
    usable, why = (False, "--kitchen off") if a.kitchen == "off" else kitchen_rows.status(setup.device)
    if a.kitchen == "on" and not usable:
        print(f"--kitchen on, but kitchen's kernels cannot run here: {why}", file=sys.stderr)
        return 2
    print(f"kitchen rows: {why}" if usable else f"SKIPPED kitchen rows: {why}", flush=True)
    setup = dataclasses.replace(setup, kitchen=usable, kitchen_taus=floats(a.kitchen_taus),
                                kitchen_topks=floats(a.kitchen_topk))
    device = torch.cuda.get_device_name() if setup.device.type == "cuda" else platform.processor() or "cpu"
    header = [f"# Attention benchmark on {device}", "",
              f"command: `python {' '.join(sys.argv)}`  ", f"torch {torch.__version__}, heads {setup.heads}, "
              f"head_dim {setup.head_dim}, {setup.dtype}, profile {setup.profile} {PROFILES[setup.profile]}, "
              f"text rows {setup.text}", ""]
    sink = kitchen_rows.JsonRows(a.json, {"device": device, "command": " ".join(sys.argv), "torch": torch.__version__,
                                          "kitchen": why if usable else f"skipped: {why}"})

    def done(row: Row) -> None:
        ms = "-" if row.ms is None else f"{row.ms:.2f} ms"
        err = "-" if row.rel_l2 is None else f"rel-L2 {row.rel_l2:.3g}"
        peak = "-" if row.peak_mib is None else f"{row.peak_mib / 1024:.2f} GiB extra"
        print(f"  S={row.seq} {row.method}: {ms}, {err}, {peak} {row.note}", flush=True)
        sink.write(row)

    rows, infos = [], []
    if not setup.smoke:  # autotune once on a small problem (the tuning keys ignore S), untimed
        q, k, v = structured_qkv(setup, min(8192, min(seqs)))
        for name, fn, _ in methods(setup, q, k, v):
            if not name.startswith("sdpa"):
                fn()
        del q, k, v
        torch.cuda.synchronize()
    for seq in seqs:
        r, info = run_size(setup, seq, done)
        rows += r
        infos.append(info)
        print(info, flush=True)
    matched = kitchen_rows.matched_accuracy(rows) if setup.kitchen else [f"kitchen rows skipped: {why}"]
    text = "\n".join(header + [table(rows, setup), ""] + [f"- {i}" for i in infos + targets(rows)]
                     + ["", "Matched accuracy (kitchen vs the fastest of ours at rel-L2 <= kitchen's):", ""]
                     + [f"- {m}" for m in matched]) + "\n"
    print(text)
    if a.out:
        import pathlib
        path = pathlib.Path(a.out)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
