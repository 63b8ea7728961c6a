"""tools/gpu/flash4_gate.py, run as its docstring says (`python3 -m tools.gpu.flash4_gate` from the repo root),
imports LongMedia: on 2026-12-05, run as a script, it did not (tools/gpu was its path), so the gate failed before
testing anything."""

from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_gate_imports_longmedia_as_it_is_run():
    # -S: no .pth files, so an editable install of LongMedia is not what makes the import work
    env = {**os.environ, "PYTHONPATH": sysconfig.get_paths()["purelib"], "CUDA_VISIBLE_DEVICES": ""}
    proc = subprocess.run([sys.executable, "-S", "-m", "tools.gpu.flash4_gate"], cwd=ROOT,
                          env=env, capture_output=True, text=True, timeout=120)
    assert "ModuleNotFoundError" not in proc.stderr, proc.stderr[-2000:]
    assert proc.returncode == 1 and "flash4 gate: no CUDA device" in proc.stdout
