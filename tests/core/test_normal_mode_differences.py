"""Normal mode runs stock's block math, not stock's runtime: the plan's reasons and the panel say what differs
(block prefetch off where the plan turns it off, the step guard after each model call)."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from longmedia.h3.profiles import DeviceProfile, ModelProfile
from longmedia.job.geometry import build_geometry
from longmedia.planning.attention_path import default_attention_path
from longmedia.planning.planner import plan

ROOT = Path(__file__).resolve().parents[2]


def _normal(vram: float, model: str):
    p = plan(ModelProfile.preset(model), DeviceProfile.card(vram, 64), build_geometry(1344, 768, seconds=5),
             attention_resolver=default_attention_path)
    assert p.memory_mode == "normal"
    return p


@pytest.mark.parametrize("vram, model, prefetch", [(16, "h3-int8", False), (80, "h3-bf16", True)])
def test_the_plan_names_what_normal_mode_changes(vram, model, prefetch):
    p = _normal(vram, model)
    (why,) = [r for r in p.reasons if r.startswith("normal mode runs stock's block math but not exactly")]
    assert p.prefetch is prefetch and ("block prefetch is off" in why) is (not prefetch)
    assert f"less than {p.guards.step_boundary_cleanup_mb} MiB is free" in why


@pytest.mark.skipif(shutil.which("node") is None, reason="node is not installed: the panel module is not run")
def test_the_panel_names_what_normal_mode_changes():
    p = json.loads(_normal(16, "h3-int8").to_json())
    script = (f"import('{(ROOT / 'web' / 'lib' / 'report_format.js').as_uri()}').then((m) => "
              f"console.log(JSON.stringify(m.formatReport({{kind: 'run', plan: {json.dumps(p)}}}).rows)))")
    rows = dict(json.loads(subprocess.run(["node", "-e", script], capture_output=True, text=True, check=True,
                                          timeout=60).stdout))
    assert rows["vs stock"].startswith("stock block math; block prefetch off (stock: on); a step guard after each")
