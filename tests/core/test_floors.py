"""The package's floors: ComfyUI only behind `longmedia/comfy/`, and no floor importing one above it.

Floors, lowest first (docs/ARCHITECTURE.md): `errors`/`limits` (shared vocabulary) < `h3` and `kernels`
(facts and math, independent of each other) < `segments`, `attention` < `execution` < `planning` < `job` <
`report` < `testing`, `cli` < `comfy` < `nodes`. A module may import its own floor and any floor below.
"""

from __future__ import annotations

import ast
import builtins
import importlib
import pkgutil
import sys
from pathlib import Path

import pytest

import longmedia

ROOT = Path(longmedia.__file__).resolve().parent

RANK = {"errors": 0, "limits": 0, "h3": 1, "kernels": 1, "segments": 2, "attention": 2, "execution": 3,
        "planning": 4, "job": 5, "report": 6, "testing": 7, "cli": 7, "comfy": 8}
HOST_MODULES = ("comfy", "comfy_api", "comfy_extras", "comfy_execution", "comfy_aimdo", "comfy_kitchen",
                "latent_preview", "folder_paths", "node_helpers", "nodes", "execution", "server")
# comfy-kitchen is a kernel library (eager/Triton/CUDA ops), not ComfyUI: the executor may use it directly.
LIBRARY_MODULES = ("comfy_kitchen",)


def _floor(module: str) -> str:
    floor = module.split(".")[1] if "." in module else module
    return "cli" if floor == "__main__" else floor


def _modules() -> list[str]:
    found = []
    for info in pkgutil.walk_packages([str(ROOT)], prefix="longmedia."):
        found.append(info.name)
    return sorted(found)


def _imports(path: Path, module: str) -> list[tuple[str, str]]:
    """(imported module, how) for every import in the file, relative ones resolved."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    package = module if path.name == "__init__.py" else module.rsplit(".", 1)[0]
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [(alias.name, "import") for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
                names = [f"{target}.{a.name}" for a in node.names] if not node.module else [target]
                out += [(n, "from") for n in names]
            else:
                out.append((node.module or "", "from"))
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):  # sys.modules.get("comfy.x")
            if node.value.split(".")[0] in HOST_MODULES and "." in node.value and " " not in node.value:
                out.append((node.value, "string"))
    return out


def _path(module: str) -> Path:
    rel = module.split(".")[1:]
    p = ROOT.joinpath(*rel)
    return p / "__init__.py" if p.is_dir() else p.with_suffix(".py")


MODULES = _modules()


def test_every_floor_is_ranked():
    assert {_floor(m) for m in MODULES} <= set(RANK), {_floor(m) for m in MODULES} - set(RANK)


@pytest.mark.parametrize("module", MODULES)
def test_no_floor_imports_one_above_it(module):
    mine = _floor(module)
    for target, _how in _imports(_path(module), module):
        if not target.startswith("longmedia."):
            continue
        theirs = _floor(target)
        if theirs == mine:
            continue
        assert RANK[theirs] < RANK[mine], f"{module} ({mine}) imports {target} ({theirs}): a floor above or beside it"


@pytest.mark.parametrize("module", [m for m in MODULES if _floor(m) != "comfy"])
def test_only_the_comfy_floor_names_the_host(module):
    for target, how in _imports(_path(module), module):
        root = target.split(".")[0]
        if root in HOST_MODULES and root not in LIBRARY_MODULES:
            pytest.fail(f"{module} reaches ComfyUI ({how} {target}); move that code into longmedia/comfy/")


def test_h3_imports_nothing_but_the_ground_floor():
    for module in (m for m in MODULES if _floor(m) == "h3"):
        for target, _how in _imports(_path(module), module):
            if target.startswith("longmedia."):
                assert _floor(target) in ("h3", "errors", "limits"), f"{module} imports {target}"


def test_comfy_is_imported_by_nothing_but_nodes():
    for module in (m for m in MODULES if _floor(m) != "comfy"):
        for target, _how in _imports(_path(module), module):
            assert not target.startswith("longmedia.comfy"), f"{module} imports {target}"


def test_every_module_outside_comfy_imports_with_comfyui_absent(monkeypatch):
    """Each module outside longmedia/comfy imports in a process where `comfy` and its kin cannot be imported."""
    real_import = builtins.__import__

    def no_host(name, globals=None, locals=None, fromlist=(), level=0):
        if level == 0 and name.split(".")[0] in HOST_MODULES and name.split(".")[0] not in LIBRARY_MODULES:
            raise ImportError(f"{name} is made unimportable by this test")
        return real_import(name, globals, locals, fromlist, level)

    saved = {k: v for k, v in sys.modules.items() if k.startswith("longmedia")}
    for key in [k for k in sys.modules if k.split(".")[0] in HOST_MODULES or k.startswith("longmedia")]:
        monkeypatch.delitem(sys.modules, key, raising=False)
    monkeypatch.setattr(builtins, "__import__", no_host)
    imported = []
    try:
        for module in (m for m in MODULES if _floor(m) != "comfy" and not m.endswith("__main__")):
            if module.startswith("longmedia.kernels.") and module.split(".")[-1] in ("qstream_attention",
                                                                                     "sol_attention"):
                pytest.importorskip("triton")
            importlib.import_module(module)
            imported.append(module)
    finally:
        for key in [k for k in sys.modules if k.startswith("longmedia")]:
            del sys.modules[key]
        sys.modules.update(saved)
    assert len(imported) > 30
