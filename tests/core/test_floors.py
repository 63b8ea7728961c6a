"""The package's floors: ComfyUI only behind `longmedia/comfy/`, and no floor importing one above it.

Floors, lowest first (docs/ARCHITECTURE.md): `units` < `errors`/`limits` (shared vocabulary) < `h3` and `kernels`
(facts and math, independent of each other) < `segments`, `attention` < `execution`, `media` < `parallel` < `planning` < `job` <
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

RANK = {"units": -1, "errors": 0, "limits": 0, "h3": 1, "kernels": 1, "segments": 2, "attention": 2, "execution": 3, "media": 3,
        "parallel": 3.5, "planning": 4, "job": 5, "report": 6, "testing": 7, "cli": 7, "comfy": 8}
HOST_MODULES = ("comfy", "comfy_api", "comfy_extras", "comfy_execution", "comfy_aimdo", "comfy_kitchen",
                "latent_preview", "folder_paths", "node_helpers", "nodes", "execution", "server")
# comfy-kitchen is a kernel library (eager/Triton/CUDA ops), not ComfyUI: the executor may use it directly.
LIBRARY_MODULES = ("comfy_kitchen",)


def _floor(module: str) -> str:
    floor = module.split(".")[1] if "." in module else module
    return "cli" if floor in ("__main__", "cli_args") else floor   # the command line: one floor


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
                assert _floor(target) in ("h3", "units", "errors", "limits"), f"{module} imports {target}"


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


# --- the rooms around the core: nodes/ (the ComfyUI face) and bench/ (the lab wing) ----------------------------

REPO = ROOT.parent
OUTSIDE = sorted(p for folder in ("nodes", "bench") for p in (REPO / folder).rglob("*.py"))


def _product_names(tree: ast.AST) -> dict[str, str]:
    """Names a file binds to the product (`longmedia...`, absolute or relative as nodes/ imports it): name -> what."""
    bound = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            bound.update({(a.asname or a.name).split(".")[0]: a.name for a in node.names
                          if a.name.split(".")[0] == "longmedia"})
        elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "longmedia":
            bound.update({a.asname or a.name: f"{node.module}.{a.name}" for a in node.names})
    return bound


def _root(node: ast.AST) -> ast.AST:
    while isinstance(node, (ast.Attribute, ast.Subscript, ast.Call)):
        node = node.func if isinstance(node, ast.Call) else node.value
    return node


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def test_the_rooms_around_the_core_are_found():
    names = {p.relative_to(REPO).as_posix() for p in OUTSIDE}
    assert {"nodes/sampler.py", "bench/cards/entry.py", "bench/cards/probes.py", "bench/block.py"} <= names


@pytest.mark.parametrize("path", OUTSIDE, ids=lambda p: p.relative_to(REPO).as_posix())
def test_nodes_and_bench_use_no_private_product_name(path):
    tree = ast.parse(path.read_text(encoding="utf-8"))
    bound = _product_names(tree)
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "longmedia":
            private = [a.name for a in node.names if _private(a.name)] + [m for m in node.module.split(".") if
                                                                            _private(m)]
            assert not private, f"{path.name}:{node.lineno} imports {node.module}: {private}"
        if isinstance(node, ast.Attribute) and _private(node.attr):
            root = _root(node.value)
            assert not (isinstance(root, ast.Name) and root.id in bound), \
                f"{path.name}:{node.lineno} reaches {bound[root.id]}.{node.attr}, a private product name"


@pytest.mark.parametrize("path", OUTSIDE, ids=lambda p: p.relative_to(REPO).as_posix())
def test_nodes_and_bench_patch_no_product_attribute(path):
    """Diagnostics and controls enter through the product's parameters (`observer=`, `weights=`), never by
    replacing a product function or class attribute at run time."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    bound = _product_names(tree)

    def product(target: ast.AST) -> bool:
        root = _root(target)
        return isinstance(root, ast.Name) and root.id in bound

    for node in ast.walk(tree):
        targets = (node.targets if isinstance(node, ast.Assign) else
                   [node.target] if isinstance(node, (ast.AugAssign, ast.AnnAssign)) else [])
        for t in targets:
            assert not (isinstance(t, ast.Attribute) and product(t.value)), \
                f"{path.name}:{node.lineno} assigns a product attribute"
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("setattr", "delattr"):
            assert not (node.args and product(node.args[0])), f"{path.name}:{node.lineno} {node.func.id} on the product"


