"""tools/gpu/flash4_ready.sh, as the long GPU drivers source it: flash-attn-4 stays only past its gate."""

from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_a_flash4_that_fails_its_gate_is_removed_before_the_driver_goes_on(tmp_path):
    """On a machine without CUDA the gate fails (exit 1), so the installed flash_attn is removed and auto never
    sees it; the driver's own name is in what it prints, and PYTHONPATH gains cutlass's dsl_packages."""
    site = tmp_path / "site"
    (site / "flash_attn" / "cute").mkdir(parents=True)
    (site / ".longmedia_flash4").write_text("installed\n")
    env = {**os.environ, "LONGMEDIA_GPU_SITE": str(site), "CUDA_VISIBLE_DEVICES": "",
           "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
           "PYTHONPATH": sysconfig.get_paths()["purelib"]}
    proc = subprocess.run(["bash", "-c", 'FLASH4_WHO="test driver" . tools/gpu/flash4_ready.sh; echo "PP=$PYTHONPATH"'],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "test driver: flash-attn-4 absent or failed its gate: removed" in proc.stdout, proc.stdout
    assert not (site / "flash_attn").exists()
    assert f"{site}/nvidia_cutlass_dsl/dsl_packages" in proc.stdout
