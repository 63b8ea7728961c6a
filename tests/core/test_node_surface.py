"""What a new user meets on the node surface (issue 47), read from our nodes' /object_info snapshot
(tests/data/longmedia_object_info.json, which tests/comfyui/test_workflows_api.py checks against a live server):
an input with a default is optional (an API prompt may leave it out), whole numbers are INT, a tooltip never calls
an optional input required, and Hi-Res and the Refiner say why they take their schedules differently."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

SNAPSHOT = Path(__file__).resolve().parents[2] / "tests" / "data" / "longmedia_object_info.json"


@pytest.fixture(scope="module")
def info() -> dict:
    return json.loads(SNAPSHOT.read_text())


def spec(info: dict, node: str, name: str) -> tuple[str, str, dict]:
    for section in ("required", "optional"):
        entry = info[node]["input"].get(section, {}).get(name)
        if entry is not None:
            return section, entry[0], entry[1] if len(entry) > 1 else {}
    raise KeyError((node, name))


def test_decode_and_save_crf_is_optional_so_an_api_prompt_may_leave_it_out(info):
    """Before: crf was required (advanced, with a default): a prompt without it got HTTP 400, or its Decode & Save
    output was dropped ("Output will be ignored") and no file was written."""
    section, kind, opts = spec(info, "LongMediaDecodeSave", "crf")
    assert section == "optional" and opts.get("advanced") is True


@pytest.mark.parametrize("name, default, low, high", [("crf", -1, -1, 51), ("fps", 24, 1, 120)])
def test_decode_and_save_whole_number_inputs_are_int(info, name, default, low, high):
    _, kind, opts = spec(info, "LongMediaDecodeSave", name)
    assert kind == "INT" and (opts["default"], opts["min"], opts["max"]) == (default, low, high), opts


def test_no_optional_input_calls_itself_required(info):
    said = [(node, name) for node, schema in info.items()
            for name, entry in schema["input"].get("optional", {}).items()
            if len(entry) > 1 and re.search(r"(^|[.:] )Required\b", str(entry[1].get("tooltip", "")))]
    assert not said, said


def test_setup_negative_tooltip_says_what_happens_without_it(info):
    _, _, opts = spec(info, "LongMediaSetup", "negative")
    assert "an empty CLIPTextEncode is fine" in opts["tooltip"] and "stops" in opts["tooltip"], opts["tooltip"]


def test_hires_and_refiner_state_why_their_schedules_differ(info):
    """Hi-Res reruns the tail of the first pass's own schedule (sigmas, required); the Refiner builds a short
    schedule of its own (scheduler/steps/denoise) unless sigmas is connected. Each node says so, naming the other."""
    _, _, hires = spec(info, "LongMediaHiRes", "sigmas")
    assert "same schedule as the Sampler" in hires["tooltip"] and "Refiner" in hires["tooltip"], hires["tooltip"]
    _, _, steps = spec(info, "LongMediaRefiner", "steps")
    assert "schedule of its own" in steps["tooltip"] and "Hi-Res" in steps["tooltip"], steps["tooltip"]
