"""Is flash-attn-4 safe to let auto pick on this machine? Run after tools/gpu/flash4.sh reports "installed", from
the repo root as a module (`python3 -m tools.gpu.flash4_gate`: the root is then on the path, LongMedia with it).

Builds LongMedia's own `flash4` backend (longmedia/attention/flash4.py, through the default registry) and runs it on
H3-shaped random bf16 q/k/v (56 heads x 128, strided views of one fused buffer, as the model holds them) at a few
lengths, against torch SDPA in float32. Passes when its error is within 3x bf16 cuDNN SDPA's own error on the same
inputs. Exit 0: pass. Exit 1: it failed or is wrong; a caller that must not risk it removes the package
(tools/gpu/README.md: `rm -rf "$LONGMEDIA_GPU_SITE/flash_attn"`), and auto then never sees it.
"""

from __future__ import annotations

import sys
import time

import torch
import torch.nn.functional as F

from longmedia.attention.backends import default_registry
from longmedia.attention.registry import BuildContext

HEADS, HEAD_DIM = 56, 128


def _qkv(rows: int, seed: int):
    g = torch.Generator(device="cuda").manual_seed(seed)
    fused = torch.randn(rows, 3 * HEADS * HEAD_DIM, generator=g, device="cuda", dtype=torch.bfloat16)
    return tuple(t.view(1, rows, HEADS, HEAD_DIM).transpose(1, 2) for t in fused.split(HEADS * HEAD_DIM, dim=-1))


def _rel(out: torch.Tensor, ref: torch.Tensor) -> float:
    return float((out.float() - ref).norm() / ref.norm())


def main() -> int:
    if not torch.cuda.is_available():
        print("flash4 gate: no CUDA device")
        return 1
    fn = default_registry().build("flash4", BuildContext())
    ok = True
    # (key rows, query rows): whole passes, and a query chunk against all keys as low_vram's streamed path calls it
    for rows, query_rows in ((1000, 1000), (4096, 4096), (17000, 17000), (17000, 3000)):
        q, k, v = _qkv(rows, rows)
        q = q[:, :, rows - query_rows:]
        t0 = time.perf_counter()
        out = fn(q, k, v, q_offset=rows - query_rows)
        torch.cuda.synchronize()
        first = time.perf_counter() - t0
        ref = F.scaled_dot_product_attention(q.float(), k.float(), v.float())
        ref = ref.transpose(1, 2).reshape(1, query_rows, HEADS * HEAD_DIM)
        base = F.scaled_dot_product_attention(q, k, v).transpose(1, 2).reshape(1, query_rows, HEADS * HEAD_DIM)
        err, base_err = _rel(out, ref), _rel(base, ref)
        passed = tuple(out.shape) == tuple(ref.shape) and err <= 3 * base_err + 1e-6
        ok &= passed
        print(f"flash4 gate: {query_rows} query rows of {rows}: rel {err:.2e} (bf16 SDPA {base_err:.2e}), "
              f"first call {first:.2f} s: {'pass' if passed else 'FAIL'}", flush=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
