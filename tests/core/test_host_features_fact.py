"""The host-features fact (longmedia/report/host_features.py): the version rule, the lines a bug report pastes,
frozen, JSON-ready. Detection on real trees: tests/comfyui/test_host_features.py (module names are unique across layers)."""

from __future__ import annotations

import dataclasses
import json
import random

import pytest

from longmedia.report.host_features import HostFeatures, aimdo_raises, version_tuple

FLAGS = ("per_token_rows", "pdd_heads", "vsa_gates", "block_attention_handoff", "bsa_present", "bsa_chaining",
         "malloc_graphs", "model_attention_backend")


def features(seed: int, **fixed) -> HostFeatures:
    rng = random.Random(seed)
    values = {name: rng.random() < 0.5 for name in FLAGS}
    values.update(comfyui_version=f"0.{rng.randrange(30, 40)}.{rng.randrange(0, 9)}",
                  kitchen_version=f"0.2.{rng.randrange(30, 40)}", aimdo_version=f"0.{rng.randrange(4, 8)}.{rng.randrange(9)}")
    values.update(fixed)
    return HostFeatures(**values)


@pytest.mark.parametrize("version, parsed", [("0.5.5", (0, 5, 5)), ("0.6.0rc1", (0, 6, 0)), ("v1.2", (1, 2)),
                                             ("0.6.0+cu128", (0, 6, 0)), (None, None), ("dev", None)])
def test_version_tuple(version, parsed):
    assert version_tuple(version) == parsed


@pytest.mark.parametrize("version, raises", [("0.4.13", False), ("0.5.5", False), ("0.5.99", False), ("0.6.0", True),
                                             ("0.6", True), ("0.6.1", True), ("1.0.0", True), (None, None)])
def test_aimdo_raises_from_0_6_0(version, raises):
    assert aimdo_raises(version) is raises


def test_lines_name_every_feature_and_follow_the_flags():
    for seed in range(6):
        found = features(seed, notes=("comfy_extras.nodes_sparse_attention did not import: ImportError: x",))
        lines = found.lines()
        by_name = dict(line.split(": ", 1) for line in lines if not line.startswith("note"))
        assert by_name["per-token rows"] == ("yes" if found.per_token_rows else "no")
        assert by_name["BlockSparseAttention chaining"] == ("yes" if found.bsa_chaining else "no")
        assert by_name["malloc graphs (pause_malloc_graph)"] == ("yes" if found.malloc_graphs else "no")
        assert by_name["comfy-aimdo raising (>= 0.6.0)"] == ("yes" if found.aimdo_raising else "no")
        assert by_name["comfy-kitchen"] == found.kitchen_version and by_name["comfy-aimdo"] == found.aimdo_version
        assert found.comfyui_version in by_name["generation"]
        assert lines[-1].startswith("note: comfy_extras.nodes_sparse_attention did not import")
    absent = features(9, kitchen_version=None, aimdo_version=None)
    assert "comfy-aimdo: not installed" in absent.lines() and "comfy-aimdo raising (>= 0.6.0): unknown" in absent.lines()


def test_generation_is_read_from_features_not_the_version_string():
    old = features(1, per_token_rows=False, pdd_heads=False, malloc_graphs=False, comfyui_version="0.33.0")
    overlay = dataclasses.replace(old, malloc_graphs=True)
    assert "before 0.38" in old.generation and "0.38+" in overlay.generation and "0.33.0" in overlay.generation


def test_frozen_and_json_ready():
    found = features(3)
    with pytest.raises(dataclasses.FrozenInstanceError):
        found.bsa_present = not found.bsa_present
    data = json.loads(json.dumps(found.to_dict()))
    assert data["aimdo_raising"] == found.aimdo_raising and data["bsa_chaining"] == found.bsa_chaining
    assert set(FLAGS) <= set(data) and data["generation"] == found.generation
