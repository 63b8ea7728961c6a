"""The pack loads the way ComfyUI loads it (a folder under custom_nodes/, imported by file location)."""

import importlib
import importlib.util
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_kernels_resolve_as_longmedia_kernels_in_a_custom_nodes_checkout():
    name = "ComfyUI-LongMedia-layout-test"
    spec = importlib.util.spec_from_file_location(name, ROOT / "__init__.py", submodule_search_locations=[str(ROOT)])
    pack = importlib.util.module_from_spec(spec)
    sys.modules[name] = pack
    try:
        spec.loader.exec_module(pack)
        assert pack.WEB_DIRECTORY == "./web"
        ref = importlib.import_module(f"{name}.longmedia.kernels.qstream_reference")
        assert Path(ref.__file__).resolve() == ROOT / "longmedia" / "kernels" / "qstream_reference.py"
        backends = importlib.import_module(f"{name}.longmedia.attention.backends")
        ok, why = backends.default_registry().get("qstream_reference").availability()
        assert ok, why
    finally:
        for key in [k for k in sys.modules if k == name or k.startswith(name + ".")]:
            del sys.modules[key]


def test_pyproject_installs_every_longmedia_package():
    text = (ROOT / "pyproject.toml").read_text()
    assert 'include = ["longmedia", "longmedia.*"]' in text
    assert "package-dir" not in text  # the kernels live inside the package: no mapping, no import hook


def test_each_node_has_one_help_page():
    """web/docs/<NodeId>.md, one file per node (issue 47: each page was there twice, <NodeId>.md and <NodeId>/en.md).
    The frontend's Info tab asks for docs/<NodeId>/<locale>.md first and falls back to docs/<NodeId>.md, so the one
    page serves every locale; each starts with its node's title."""
    docs = ROOT / "web" / "docs"
    assert [p.name for p in docs.iterdir() if not p.is_file()] == []
    assert sorted(p.stem for p in docs.glob("*.md")) == ["LongMediaDecodeSave", "LongMediaHiRes", "LongMediaRefiner",
                                                        "LongMediaRetakes", "LongMediaSampler", "LongMediaSetup"]
    for page in docs.glob("*.md"):
        assert page.read_text(encoding="utf-8").startswith("# LongMedia "), page.name
