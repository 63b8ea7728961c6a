"""bench.block_profile: the CPU smoke's table (every category, categories adding up to the profiler's total), the
device tally on profiler-shaped events (a kernel categorised with the op that launched it), and --compare."""

from __future__ import annotations

import importlib.util
import json
from types import SimpleNamespace

import pytest

from bench import block_profile
from bench._kernel_categories import ATTENTION_SCOPE, CATEGORIES, LABELS
from bench._profile_table import KernelTime, PathProfile, compare, read_rows, row, tally

KITCHEN = importlib.util.find_spec("comfy_kitchen") is not None


def _cells(line: str) -> list[str]:
    return [c.strip() for c in line.strip().strip("|").split("|")]


def test_smoke_table_has_every_category_and_the_categories_add_up(tmp_path, monkeypatch, capsys):
    monkeypatch.delenv("LONGMEDIA_COMFYUI_ROOT", raising=False)   # the reference block: no ComfyUI rerun
    out, rows = tmp_path / "profile.md", tmp_path / "profile.jsonl"
    assert block_profile.main(["--smoke", "--out", str(out), "--jsonl", str(rows)]) == 0
    lines = out.read_text(encoding="utf-8").splitlines()
    head = next(i for i, line in enumerate(lines) if line.startswith("| path | attention"))
    columns = _cells(lines[head])
    assert columns[1:1 + len(CATEGORIES)] == [LABELS[c] for c in CATEGORIES]
    end = lines.index("", head)
    body = [_cells(line) for line in lines[head + 2:end]]
    assert [c[0] for c in body] == ["stock", "streamed exact (sdpa)", "streamed sol (sol_reference, tau 1.3)"]
    for cells in body:
        ms = [float(c.split()[0]) for c in cells[1:1 + len(CATEGORIES)]]
        total = float(cells[1 + len(CATEGORIES)].split()[0])
        assert total > 0 and sum(ms) == pytest.approx(total, rel=0.01), cells
        by = dict(zip(CATEGORIES, ms))
        assert by["attention"] > 0 and by["gemm"] > 0 and by["norms_modulation"] > 0, cells
        if KITCHEN:   # comfy-kitchen's fused q/k norm + rope op names the rope work (LongMedia's own fallback does not)
            assert by["rope"] > 0, cells
    parsed = read_rows(rows)
    assert [r["path"] for r in parsed] == [c[0] for c in body]
    for r in parsed:
        assert set(r["categories_ms"]) == set(CATEGORIES) and r["calls"] == 2 and r["seq"] == 600
        assert sum(r["categories_ms"].values()) == pytest.approx(r["total_ms"], rel=0.01)
        assert r["top"]["gemm"] and all(len(k) == 3 for k in r["top"]["gemm"])
    assert parsed[1]["rel_err"] < 1e-4 and parsed[1]["chunks"] == "128/0/128/4"    # the exact path is exact
    assert "reference block" in parsed[0]["weights"] and "no ComfyUI" in parsed[0]["weights"]


def _op(id_, name, parent=None):
    return SimpleNamespace(id=id_, name=name, cpu_parent=parent, device_type=SimpleNamespace(name="CPU"),
                           is_async=False, linked_correlation_id=0, is_user_annotation=False,
                           self_cpu_time_total=1.0, self_device_time_total=0.0)


def _kernel(name, us, linked, annotation=False):
    return SimpleNamespace(id=9000, name=name, cpu_parent=None, device_type=SimpleNamespace(name="CUDA"),
                           is_async=False, linked_correlation_id=linked, is_user_annotation=annotation,
                           self_cpu_time_total=0.0, self_device_time_total=us)


def test_device_tally_categorises_a_kernel_with_the_op_that_launched_it():
    scope = _op(1, ATTENTION_SCOPE)
    bmm = _op(2, "aten::bmm", scope)
    rope = _op(3, "comfy_kitchen::rms_rope_split_half_")
    launch = _op(2, "cudaLaunchKernel")            # a runtime call: same number, another id space
    launch.linked_correlation_id = 7
    events = [scope, bmm, rope, launch,
              _kernel("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64", 40.0, 2),   # inside attention
              _kernel("void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_mul<float>>", 5.0, 3),
              _kernel("Memcpy DtoD (Device -> Device)", 3.0, 0),                                # no op: its name
              _kernel(ATTENTION_SCOPE, 99.0, 1, annotation=True)]                               # the range itself
    averages = [_kernel("a", 48.0, 0), _kernel(ATTENTION_SCOPE, 99.0, 0, annotation=True), _op(4, "aten::bmm")]
    kernels, total = tally(events, averages, device=True)
    by = {k.category: k.us for k in kernels}
    assert by == {"attention": 40.0, "rope": 5.0, "copies": 3.0}
    assert total == 48.0 == sum(k.us for k in kernels)


def test_cpu_tally_times_each_op_by_itself_with_its_callers_as_scopes():
    rms = _op(1, "aten::rms_norm")
    pow_ = _op(2, "aten::pow", rms)
    mm = _op(3, "aten::mm")
    mm.self_cpu_time_total = 10.0
    kernels, total = tally([rms, pow_, mm], [rms, pow_, mm], device=False)
    assert {k.name: k.category for k in kernels} == {"aten::rms_norm": "norms_modulation",
                                                     "aten::pow": "norms_modulation", "aten::mm": "gemm"}
    assert total == 12.0


def _path(name, gemm_us, calls=2):
    kernels = (KernelTime("aten::mm", "gemm", 4, gemm_us), KernelTime("aten::add_", "norms_modulation", 2, 1000.0))
    return PathProfile(name, "self CPU", calls, gemm_us + 1000.0, kernels, wall_ms=1.0, rel_err=0.0)


def test_compare_prints_each_category_before_and_after(tmp_path, capsys):
    before, after = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    before.write_text(json.dumps(row(_path("stock", 4000.0), {"seq": 600})) + "\n", encoding="utf-8")
    after.write_text(json.dumps(row(_path("stock", 2000.0), {"seq": 600})) + "\n"
                     + json.dumps(row(_path("streamed exact (x)", 1.0), {})) + "\n", encoding="utf-8")
    assert block_profile.main(["--compare", str(before), str(after)]) == 0
    text = capsys.readouterr().out
    assert "| stock | GEMM | 2.000 | 1.000 | 0.500 |" in text
    assert "| stock | norms & modulation | 0.500 | 0.500 | 1.000 |" in text
    assert "| stock | total (self CPU) | 2.500 | 1.500 | 0.600 |" in text
    assert "in one file only: streamed exact (x)" in text
    assert compare(read_rows(before), read_rows(before))[3] == "| stock | GEMM | 2.000 | 2.000 | 1.000 |"
