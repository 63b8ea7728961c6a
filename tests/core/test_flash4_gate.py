"""tools/gpu/flash4_gate.py runs as a script from the repo root (as the GPU runs call it) and imports LongMedia
itself: on 2026-12-05 it did not (tools/gpu was its sys.path), so the gate failed before testing anything."""

from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_gate_imports_longmedia_when_run_as_a_script():
    # -S: no .pth files, so an editable install of LongMedia is not what makes the import work
    env = {**os.environ, "PYTHONPATH": sysconfig.get_paths()["purelib"], "CUDA_VISIBLE_DEVICES": ""}
    proc = subprocess.run([sys.executable, "-S", str(ROOT / "tools" / "gpu" / "flash4_gate.py")], cwd="/",
                          env=env, capture_output=True, text=True, timeout=120)
    assert "ModuleNotFoundError" not in proc.stderr, proc.stderr[-2000:]
    assert proc.returncode == 1 and "flash4 gate: no CUDA device" in proc.stdout
