"""Per-segment prompts and pinned seeds as Setup and the Sampler read them, without ComfyUI."""

from __future__ import annotations

import pytest

from longmedia.errors import LongMediaInputError
from longmedia.job.setup_plan import SetupRequest, plan_setup
from longmedia.limits import MAX_PASS_SEED
from longmedia.segments.prompts import parse_segment_prompts, segment_prompt_texts, short_prompt
from longmedia.segments.seams import parse_segment_seeds, segment_seeds
from longmedia.segments.timeline import plan_segments


def four_segments():
    # 10.125 s first pass, then ~9.9 s of new time per pass: 39 s -> 4 segments
    return plan_segments(39.0, segment_seconds=10.0)


def test_a_list_gives_each_segment_its_line_and_repeats_the_last():
    plan = four_segments()
    assert plan.count == 4
    assert segment_prompt_texts("a fox\n\n  the fox runs  \n", plan, "base") == ("a fox", "the fox runs",
                                                                              "the fox runs", "the fox runs")
    assert segment_prompt_texts("", plan, "base") is None


def test_a_schedule_applies_from_the_segment_holding_its_time():
    plan = four_segments()
    starts = [s.new_start / 24 for s in plan.segments]
    text = f"0s: snow\n{starts[2] + 0.5:g}s: river\n"
    assert segment_prompt_texts(text, plan, "base") == ("snow", "snow", "river", "river")
    assert segment_prompt_texts("12s: river", plan, "base") == ("base", "river", "river", "river")
    with pytest.raises(LongMediaInputError, match="segment_prompts"):
        segment_prompt_texts("12s: river", plan, "  ")     # segment 0 would have no prompt


@pytest.mark.parametrize("text,name,match", [
    ("a\nb\nc\nd\ne", "segment_prompts", "at most 4"),                      # more prompts than segments
    ("0s: a\nb", "segment_prompts line 2", "every line timed"),              # mixed forms
    ("0s: a\n10 sec: b", "segment_prompts line 2", "seconds"),               # malformed time
    ("0s: a\n5: b", "segment_prompts line 2", "seconds"),
    ("0s:", "segment_prompts line 1", "a prompt after the time"),
    ("5s: a\n2s: b", "segment_prompts line 2", "after the previous"),        # out of order
    ("0s: a\n1s: b", "segment_prompts line 2", "one time per segment"),      # two times in segment 0
    ("0s: a\n500s: b", "segment_prompts line 2", "within the job"),          # past the end
])
def test_bad_prompts_name_the_input(text, name, match):
    with pytest.raises(LongMediaInputError, match=match) as info:
        segment_prompt_texts(text, four_segments(), "base")
    assert info.value.input_name == name


def test_parse_reads_times():
    entries = parse_segment_prompts("0s: a\n 12.5 s : b c ")
    assert [(e.text, e.seconds, e.line) for e in entries] == [("a", 0.0, 1), ("b c", 12.5, 2)]


def test_short_prompt_is_one_line_and_cut():
    assert short_prompt("a\n b") == "a b"
    cut = short_prompt("x" * 100)
    assert len(cut) == 40 and cut.endswith("\u2026")
    assert " | " not in short_prompt("a | b")


def test_setup_plan_resolves_prompts_and_shows_them_in_its_table():
    request = SetupRequest(64, 64, 39.0, segment_seconds=10.0, conditioning="clip", prompt_tokens=33,
                           prompt="base", segment_prompts="a fox in snow\nthe fox runs\nthe fox jumps")
    plan = plan_setup(request)
    assert plan.prompts == ("a fox in snow", "the fox runs", "the fox jumps", "the fox jumps")
    assert plan.geometry.text_rows == 33
    summary = plan.summary_lines()
    head = next(line for line in summary if line.startswith("seg | "))
    assert head.endswith("| start | duration | prompt")
    rows = [line for line in summary if line[:2] in ("0 ", "1 ", "2 ", "3 ")]
    assert len(rows) == 4 and rows[0].endswith("| 0.00 s | 10.12 s | a fox in snow")
    assert rows[3].endswith("| the fox jumps")
    assert any("3 distinct over 4 segments" in n and "33 tokens" in n for n in plan.notes)
    assert plan.job().to_dict()["prompts"] is None     # Setup's ComfyUI side adds the encoded prompts


def test_setup_refuses_segment_prompts_without_its_own_text_encoder():
    with pytest.raises(LongMediaInputError, match="positive connected") as info:
        plan_setup(SetupRequest(64, 64, 39.0, conditioning="positive", segment_prompts="a\nb", segment_seconds=10.0))
    assert info.value.input_name == "segment_prompts"


def test_segment_seeds_pin_any_segment():
    assert parse_segment_seeds("") == ()
    assert parse_segment_seeds("auto, -  77\n5") == (None, None, 77, 5)
    assert segment_seeds(4, 10, (None, None, 77)) == (10, 11, 77, 13)
    with pytest.raises(LongMediaInputError) as info:
        parse_segment_seeds("auto x1")
    assert info.value.input_name == "segment_seeds[1]"
    with pytest.raises(LongMediaInputError) as info:
        segment_seeds(3, 0, parse_segment_seeds(f"auto {MAX_PASS_SEED + 1}"), name="segment_seeds")
    assert info.value.input_name == "segment_seeds[1]"
    with pytest.raises(LongMediaInputError, match="at most 2"):
        segment_seeds(2, 0, (None, None, 1), name="segment_seeds")


@pytest.mark.parametrize("text, where", [("²", 0), ("auto ١٢", 1), ("7 ⁹", 1)])
def test_segment_seeds_take_ascii_digits_only(text, where):
    """Python's str.isdigit accepts superscripts and other scripts' digits; int() refuses some: a named error."""
    with pytest.raises(LongMediaInputError) as info:
        parse_segment_seeds(text)
    assert info.value.input_name == f"segment_seeds[{where}]"


def test_a_pinned_seed_stops_where_comfyui_runs():
    assert segment_seeds(2, 0, (MAX_PASS_SEED,)) == (MAX_PASS_SEED, 1)
    with pytest.raises(LongMediaInputError, match=str(MAX_PASS_SEED)) as info:
        segment_seeds(2, 0, (MAX_PASS_SEED + 1,), name="segment_seeds")   # 2**64 - 1 overflowed in ComfyUI
    assert info.value.input_name == "segment_seeds[0]"


@pytest.mark.parametrize("text", ["1" * 1_000_000 + "x", "1" * 1_000_000, "9" * 21])
def test_a_huge_refused_value_gives_a_short_message(text):
    with pytest.raises(LongMediaInputError) as info:
        segment_seeds(1, 0, parse_segment_seeds(text), name="segment_seeds")
    assert info.value.input_name == "segment_seeds[0]" and len(str(info.value)) < 400
    assert len(text) < 80 or f"{len(text)} characters" in str(info.value)
