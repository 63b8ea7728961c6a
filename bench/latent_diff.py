"""How far saved video latents sit from a reference latent (`bench/cards/ (python -m bench.cards) --latents`).

    python3 bench/latent_diff.py REF.pt OTHER.pt [OTHER.pt ...] [--tol 2e-2]
    python3 bench/latent_diff.py --smoke    # random latents on CPU: a copy, a bf16 round trip, one NaN

Prints one row per latent: finite, bit-equal to the reference, max |diff| and the relative error
||x - ref|| / ||ref|| (fp64). Exit code 1 when a latent is not finite or its relative error passes --tol
(the bf16 tolerance by default), so a device script can gate on it.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import torch


def diff_row(ref: torch.Tensor, x: torch.Tensor) -> dict:
    """The comparison of latent `x` with `ref` (same shape), in fp64."""
    if x.shape != ref.shape:
        raise ValueError(f"latent shape {tuple(x.shape)} differs from the reference's {tuple(ref.shape)}")
    r, y = ref.double(), x.double()
    finite = bool(torch.isfinite(y).all())
    d = y - r
    return {"finite": finite, "equal": bool(torch.equal(x, ref)),
            "max_abs": float(d.abs().max()) if finite else float("nan"),
            "rel": float(d.norm() / r.norm()) if finite else float("nan")}


def _smoke(tol: float) -> int:
    """The table on random latents: a copy (equal), a bf16 round trip (within tol), one NaN (fails, as it must)."""
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp)
        ref = torch.randn(24, 6, 8, 12, generator=torch.Generator().manual_seed(0))
        nan = ref.clone()
        nan[3, 2, 1, 0] = float("nan")
        for name, x in (("ref", ref), ("copy", ref.clone()), ("bf16", ref.bfloat16().float()), ("nan", nan)):
            torch.save(x, d / f"{name}.pt")
        rc = table(d / "ref.pt", [d / "copy.pt", d / "bf16.pt", d / "nan.pt"], tol)
    return 0 if rc == 1 else 1  # the NaN row must fail the table


def table(ref_path: Path, paths: list[Path], tol: float) -> int:
    """Print the table; 1 when a latent is not finite or past `tol`."""
    ref = torch.load(ref_path)
    print(f"reference {ref_path.name}: shape {tuple(ref.shape)}, std {float(ref.std()):.4f}")
    print("| latent | finite | bit-equal | max abs diff | rel error | within tol |")
    print("|---|---|---|---|---|---|")
    failed = False
    for path in paths:
        if not path.is_file():  # a row that did not run (budget, OOM): said, and the table still fails
            print(f"| {path.name} | missing | - | - | - | False |")
            failed = True
            continue
        row = diff_row(ref, torch.load(path))
        ok = row["finite"] and row["rel"] <= tol
        failed |= not ok
        print(f"| {path.name} | {row['finite']} | {row['equal']} | {row['max_abs']:.3g} | {row['rel']:.3g} | {ok} |")
    return 1 if failed else 0


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("ref", type=Path, nargs="?")
    p.add_argument("others", type=Path, nargs="*")
    p.add_argument("--tol", type=float, default=2e-2, help="largest relative error that passes (default: bf16's 2e-2)")
    p.add_argument("--smoke", action="store_true", help="random latents on CPU")
    a = p.parse_args(argv)
    if a.smoke:
        return _smoke(a.tol)
    if a.ref is None or not a.others:
        p.error("give a reference latent and at least one latent to compare")
    return table(a.ref, a.others, a.tol)


if __name__ == "__main__":
    sys.exit(main())
