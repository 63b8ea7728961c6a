"""pyproject.toml builds its metadata without a setuptools deprecation warning: an SPDX `license` string and
`license-files` (PEP 639), no License classifier (issue 30: every install printed the TOML-table deprecation)."""

from __future__ import annotations

import shutil
import warnings
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def test_license_is_an_spdx_expression_with_its_file():
    tomllib = pytest.importorskip("tomllib")        # Python 3.11+
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    assert project["license"] == "GPL-3.0-only" and project["license-files"] == ["LICENSE"]
    assert not [c for c in project.get("classifiers", []) if c.startswith("License ::")]
    assert "GNU GENERAL PUBLIC LICENSE" in (ROOT / "LICENSE").read_text(encoding="utf-8")[:200]


def test_metadata_builds_without_a_deprecation_warning(tmp_path, monkeypatch):
    build_meta = pytest.importorskip("setuptools.build_meta")
    setuptools = pytest.importorskip("setuptools")
    if tuple(int(p) for p in setuptools.__version__.split(".")[:2]) < (77, 0):
        pytest.skip(f"setuptools {setuptools.__version__} predates PEP 639 (pyproject requires >= 77)")
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        shutil.copy(ROOT / name, tmp_path / name)
    (tmp_path / "longmedia").mkdir()
    (tmp_path / "longmedia" / "__init__.py").write_text("")
    (tmp_path / "meta").mkdir()
    monkeypatch.chdir(tmp_path)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        dist_info = build_meta.prepare_metadata_for_build_wheel("meta")
    assert not [w for w in seen if "Deprecation" in w.category.__name__], [str(w.message)[:200] for w in seen]
    metadata = (tmp_path / "meta" / dist_info / "METADATA").read_text(encoding="utf-8")
    assert "License-Expression: GPL-3.0-only" in metadata and "License-File: LICENSE" in metadata
