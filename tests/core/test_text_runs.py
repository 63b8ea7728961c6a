"""A packed table whose text span is split into runs (ComfyUI 0.38+ `text_token_tags`): geometry,
planner and the Sol row-span table treat the runs as one text span."""

import torch

from longmedia.comfy.passes.sampler_inputs import geometry_from_layout
from longmedia.comfy.patching.attention_override import _row_spans_for
from longmedia.h3.profiles import DeviceProfile, ModelProfile
from longmedia.planning.attention_path import default_attention_path
from longmedia.planning.planner import plan

VIDEO = torch.randn(1, 24, 5, 12, 16, generator=torch.Generator().manual_seed(12))
AUDIO = torch.randn(1, 32, 40, generator=torch.Generator().manual_seed(13))


def table(runs):
    out, a = [], 0
    for n in runs:
        out.append((a, a + n, "text"))
        a += n
    video = 5 * 6 * 8
    return out + [(a, a + 40, "audio"), (a + 40, a + 40 + video, "video")]


def test_geometry_and_plan_accept_several_text_runs():
    one = geometry_from_layout(VIDEO, AUDIO, table([50]), 30)
    split = geometry_from_layout(VIDEO, AUDIO, table([9, 30, 11]), 30)
    assert split.text_rows == one.text_rows == 50 and split.seq_len == one.seq_len
    model, device = ModelProfile.preset("h3-int8"), DeviceProfile.card(12, 64)
    a = plan(model, device, one, attention_resolver=default_attention_path)
    b = plan(model, device, split, attention_resolver=default_attention_path)
    assert a.memory_mode == b.memory_mode
    assert a.chunks == b.chunks and a.memory == b.memory


def test_sol_table_merges_text_runs_and_shifts_for_another_prompt_length():
    runs = table([9, 30, 11])
    merged = _row_spans_for(runs[-1][1], runs)
    assert merged[0] == (0, 50, "text") and merged[1:] == tuple(runs[3:])
    shorter = _row_spans_for(runs[-1][1] - 7, runs)
    assert shorter[0] == (0, 43, "text") and shorter[1][0] == 43 and shorter[-1][1] == runs[-1][1] - 7


def test_host_layout_segments_prefer_the_published_layout():
    from types import SimpleNamespace

    from longmedia.comfy.patching.attention_override import LAYOUT_KEY, host_layout_row_spans

    layout = SimpleNamespace(segments=[(0, 50, "text"), (50, 90, "audio"), (90, 330, "video")], seq_len=330)
    assert host_layout_row_spans({LAYOUT_KEY: layout}) == ((0, 50, "text"), (50, 90, "audio"), (90, 330, "video"))
    assert host_layout_row_spans({LAYOUT_KEY: layout}, 330)[-1] == (90, 330, "video")
    assert host_layout_row_spans({LAYOUT_KEY: layout}, 200) is None  # another call's layout
    assert host_layout_row_spans({}) is None and host_layout_row_spans(None) is None
