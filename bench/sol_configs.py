"""Sol launch-config sweep on one size: every HOPPER_SOL config at tau = 1 and at tau = 100 (the routing
floor: only the diagonal band and sinks stay exact), the autotuned pick, and the fastest SDPA of the run.

    python -m bench.sol_configs --seq 104k          # GPU
    python -m bench.sol_configs --smoke             # CPU: one config under the Triton interpreter, proves it runs

Inputs are bench/attention.py's structured "h3like" q/k/v (56 heads x 128, bf16, 512 text rows as
sinks). Times are CUDA-event medians and include the key summaries, like bench/attention.py.
"""

from __future__ import annotations

import argparse
import os

import torch

from bench._common import median, timed
from bench.attention import PROFILES, Setup, exact_rows, parse_seq, sdpa_backends, sdpa_whole, structured_qkv


def median_ms(fn, repeats: int, device: torch.device) -> float:
    fn()  # warm-up (and autotune)
    return median(timed(fn, device, repeats)) * 1e3


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seq", default="104k")
    p.add_argument("--heads", type=int, default=56)
    p.add_argument("--text", type=int, default=512)
    p.add_argument("--profile", choices=sorted(PROFILES), default="h3like")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--grid", action="store_true",
                   help="sweep a wider grid (block_m 64, warps 4/8, stages 1-3, group 32-128) instead of HOPPER_SOL")
    p.add_argument("--configs", default="",
                   help="comma-separated block_m/block_n/warps/stages/group[/tma] configs to sweep instead, e.g. "
                        "64/64/4/3/64 or 64/64/4/3/64/0 (tma 0: pointer loads; default 1: TMA where allowed)")
    p.add_argument("--taus", default="1,100", help="comma-separated taus (100 = the routing floor)")
    p.add_argument("--breakdown", action="store_true",
                   help="also time the key summaries and the torch routing mask on their own (tau = 1)")
    p.add_argument("--smoke", action="store_true",
                   help="tiny CPU run (fp32, 2 heads, 384 tokens, one config) under the Triton interpreter")
    a = p.parse_args(argv)
    if a.smoke:
        os.environ["TRITON_INTERPRET"] = "1"  # before Triton compiles anything: the kernels run on CPU tensors
        a.seq, a.heads, a.text, a.repeats, a.breakdown = "384", 2, 64, 1, False
    elif not torch.cuda.is_available():
        print("sol_configs.py needs a CUDA GPU (or --smoke)")
        return 2
    from longmedia.kernels.launch import HOPPER_SOL, INTERPRETER_SOL, LaunchConfig
    from longmedia.kernels.sol_attention import autotuned_config, sol_attention, sol_key_summaries

    dev = torch.device("cpu" if a.smoke else "cuda:0")
    seq = parse_seq(a.seq)[0]
    dtype = torch.float32 if a.smoke else torch.bfloat16
    s = Setup(dev, dtype, a.heads, 128, 8192, (1.0,), a.text, a.profile, a.repeats, a.smoke)
    q, k, v = structured_qkv(s, seq)
    sinks = ((0, a.text),) if a.text else ()
    flops = 4.0 * seq * seq * a.heads * 128

    def sol(tau: float, config=None):
        summ = sol_key_summaries(k, v, block=64, dtype=q.dtype)
        return sol_attention(q, k, v, tau=tau, sink_ranges=sinks, exact_query_ranges=sinks, summaries=summ,
                             config=config, return_stats=True)

    sdpa = {name: median_ms(lambda b=b: sdpa_whole(b, q, k, v), a.repeats, dev) for name, b in sdpa_backends(dev)}
    best_name = min(sdpa, key=sdpa.get)
    best = sdpa[best_name]
    g = torch.Generator().manual_seed(seq)
    rows = torch.randperm(seq, generator=g)[:512].sort().values.to(dev)
    heads = sorted({0, a.heads // 3, 2 * a.heads // 3, a.heads - 1})
    exact = exact_rows(q, k, v, heads, rows)
    device_name = torch.cuda.get_device_name(dev) if dev.type == "cuda" else "CPU (Triton interpreter)"
    print(f"torch {torch.__version__}, {device_name}, S={seq}, heads {a.heads}, "
          f"profile {a.profile}; " + ", ".join(f"{n} {ms:.1f} ms" for n, ms in sdpa.items()))
    print("\n| config (block_m/block_n/warps/stages/group) | tau | ms | x fastest SDPA | TFLOP/s equiv | density | rel-L2 |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    grid = [LaunchConfig(block_m=64, block_n=64, num_warps=w, num_stages=st, group=g)
            for w in (4, 8) for st in (1, 2, 3) for g in (32, 64, 128)]
    fields = ("block_m", "block_n", "num_warps", "num_stages", "group", "tma")
    chosen = ([LaunchConfig(**{f: (bool(x) if f == "tma" else x) for f, x in zip(fields, map(int, c.split("/")))})
               for c in a.configs.split(",")] if a.configs else grid if a.grid else HOPPER_SOL)
    if a.smoke:
        chosen = [INTERPRETER_SOL]
    configs = [(f"{c.block_m}/{c.block_n}/{c.num_warps}/{c.num_stages}/{c.group}{'' if c.tma else ' ptr'}", c)
               for c in chosen]
    if not a.smoke:  # the autotuner times configs on the GPU
        configs.append(("autotuned", None))
    for name, cfg in configs:
        for tau in map(float, a.taus.split(",")):
            out, stats = sol(tau, cfg)
            err = float((out[0][heads][:, rows].float() - exact).norm() / exact.norm())
            ms = median_ms(lambda: sol(tau, cfg), a.repeats, dev)
            print(f"| {name} | {tau:g} | {ms:.1f} | {best / ms:.2f}x | {flops / ms / 1e9:.0f} | "
                  f"{stats.density:.3f} | {err:.3f} |", flush=True)
            del out
    if a.breakdown:
        from longmedia.kernels.sol_routing import routing_mask
        summ = sol_key_summaries(k, v, block=64, dtype=q.dtype)
        parts = {"key summaries": lambda: sol_key_summaries(k, v, block=64, dtype=q.dtype),
                 "routing mask (torch, tau=1)": lambda: routing_mask(q, summ, 0, 1.0, 128 ** -0.5, sinks, sinks)}
        for name, fn in parts.items():
            print(f"breakdown: {name}: {median_ms(fn, a.repeats, dev):.2f} ms")
        torch.cuda.synchronize()
        torch.cuda.set_sync_debug_mode("error")  # any host sync inside a call now raises
        try:
            sol_attention(q[:, :, 4096:], k, v, tau=1.0, q_offset=4096, sink_ranges=sinks, exact_query_ranges=sinks,
                          summaries=summ)
            synced = "none"
        except RuntimeError as err:  # named: what set_sync_debug_mode("error") raises on a synchronising call
            synced = str(err).splitlines()[0]
        finally:
            torch.cuda.set_sync_debug_mode(0)
        print(f"breakdown: host syncs in one Sol call (query chunk at offset 4096): {synced}")
    picked = autotuned_config()
    print(f"\nautotune picked: {picked}; fastest SDPA: {best_name} {best:.1f} ms")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
