"""How good can Sol's routing get? rel-L2 of block-sparse attention with mean-key compensation on
bench/attention.py's structured inputs, for Sol's routing (mean query . mean key > mu + tau*sigma) and for
an error-aware ORACLE that knows each block's true compensation error and picks the same number of blocks.

    python -m bench.sol_bound 106496 h3like      # CPU, fp32, ~4 min (2 heads x 12 sampled query blocks)
    python -m bench.sol_bound --smoke            # 4096 tokens, 2 query blocks: proves the script runs

Compensation: c64 = Sol's one mean key per 64-key block; c16 = four 16-key centroids; "diag" adds the
log-normal second-moment correction 0.5 * sum_d q_d^2 var_d to each centroid's score. The oracle row is a
lower bound on what any router can reach with that compensation at that density.
"""
import argparse
import math

import torch

from bench.attention import Setup, structured_qkv

cli = argparse.ArgumentParser(description=__doc__.splitlines()[0])
cli.add_argument("seq", nargs="?", type=int, default=106496, help="sequence length (tokens)")
cli.add_argument("profile", nargs="?", default="h3like", help="bench/attention.py input profile")
cli.add_argument("--smoke", action="store_true", help="4096 tokens, 2 sampled query blocks")
args = cli.parse_args()
S = 4096 if args.smoke else args.seq
prof = args.profile
HEADS = [0, 1]
NQB = 2 if args.smoke else 12
B = 64
TEXT = 512
d = 128
sc = 1 / math.sqrt(d)
setup = Setup(torch.device("cpu"), torch.float32, max(HEADS) + 1, 128, 8192, (1.0,), TEXT, prof, None, False)
q, k, v = structured_qkv(setup, S)
nk = S // B
g = torch.Generator().manual_seed(1)
qblocks = sorted(torch.randperm(nk - TEXT // B, generator=g)[:NQB].add(TEXT // B).tolist())
sink = torch.zeros(nk, dtype=torch.bool)
sink[: TEXT // B] = True
def summaries(kh, vh, sub):
    m = B // sub
    kk = kh.view(nk * m, sub, d)
    vv = vh.view(nk * m, sub, d)
    return kk.mean(1), vv.sum(1), kk.var(1, unbiased=False)
res = {}
for h in HEADS:
    kh, vh = k[0, h], v[0, h]
    summ = {sub: summaries(kh, vh, sub) for sub in (64, 16)}
    kc64 = summ[64][0]
    for qb in qblocks:
        rows = q[0, h, qb * B:(qb + 1) * B]
        s = rows @ kh.T * sc
        mx0 = s.amax(-1, keepdim=True)
        pe_all = torch.exp(s - mx0)
        den_ex = pe_all.sum(-1, keepdim=True)
        ex = (pe_all @ vh) / den_ex
        diag = (torch.arange(nk) - qb).abs() <= 1
        forced = diag | sink
        p = rows.mean(0) @ kc64.T * sc
        mu, sd = p.mean(), p.std(unbiased=False)
        # per-block exact numerator/denominator contributions
        pe3 = pe_all.view(B, nk, B)
        Nex = torch.einsum("rjk,jkd->rjd", pe3, vh.view(nk, B, d))
        Dex = pe3.sum(-1)
        comps = {}
        for comp in ("c64", "c16", "c16diag"):
            sub = int(comp[1:3])
            m = B // sub
            kc, vs, var = summ[sub]
            sa = rows @ kc.T * sc
            if comp.endswith("diag"):
                sa = sa + 0.5 * sc * sc * (rows * rows) @ var.T
            pa = torch.exp(sa - mx0).view(B, nk, m)
            Nc = torch.einsum("rjm,jmd->rjd", pa, vs.view(nk, m, d))
            Dc = pa.sum(-1) * sub
            comps[comp] = (Nc, Dc)
        for tau in (0.6, 0.8, 1.0, 1.3):
            rule = (p > mu + tau * sd) | forced
            nsel = int(rule.sum())
            for comp, (Nc, Dc) in comps.items():
                err = ((Nex - Nc) - ex[:, None, :] * (Dex - Dc)[..., None]) / den_ex[..., None]
                eblk = err.pow(2).sum((0, 2)).masked_fill(forced, float("inf"))
                orc = torch.zeros(nk, dtype=torch.bool)
                orc[eblk.topk(nsel).indices] = True
                for name, sel in (("mean", rule), ("oracle_err", orc)):
                    sm = sel[None, :, None]
                    num = torch.where(sm, Nex, Nc).sum(1)
                    den = torch.where(sel[None], Dex, Dc).sum(1, keepdim=True)
                    o = num / den
                    key = (name, comp, tau)
                    a, b2, c = res.get(key, (0, 0, 0))
                    res[key] = (a + (o - ex).pow(2).sum().item(), b2 + ex.pow(2).sum().item(), c + sel.float().mean().item())
n = len(HEADS) * NQB
print(f"S={S} profile={prof}")
for key, (a, b2, c) in sorted(res.items()):
    print(f"{key[0]:10s} {key[1]:8s} tau={key[2]:.1f} density={c/n:.3f} relL2={math.sqrt(a/b2):.4f}")
