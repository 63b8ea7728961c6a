"""Running a GPU test's child process (comfy-aimdo must initialise before torch, as in ComfyUI's main.py; pytest
imported torch long ago)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from bench.cards.comfy_process import child_env

HERE = Path(__file__).resolve().parent


def run_child(script: str, tmp_path_factory, result_name: str) -> dict:
    """Run tests/gpu/SCRIPT in a child process (comfy-aimdo must initialise before torch, as in ComfyUI's main.py;
    pytest imported torch long ago) with OUT.json and a model folder; its JSON results, kept as RESULT_NAME next to
    the device run's other results when $OUT is set, plus `_rc` and `_tail` (the child's output's end)."""
    work = tmp_path_factory.mktemp(Path(script).stem)
    out = work / "result.json"
    proc = subprocess.run([sys.executable, "-P", str(HERE / script), str(out), str(work / "models")],
                          capture_output=True, text=True, timeout=420, check=False, env=child_env(HERE.parents[1]))
    res = json.loads(out.read_text()) if out.is_file() else {}
    if os.environ.get("OUT"):
        Path(os.environ["OUT"], result_name).write_text(json.dumps(res, indent=1))
    res["_rc"], res["_tail"] = proc.returncode, (proc.stdout + proc.stderr)[-4000:]
    return res
