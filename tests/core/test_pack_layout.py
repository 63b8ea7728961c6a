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
        ok, why = backends.default_registry().get("qstream_reference").probe()
        assert ok, why
    finally:
        for key in [k for k in sys.modules if k == name or k.startswith(name + ".")]:
            del sys.modules[key]


def test_pyproject_installs_every_longmedia_package():
    text = (ROOT / "pyproject.toml").read_text()
    assert 'include = ["longmedia", "longmedia.*"]' in text
    assert "package-dir" not in text  # the kernels live inside the package: no mapping, no import hook


def test_node_help_copies_match_their_en_md():
    """web/docs/<NodeId>.md (the Info tab's fallback for other locales) is tools/gen_node_docs.py's copy of en.md."""
    spec = importlib.util.spec_from_file_location("gen_node_docs", ROOT / "tools" / "gen_node_docs.py")
    tool = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tool)
    copies = tool.copies()
    assert sorted(p.stem for p in copies) == ["LongMediaDecodeSave", "LongMediaHiRes", "LongMediaRefiner", "LongMediaRetakes",
                                              "LongMediaSampler",
                                              "LongMediaSetup"]
    for path, text in copies.items():
        assert path.read_text(encoding="utf-8") == text, f"{path.name} drifted: run python tools/gen_node_docs.py"
    assert sorted(p.name for p in (ROOT / "web" / "docs").glob("*.md")) == sorted(p.name for p in copies)
