"""LongMedia's ComfyUI attention override, against a fake ComfyUI attention func."""

import pytest
import torch
from attention_fakes import ALL, fake_registry, rand_qkv  # tests/core helper

from longmedia.attention import backends as builtin
from longmedia.attention.dispatcher import resolve_attention
from longmedia.attention.protocol import sdpa_attention
from longmedia.attention.schedule import SolSettings
from longmedia.comfy.patching.attention_override import (
    OVERRIDE_KEY,
    ROW_SPANS_KEY,
    LongMediaAttentionOverride,
    SolRowSpansWarning,
    existing_attention_fn,
    install_attention_override,
    progress_from_options,
)

pytestmark = pytest.mark.usefixtures("comfy_execution_context")  # as ComfyUI runs nodes


class Box:
    """Stands in for ComfyUI's AttentionTensorContainer (single-owner peek/take)."""

    def __init__(self, tensor):
        self.tensor = tensor

    def peek(self):
        return self.tensor

    def take(self):
        tensor, self.tensor = self.tensor, None
        return tensor


def refuse(*args, **kwargs):
    raise AssertionError("the installed attention was called although the override routes this call")


def cpu_choice(mode="auto", **kw):
    return resolve_attention(mode, seq_len=kw.pop("seq_len", 160), heads=4, head_dim=32, dtype=torch.float32,
                             device_capability=None, available=ALL, **kw)


def test_override_routes_h3_calls_and_passes_the_rest_through():
    q, k, v = rand_qkv(5, rows=160)
    opts = {}
    override = install_attention_override(opts, cpu_choice())
    assert opts[OVERRIDE_KEY] is override and override.previous is None
    call = dict(mask=None, skip_reshape=True, transformer_options=opts, _inside_attn_wrapper=True)
    torch.testing.assert_close(override(refuse, q, k, v, 4, **call), sdpa_attention(q, k, v))
    per_head = override(refuse, q, k, v, 4, **(call | dict(skip_output_reshape=True)))
    torch.testing.assert_close(per_head, torch.nn.functional.scaled_dot_product_attention(q, k, v))
    seen = []

    def func(*args, **kwargs):
        seen.append((args, kwargs))
        return "stock"
    mask = torch.zeros(160, 160)
    assert override(func, q, k, v, 4, **(call | dict(mask=mask))) == "stock"  # masks are not ours
    assert seen[-1][0][:4] == (q, k, v, 4) and seen[-1][1]["mask"] is mask
    existing = install_attention_override(opts, cpu_choice("existing"))
    assert existing.previous is None  # re-installing replaces ours, never stacks
    assert existing(func, q, k, v, 4, **call) == "stock" and seen[-1][1] == call


def test_override_hands_passed_calls_to_a_previous_override():
    q, k, v = rand_qkv(6, rows=160)
    calls = []

    def previous(func, *args, **kwargs):
        calls.append(func)
        return "previous"
    previous.container_function = lambda *args, **kwargs: "previous containers"
    opts = {OVERRIDE_KEY: previous}
    override = install_attention_override(opts, cpu_choice("existing"))
    assert override.previous is previous
    assert override(refuse, q, k, v, 4, mask=None, skip_reshape=True, transformer_options=opts) == "previous"
    assert calls == [refuse]
    assert override.container_function(Box(q), Box(k), Box(v), 4, mask=None, skip_reshape=True,
                                       transformer_options=opts) == "previous containers"


def test_override_container_path_takes_the_tensors():
    q, k, v = rand_qkv(7, rows=160)
    boxes = (Box(q), Box(k), Box(v))
    opts = {}
    override = install_attention_override(opts, cpu_choice(), registry=builtin.default_registry())
    out = override.container_function(*boxes, 4, mask=None, skip_reshape=True, transformer_options=opts)
    torch.testing.assert_close(out, sdpa_attention(q, k, v))
    assert all(b.tensor is None for b in boxes)  # single owner: released to the backend


