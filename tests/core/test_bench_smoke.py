"""Every bench/ script takes --smoke (CI runs each one: .ci/run)."""

from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "bench"


def test_every_bench_script_has_a_smoke_run():
    scripts = [p for p in BENCH.glob("*.py") if not p.name.startswith("_")]
    assert len(scripts) >= 7
    missing = [p.name for p in scripts if '"--smoke"' not in p.read_text(encoding="utf-8")]
    assert not missing, f"bench scripts without --smoke: {missing}"
