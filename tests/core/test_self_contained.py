"""The suite needs nothing outside the repository: a clone from the project's home has no ../shared."""

from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]


def test_no_test_reads_outside_the_repository():
    offenders = []
    for path in TESTS.rglob("*.py"):
        text = path.read_text(encoding="utf-8")
        if path != Path(__file__).resolve() and ('"shared"' in text or "../shared" in text):
            offenders.append(str(path.relative_to(TESTS)))
    assert not offenders, f"tests reading ../shared (copy the data into tests/data): {offenders}"
