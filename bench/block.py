"""One full-size H3 block (random bf16 weights): stock vs streamed peak activation bytes and time.

    python -m bench.block                      # H200: S in 16k, 64k, 104k, 150k
    python -m bench.block --smoke              # tiny dims on CPU, proves the script runs
    python -m bench.block --seq 104466 --sdpa cudnn --sol-tau 1.0   # also the streamed paths with Sol attention

Peak activation = max_memory_allocated during the call - memory allocated before it + the hidden
state x (the formula counts x). Stock is the clean-room H3 block forward (ComfyUI's math); both
paths use the same attention function (PyTorch SDPA, backend chosen by --sdpa). With --sol-tau the
streamed configs run once more with Sol attention (the dispatcher's `sol` backend, its torch reference
under --smoke; the first 512 rows as sinks and exact query rows); their rel err is Sol's approximation
on these random-weight activations, and their peak includes Sol's workspace (the "predicted" column
does not).
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import sys
from pathlib import Path

import torch

from bench._common import device_name, emit, median, peak_extra_bytes, timed
from longmedia.execution.chunks import ChunkSizes  # noqa: E402
from longmedia.execution.memory import predicted_peak_bytes, stock_peak_bytes  # noqa: E402
from longmedia.execution.streamed_block import run_block  # noqa: E402
from longmedia.h3.dims import H3_FULL, H3Dims  # noqa: E402
from longmedia.testing.reference_block import ReferenceBlock, make_block_inputs  # noqa: E402

CONFIGS = {
    "streamed 4k": ChunkSizes(4096, 0, 4096),
    "grouped 28h": ChunkSizes(4096, 0, 4096, 28),
    "grouped 14h": ChunkSizes(4096, 0, 4096, 14),
    "grouped 8h": ChunkSizes(4096, 2048, 2048, 8),
}


def sdpa_context(name: str):
    if name == "default":
        return contextlib.nullcontext()
    from torch.nn.attention import SDPBackend, sdpa_kernel

    return sdpa_kernel({"cudnn": SDPBackend.CUDNN_ATTENTION, "flash": SDPBackend.FLASH_ATTENTION}[name])


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--seq", type=int, nargs="*", default=[16384, 65536, 104466, 150000])
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--sdpa", choices=["default", "cudnn", "flash"], default="default")
    p.add_argument("--smoke", action="store_true", help="tiny dims on CPU")
    p.add_argument("--sol-tau", type=float, default=None, help="also run the streamed configs with Sol at this tau")
    p.add_argument("--out", type=Path)
    a = p.parse_args(argv)
    device = torch.device("cpu" if a.smoke or not torch.cuda.is_available() else "cuda")
    dims = H3Dims(hidden=128, heads=4, head_dim=32, ffn=256, rope_inv_freq_len=4, time_embed_dim=64) if a.smoke else H3_FULL
    seqs = [300, 1000] if a.smoke else a.seq
    dtype = torch.float32 if device.type == "cpu" else torch.bfloat16
    configs = {k: ChunkSizes(min(c.qkv_chunk_tokens, 128) if a.smoke else c.qkv_chunk_tokens, c.out_proj_chunk_tokens,
                             min(c.mlp_chunk_tokens, 128) if a.smoke else c.mlp_chunk_tokens,
                             min(c.heads_per_group, 2) if a.smoke else c.heads_per_group) for k, c in CONFIGS.items()}
    runs = {name: (c, None) for name, c in configs.items()}
    if a.sol_tau is not None:
        from longmedia.attention.backends import default_registry
        from longmedia.attention.registry import BuildContext
        text = ((0, 16 if a.smoke else 512),)
        sol = default_registry().build("sol_reference" if a.smoke else "sol",
                                       BuildContext(tau=a.sol_tau, sink_ranges=text, exact_query_ranges=text))
        runs.update({f"{name} + Sol tau={a.sol_tau:g}": (c, sol) for name, c in configs.items()
                     if name in ("streamed 4k", "grouped 8h")})
    g = torch.Generator().manual_seed(0)
    block = ReferenceBlock(dims, dtype=torch.float32).randomize_(g).to(device=device, dtype=dtype)
    eb = torch.finfo(dtype).bits // 8
    lines = [f"# H3 block: stock vs streamed ({device_name(device)}, {dtype}, sdpa={a.sdpa}, "
             f"{datetime.date.today()}; `python -m bench.block {' '.join(argv or sys.argv[1:])}`)", "",
             "| S | path | chunks (qkv/out/mlp/heads) | peak act GiB | predicted GiB | peak / stock | ms | time / stock | rel err |",
             "|---|---|---|---|---|---|---|---|---|"]
    with sdpa_context(a.sdpa):
        for s in seqs:
            x, t_emb, seg, rope = make_block_inputs(dims, s, dtype=dtype, device=device, generator=g)
            xb = x.numel() * eb
            work = x.clone()
            def stock_fn(work=work, x=x, t_emb=t_emb, seg=seg, rope=rope):
                return block(work.copy_(x), t_emb, seg, rope)
            try:
                ref = stock_fn().clone()
                stock_peak = peak_extra_bytes(stock_fn, device) + xb
                stock_t = median(timed(stock_fn, device, a.repeats))
                lines.append(f"| {s} | stock | - | {stock_peak / 2**30:.2f} | {stock_peak_bytes(s, dims, eb) / 2**30:.2f} | "
                             f"1.00 | {stock_t * 1e3:.0f} | 1.00 | 0 |")
            except RuntimeError as e:  # named: SDPA on H3's fused strided views can fail past 2^31 elements
                ref, stock_peak, stock_t = None, 0, float("nan")
                lines.append(f"| {s} | stock | - | failed: {str(e).splitlines()[0][:80]} | | | | | |")
                if device.type == "cuda":
                    torch.cuda.empty_cache()
            for name, (c, attention) in runs.items():
                def fn(work=work, x=x, t_emb=t_emb, seg=seg, rope=rope, c=c, attention=attention):
                    return run_block(block, work.copy_(x), t_emb, seg, rope, chunks=c, attention=attention)
                out = fn().clone()
                err = ((out.float() - ref.float()).norm() / ref.float().norm()).item() if ref is not None else float("nan")
                peak = peak_extra_bytes(fn, device) + xb
                t = median(timed(fn, device, a.repeats))
                pred = predicted_peak_bytes(s, dims, c, eb)
                lines.append(f"| {s} | {name} | {c.qkv_chunk_tokens}/{c.out_proj_chunk_tokens}/{c.mlp_chunk_tokens}/"
                             f"{c.heads_per_group or dims.heads} | {peak / 2**30:.2f} | {pred / 2**30:.2f} | "
                             f"{peak / stock_peak if stock_peak else 0:.3f} | {t * 1e3:.0f} | {t / stock_t:.3f} | {err:.1e} |")
                del out
            del x, work, ref
            if device.type == "cuda":
                torch.cuda.empty_cache()
            print(*lines[-1 - len(runs):], sep="\n", flush=True)
    return emit(lines, a.out)


if __name__ == "__main__":
    raise SystemExit(main())
