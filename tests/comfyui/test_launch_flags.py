"""The ComfyUI launch flags LongMedia's advice names exist in this ComfyUI, and do what the advice says (issue 30):
`--disable-async-offload` leaves no offload streams, and with none ComfyUI makes no block prefetch queue;
`--disable-pinned-memory` turns its pinned-memory budget off."""

from __future__ import annotations

import re

import pytest

from longmedia.report.oom import PREFETCH_OFF_FLAG

FLAGS = (PREFETCH_OFF_FLAG, "--disable-pinned-memory")


@pytest.mark.parametrize("flag", FLAGS)
def test_the_flag_is_one_of_comfyui_s(comfy_inprocess, flag):
    from comfy.cli_args import parser

    assert flag in parser._option_string_actions, f"{flag} is not a ComfyUI launch flag"


def test_no_offload_streams_means_no_prefetch_queue(comfy_inprocess):
    import comfy.model_management as mm
    import comfy.model_prefetch as mp
    from comfy.cli_args import parser

    assert parser.parse_args([PREFETCH_OFF_FLAG]).disable_async_offload
    source = open(mm.__file__, encoding="utf-8").read()
    assert re.search(r"if args\.disable_async_offload:\s*\n\s*NUM_STREAMS = 0", source)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(mm, "NUM_STREAMS", 0)
        assert mp.make_prefetch_queue([object()], "cuda:0", {"prefetch_dynamic_vbars": True}) is None


def test_the_plan_reads_disable_pinned_memory_from_comfyui_s_args(comfy_inprocess, monkeypatch):
    """The Sampler's and Setup's host-RAM plan read --disable-pinned-memory where ComfyUI keeps it (`args`)."""
    from comfy.cli_args import args

    from longmedia.comfy.host.memory import pinned_memory_enabled

    monkeypatch.setattr(args, "disable_pinned_memory", True)
    assert not pinned_memory_enabled()
    monkeypatch.setattr(args, "disable_pinned_memory", False)
    assert pinned_memory_enabled()
