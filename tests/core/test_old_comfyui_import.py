"""Loading the pack on a ComfyUI without the V3 node API (`comfy_api.latest`) fails with a message naming the
minimum ComfyUI, not a raw ModuleNotFoundError (issue 30). The old ComfyUI is a `comfy_api` package without
`latest`, in a subprocess; the pack is loaded as ComfyUI loads a custom node folder."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

LOAD = textwrap.dedent("""
    import importlib.util, sys
    spec = importlib.util.spec_from_file_location("ComfyUI-LongMedia", sys.argv[1] + "/__init__.py",
                                                  submodule_search_locations=[sys.argv[1]])
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    try:
        spec.loader.exec_module(module)
    except ImportError as error:
        print(type(error).__name__, "|", error)
    else:
        print("loaded")
""")


def _load(comfy_api_files: dict[str, str], tmp_path: Path) -> str:
    for name, text in comfy_api_files.items():
        path = tmp_path / "comfy_api" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}   # the old ComfyUI's comfy_api, without latest/
    proc = subprocess.run([sys.executable, "-c", LOAD, str(ROOT)], capture_output=True, text=True, timeout=120,
                          cwd=tmp_path, env=env)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.strip()


def test_a_comfyui_without_the_v3_api_gets_the_minimum_version(tmp_path):
    out = _load({"__init__.py": ""}, tmp_path)
    assert out.startswith("ImportError | LongMedia needs ComfyUI 0.33.0 or newer"), out
    assert "this ComfyUI has no comfy_api.latest" in out and "ModuleNotFoundError" not in out


def test_other_missing_modules_are_not_restated(tmp_path):
    """A missing module that is not ComfyUI's V3 API keeps its own error (it is a different problem)."""
    out = _load({"__init__.py": "", "latest/__init__.py": "import comfy_api_missing_helper\n"}, tmp_path)
    assert out.startswith("ModuleNotFoundError | No module named 'comfy_api_missing_helper'"), out
