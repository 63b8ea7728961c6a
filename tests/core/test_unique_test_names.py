"""Every test module's file name is unique across tests/: pytest imports them by basename (no packages), so
two `test_x.py` in different layers stop the whole collection, as the README's one test command runs them."""

from collections import Counter
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]


def test_test_module_names_are_unique_across_layers():
    names = Counter(p.name for p in TESTS.rglob("test_*.py"))
    assert [n for n, c in names.items() if c > 1] == []
