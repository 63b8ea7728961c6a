"""An unknown Setup `family` through the API is refused at validation, before anything runs, naming the allowed
families (issue 30). ComfyUI's V3 DynamicCombo drops an unknown option without an error, so before the fix the
prompt was queued and failed at run time with `execute() missing 1 required positional argument: 'family'`."""

from __future__ import annotations

import harness
import pytest
from test_preflight_api import healthy, prompt


@pytest.mark.parametrize("family", ["i2v", "T2VA", ""])
def test_an_unknown_family_is_refused_before_the_run_with_the_allowed_families(comfy_server, family):
    with pytest.raises(harness.ComfyHarnessError) as info:
        comfy_server.submit(prompt(family=family))
    text = str(info.value)
    assert "HTTP 400" in text and "prompt_outputs_failed_validation" in text, text
    assert "family must be one of 't2va', 'fl2va', 'ref2va'" in text, text
    assert "missing 1 required positional argument" not in text
    healthy(comfy_server)           # a valid family still runs, and the server is fine


def test_the_known_families_pass_validation(comfy_server):
    healthy(comfy_server)           # t2va, through the same validate_inputs


def test_a_bad_reference_budget_is_still_refused_at_validation(comfy_server):
    """reference_budget carries the family check (ComfyUI reports a failed check against an input it passed in);
    its own combo check moves with it."""
    with pytest.raises(harness.ComfyHarnessError) as info:
        comfy_server.submit(prompt(reference_budget="huge"))
    assert "HTTP 400" in str(info.value) and "reference_budget must be one of 'low'" in str(info.value)