def _private_reaches(path: Path, relative_is_product: bool) -> list[str]:
    """Where a file imports or reaches another product module's private (`_name`) name."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    bound = _product_names(tree)
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and relative_is_product and node.level:
            where = "." * node.level + (f"{node.module}." if node.module else "")
            bound.update({a.asname or a.name: where + a.name for a in node.names})
        product = isinstance(node, ast.ImportFrom) and (
            (node.module or "").split(".")[0] == "longmedia" or (relative_is_product and node.level))
        if product:
            found += [f"{path.name}:{node.lineno} imports {a.name}" for a in node.names if _private(a.name)]
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and _private(node.attr):
            root = _root(node.value)
            if isinstance(root, ast.Name) and root.id in bound:
                found.append(f"{path.name}:{node.lineno} reaches {bound[root.id]}.{node.attr}")
    return found


@pytest.mark.parametrize("path", sorted(ROOT.rglob("*.py")), ids=lambda p: p.relative_to(ROOT).as_posix())
def test_no_product_module_reaches_another_s_private_name(path):
    """A module's `_name` helpers are its own: a second module that needs one gets a public name or a parameter
    (issue 48: the stages' segmented run once reached into five of the Sampler's)."""
    assert not _private_reaches(path, relative_is_product=True)


def test_the_private_name_finder_finds_a_reach(tmp_path):
    sample = tmp_path / "sample.py"
    sample.write_text("from . import segmented\nfrom .pass_loop import job_latent\n\n"
                      "def f():\n    return segmented._seeded(1, 2), job_latent\n", encoding="utf-8")
    assert _private_reaches(sample, relative_is_product=True) == ["sample.py:5 reaches .segmented._seeded"]
    sample.write_text("from .pass_loop import _job_latent\n", encoding="utf-8")
    assert _private_reaches(sample, relative_is_product=True) == ["sample.py:1 imports _job_latent"]


def test_the_product_and_the_nodes_never_import_the_bench():
    for path in [*ROOT.rglob("*.py"), *(REPO / "nodes").rglob("*.py")]:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import) else
                     [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level else [])
            assert not any(n.split(".")[0] == "bench" for n in names), f"{path} imports the bench"


def _module_of(target: str) -> str | None:
    """The longmedia module an import names (`longmedia.a.b.name` -> `longmedia.a.b` when `name` is not one)."""
    known = set(MODULES)
    while target.startswith("longmedia.") and target not in known:
        target = target.rsplit(".", 1)[0]
    return target if target in known else None


def _import_graph() -> dict[str, set[str]]:
    """module -> the longmedia modules it imports anywhere (top level, inside functions, under TYPE_CHECKING)."""
    graph: dict[str, set[str]] = {}
    for module in MODULES:
        found = {_module_of(t) for t, how in _imports(_path(module), module) if how != "string"}
        graph[module] = {m for m in found if m is not None and m != module}
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_the_cycle_finder_finds_a_circle():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": set()}
    assert _cycles(graph) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []


def test_no_module_imports_itself_round_a_circle():
    """No import cycle among longmedia modules, counting imports inside functions and under TYPE_CHECKING."""
    graph = _import_graph()
    assert graph["longmedia.comfy.passes.sampler"], "the import graph lost the sampler's imports"
    assert _cycles(graph) == []


def _repo_modules() -> dict[str, Path]:
    """Every Python module of the repository's own code (the product, nodes/, bench/, tools/), by dotted name."""
    out = {}
    for folder in ("longmedia", "nodes", "bench", "tools"):
        for path in (REPO / folder).rglob("*.py"):
            parts = path.relative_to(REPO).with_suffix("").parts
            out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return out


def _repo_import_graph() -> dict[str, set[str]]:
    """module -> the repository modules it imports anywhere (relative imports resolved; `from pkg import mod` counts
    `pkg.mod` where that is a module, else `pkg`)."""
    known = _repo_modules()

    def resolve(target: str) -> str | None:
        while target and target not in known:
            target = target.rpartition(".")[0]
        return target or None

    graph: dict[str, set[str]] = {}
    for module, path in known.items():
        package = module if path.name == "__init__.py" else module.rpartition(".")[0]
        found = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                found |= {resolve(a.name) for a in node.names}
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    up = package.split(".")
                    base = ".".join(up[: len(up) - node.level + 1] + ([node.module] if node.module else []))
                found |= {resolve(f"{base}.{a.name}") for a in node.names}
        graph[module] = {m for m in found if m is not None and m != module}
    return graph


def test_no_circle_in_the_whole_repository():
    """bench/ and tools/ too: a module of the lab wing imports no module that imports it back (bench.cards' child
    and entry share `bench.cards.cells`)."""
    graph = _repo_import_graph()
    assert "bench.cards.cells" in graph["bench.cards.child"], "the repository's import graph lost the bench"
    assert _cycles(graph) == []


def test_no_package_of_the_product_holds_more_than_twenty_modules_flat():
    """A family of files sharing a prefix is a package (STYLE 14): `comfy/` has rooms (`passes/`, `patching/`,
    `host/`, `retakes/`, `sp/`), not 30 files side by side."""
    for folder in [ROOT, *(p for p in ROOT.rglob("*") if p.is_dir() and (p / "__init__.py").exists())]:
        flat = [p for p in folder.glob("*.py") if p.name != "__init__.py"]
        assert len(flat) <= 20, f"{folder.relative_to(ROOT.parent)} holds {len(flat)} modules flat: give it rooms"
