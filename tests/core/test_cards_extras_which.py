"""bench/cards.py --extras-which: the extras named run, in their order; interrupt brings seeds (its rerun is
compared with seed 1's fresh run); no name runs them all."""

from __future__ import annotations

import sys
import types
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

import _cards_extras  # noqa: E402
import cards  # noqa: E402


@pytest.mark.parametrize("which,ran", [
    (None, ["oom", "seeds", "interrupt", "segmented", "sol", "scheduled_sol"]),
    (["interrupt"], ["seeds", "interrupt"]),
    (["scheduled_sol", "oom"], ["oom", "scheduled_sol"]),
])
def test_extras_which_picks_the_extras_in_run_order(monkeypatch, which, ran):
    seen: list[str] = []
    monkeypatch.setattr(_cards_extras, "oom_rows", lambda bench: seen.append("oom"))
    monkeypatch.setattr(_cards_extras, "seed_reruns", lambda bench, state: seen.append("seeds"))
    monkeypatch.setattr(_cards_extras, "interrupt_rerun", lambda bench, state: seen.append("interrupt"))
    monkeypatch.setattr(_cards_extras, "segmented", lambda bench: seen.append("segmented"))
    monkeypatch.setattr(_cards_extras, "attention_row", lambda bench, attention: seen.append(attention))
    a = types.SimpleNamespace(extras_which=which, deadline=float("inf"))
    _cards_extras.run_extras(types.SimpleNamespace(a=a, out_of_time=lambda: False))
    assert seen == ran


def test_extras_which_is_a_checked_cli_choice_passed_to_the_card():
    assert cards.parse(["--extras-only", "--extras-which", "sol", "scheduled_sol"]).extras_which == [
        "sol", "scheduled_sol"]
    with pytest.raises(SystemExit):
        cards.parse(["--extras-which", "everything"])
