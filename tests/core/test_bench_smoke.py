"""Every bench/ script takes --smoke (CI runs each one: .ci/run)."""

from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "bench"


def test_every_bench_script_has_a_smoke_run():
    """A single-question bench is a file, the card bench a package with a __main__ (both `python -m bench.<name>`)."""
    scripts = [p for p in BENCH.glob("*.py") if not p.name.startswith("_")]
    packages = [p.parent for p in BENCH.glob("*/__main__.py")]
    assert len(scripts) >= 7 and sorted(p.name for p in packages) == ["cards", "long_job"]
    missing = [p.name for p in scripts if '"--smoke"' not in p.read_text(encoding="utf-8")]
    missing += [p.name for p in packages if not any('"--smoke"' in f.read_text(encoding="utf-8") for f in p.glob("*.py"))]
    assert not missing, f"bench scripts without --smoke: {missing}"
