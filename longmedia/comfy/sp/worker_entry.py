"""One sequence-parallel worker rank started by hand, for a multi-host launch (torch's env:// rendezvous).

On each other host (ComfyUI and this pack installed there, the same checkpoint at the same path):

    PYTHONPATH=/path/to/ComfyUI:/path/to/ComfyUI/custom_nodes/LongMedia \\
    MASTER_ADDR=<rank 0's host> MASTER_PORT=29500 WORLD_SIZE=<ranks> RANK=<this rank> \\
    python -m longmedia.comfy.sp.worker_entry --device cuda:0

and ComfyUI (rank 0) started with LONGMEDIA_SP_INIT=env:// and the same MASTER_ADDR, MASTER_PORT, WORLD_SIZE
(RANK=0); the Sampler's devices input then names rank 0's device and one entry per other rank. The worker serves
one Sampler run (one pass) and exits, exactly as a spawned worker does (`sp.ranks`); start it again per run.
"""

from __future__ import annotations

import argparse
import os
import sys

import torch

from .ranks import START_TIMEOUT_S, worker_main


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m longmedia.comfy.sp.worker_entry", description=__doc__.split("\n")[0])
    parser.add_argument("--device", default="cuda:0" if torch.cuda.is_available() else "cpu",
                        help="this rank's device (cuda:N or cpu)")
    parser.add_argument("--timeout-s", type=float, default=START_TIMEOUT_S, help="rendezvous and collective timeout")
    args = parser.parse_args(argv)
    missing = [k for k in ("MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "RANK") if not os.environ.get(k)]
    if missing:
        print(f"worker_entry: set {', '.join(missing)} (torch's env:// rendezvous)", file=sys.stderr)
        return 2
    device = torch.device(args.device)
    worker_main(int(os.environ["RANK"]), "env://", int(os.environ["WORLD_SIZE"]),
                "nccl" if device.type == "cuda" else "gloo", args.timeout_s, str(device), None)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