def test_override_reads_sigma_progress_and_segments():
    log = []
    reg = fake_registry(log)
    settings = SolSettings(min_tokens=0, curve="linear", dense_percent=0.5)
    choice = resolve_attention("scheduled_sol", seq_len=160, heads=4, head_dim=32, dtype=torch.float32,
                               device_capability=None, registry=reg, sol_settings=settings)
    q, k, v = rand_qkv(8, rows=160)
    sigmas = torch.tensor([1.0, 0.8, 0.6, 0.4, 0.2, 0.0])
    table = ((0, 30, "text"), (30, 60, "audio"), (60, 160, "video"))
    opts = {"sample_sigmas": sigmas, ROW_SPANS_KEY: table}
    override = install_attention_override(opts, choice, registry=reg)
    # progress over the 5 model sigmas: 0, 0.25, 0.5, 0.75, 1; the Sol half runs tau 1.3 -> 0.8
    for sigma, name, tau in ((1.0, "exact_fake", None), (0.8, "exact_fake", None), (0.4, "sol_fake", 1.05),
                             (0.2, "sol_fake", 0.8)):
        opts["sigmas"] = torch.tensor([sigma])
        override(refuse, Box(q).take(), k, v, 4, mask=None, skip_reshape=True, transformer_options=opts)
        assert log[-1][0] == name and log[-1][1].tau == pytest.approx(tau)
    assert log[-1][1].sink_ranges == ((0, 60),)
    assert progress_from_options(opts) == 1.0 and progress_from_options({}) is None
    del opts[ROW_SPANS_KEY]
    with pytest.warns(SolRowSpansWarning, match="row spans"):
        override(refuse, q, k, v, 4, mask=None, skip_reshape=True, transformer_options=opts)
    assert log[-1][0] == "exact_fake"
    other = LongMediaAttentionOverride(choice, row_spans=table, registry=reg)
    other(refuse, q[:, :, :150], k[:, :, :150], v[:, :, :150], 4, mask=None, skip_reshape=True,
          transformer_options=opts)  # a 10-token-shorter prompt (uncond): the table shifts with the text
    assert log[-1][0] == "sol_fake" and log[-1][1].sink_ranges == ((0, 50),)
    with pytest.warns(SolRowSpansWarning):  # not the packed sequence at all (the text refiner)
        other(refuse, q[:, :, :20], k[:, :, :20], v[:, :, :20], 4, mask=None, skip_reshape=True,
              transformer_options=opts)
    assert log[-1][0] == "exact_fake"


def test_existing_attention_fn_calls_comfy_as_h3_does():
    q, k, v = rand_qkv(9)
    seen = []

    def installed(q_, k_, v_, heads, **kwargs):
        seen.append((q_, k_, v_, heads, kwargs))
        return sdpa_attention(q_.take(), k_.take(), v_.take())

    def foreign(func, *args, **kwargs):
        return func(*args, **kwargs)
    ours = LongMediaAttentionOverride(cpu_choice())
    fn = existing_attention_fn({OVERRIDE_KEY: ours, "x": 1}, 4, attention=installed, container=Box)
    torch.testing.assert_close(fn(q, k, v, q_offset=64), sdpa_attention(q, k, v))
    q_, k_, v_, heads, kwargs = seen[-1]
    assert isinstance(q_, Box) and heads == 4
    assert kwargs == dict(mask=None, skip_reshape=True, transformer_options={"x": 1})  # ours bypassed
    existing_attention_fn({}, 4, attention=installed, container=Box)(q[:, :2], k[:, :2], v[:, :2], q_offset=0)
    assert seen[-1][3] == 2  # a head group passes its own head count
    existing_attention_fn({OVERRIDE_KEY: foreign}, 4, attention=installed, container=Box)(q, k, v, q_offset=0)
    assert seen[-1][4]["transformer_options"] == {OVERRIDE_KEY: foreign}  # a foreign override is honoured
    plain = []
    existing_attention_fn(None, 4, attention=lambda *a, **kw: plain.append(a) or "ok", container=None)(
        q, k, v, q_offset=0)
    assert plain[-1][:3] == (q, k, v)  # no containers in older ComfyUI
