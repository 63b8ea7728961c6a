"""docs/PARAMETERS.md matches a fresh generation from the nodes' define_schema() (drift check)."""

from __future__ import annotations

import difflib
import importlib.util
import sys
from pathlib import Path

from harness import REPO_ROOT

GENERATOR = REPO_ROOT / "tools" / "gen_parameters.py"


def _generator():
    """tools/gen_parameters.py as a module (tools/ is not a package)."""
    name = "longmedia_gen_parameters"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, GENERATOR)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # its dataclasses resolve their annotations through sys.modules
    spec.loader.exec_module(module)
    return module


def test_parameters_doc_matches_the_schemas(comfy_inprocess, comfyui_root: Path):
    gen = _generator()
    fresh = gen.generate(comfyui_root)
    committed = gen.DOC_PATH.read_text(encoding="utf-8")
    diff = "".join(difflib.unified_diff(committed.splitlines(True), fresh.splitlines(True),
                                        "docs/PARAMETERS.md (committed)", "fresh generation", n=1))
    assert committed == fresh, (f"docs/PARAMETERS.md is stale: run `LONGMEDIA_COMFYUI_ROOT={comfyui_root} "
                                f"python -m tools.gen_parameters` and commit it.\n{diff[:6000]}")


def test_generator_covers_every_registered_node(comfy_server, comfy_inprocess, comfyui_root: Path):
    gen = _generator()
    gen.import_comfyui(comfyui_root)
    documented = {gen.node_doc(cls).node_id for cls in gen.node_classes(gen.load_pack())}
    served = {name for name, info in comfy_server.object_info().items()
              if info.get("python_module", "").endswith("ComfyUI-LongMedia")}
    assert served and documented == served
