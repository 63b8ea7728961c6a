"""Refusals of `python -m longmedia plan` that name the flag to change (issue 47): a prompt of no tokens, and a canvas
so large that no segmentation can bring a pass under the hard cap."""

from __future__ import annotations

from longmedia.cli import main
from longmedia.errors import LongMediaInputError
from longmedia.job.preflight import SHORTEST_SEGMENTED_PASS_FRAMES, check_pass_rows
from longmedia.limits import MAX_PASS_ROWS


def test_a_prompt_of_no_tokens_is_refused_by_its_flag(capsys):
    assert main(["plan", "--text-tokens", "0"]) == 2
    err = capsys.readouterr().err
    assert "--text-tokens=0 is not allowed" in err and "from 1 to" in err
    assert main(["plan", "--text-tokens", "1"]) == 0


def test_a_canvas_no_segment_can_fit_names_the_canvas_not_the_length(capsys):
    assert main(["plan", "--width", "16384", "--height", "16384"]) == 2
    err = capsys.readouterr().err
    assert "--width/--height=16384x16384 is not allowed" in err and "--seconds" not in err.split("Lower")[0]
    assert "shortest segmented pass" in err and "Lower width and height to at most about" in err
    # a canvas segments can fit still names the length to shorten
    assert main(["plan", "--width", "4096", "--height", "4096"]) == 2
    assert "--seconds=10.0 is not allowed" in capsys.readouterr().err


def test_the_canvas_refusal_starts_where_the_shortest_segmented_pass_stops_fitting():
    per_frame = MAX_PASS_ROWS // SHORTEST_SEGMENTED_PASS_FRAMES + 1        # one row too many for the shortest pass
    try:
        check_pass_rows(per_frame * 300, 9000, 9000, 300, name="seconds", value=12.5)
    except LongMediaInputError as exc:
        assert exc.input_name == "width/height" and exc.value == "9000x9000"
    else:
        raise AssertionError("not refused")
    fits = MAX_PASS_ROWS // (SHORTEST_SEGMENTED_PASS_FRAMES + 17)           # segments of a few clips fit here
    try:
        check_pass_rows(fits * 300, 4000, 4000, 300, name="seconds", value=12.5)
    except LongMediaInputError as exc:
        assert exc.input_name == "seconds"
    else:
        raise AssertionError("not refused")
