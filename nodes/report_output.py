"""The outputs Sampler, Hi-Res and Refiner share: latents, the report as pretty-printed JSON, the plan panel's data."""

from __future__ import annotations

import json

from comfy_api.latest import io

REPORT_INDENT = 2   # the `report` STRING output is read by people (Show Text, a saved file) as well as by tools


def report_output(result) -> io.NodeOutput:
    """A stage result (output, denoised, report) as the node's outputs and the web panel's `longmedia_report`."""
    report = result.report
    data = report.to_dict()
    return io.NodeOutput(result.output, result.denoised, json.dumps(data, indent=REPORT_INDENT, default=str),
                         ui={"longmedia_report": [data | {"summary": report.summary_lines()}]})
