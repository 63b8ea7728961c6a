"""Print which host features LongMedia detects on a ComfyUI (paste it into a bug report).

    python -m tools.host_features --comfyui /path/to/ComfyUI [--json]       # from the repository root

Imports that ComfyUI's modules in this Python (run it with ComfyUI's own environment); nothing is started. Where
`comfy` does not import from that checkout, the tool runs itself again in a child with the checkout on PYTHONPATH
(`bench.cards.comfy_process.rerun_with_comfy`: ComfyUI goes on the import path in one place).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

CHILD_MARK = "LONGMEDIA_HOST_FEATURES_CHILD"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--comfyui", required=True, type=Path, help="the ComfyUI root (holds comfy/ and main.py)")
    parser.add_argument("--json", action="store_true", help="print JSON instead of lines")
    parser.add_argument("--cpu", action="store_true", help="import ComfyUI with --cpu (no device is touched anyway)")
    args = parser.parse_args(argv)
    root = args.comfyui.resolve()
    if not (root / "comfy").is_dir():
        parser.error(f"{root} is not a ComfyUI root (no comfy/ folder)")
    from bench.cards.comfy_process import rerun_with_comfy

    code = rerun_with_comfy("tools.host_features", str(root), argv, CHILD_MARK)
    if code is not None:
        return code
    from comfy.cli_args import args as comfy_args

    comfy_args.cpu = comfy_args.cpu or args.cpu
    from longmedia.comfy.host.features import host_features

    found = host_features(root)
    print(json.dumps(found.to_dict(), indent=1) if args.json else "\n".join(found.lines()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
