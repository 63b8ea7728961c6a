"""attention_mode=auto and the attention the user runs ComfyUI with (HostAttention, faked here; the detection
on a real ComfyUI: tests/comfyui/test_host_attention.py)."""

import pytest
import torch
from attention_fakes import ALL  # tests/core helper

from longmedia.attention import backends as builtin
from longmedia.attention.choice import call_extra_bytes
from longmedia.attention.dispatcher import AttentionModeError, resolve_attention
from longmedia.attention.existing import existing_spec
from longmedia.attention.host import HostAttention
from longmedia.h3.profiles import DeviceProfile, ModelProfile
from longmedia.job.geometry import build_geometry
from longmedia.planning.planner import plan
from longmedia.planning.types import PlanRequest

GIB = 2**30
S = 100_000
H3 = dict(heads=56, head_dim=128, dtype=torch.bfloat16)

SAGE = HostAttention("attention_sage", "--use-sage-attention", True)
FLASH = HostAttention("attention_flash", "--use-flash-attention", True)
KITCHEN = HostAttention("attention_comfy_kitchen_int8", "--use-ck-attention", True)
SPLIT = HostAttention("attention_split", "--use-split-cross-attention", True)
BASIC = HostAttention("attention_basic", "set by my_pack.attention (not a ComfyUI flag)", True)
OVERRIDE = HostAttention("my_nodes.patched_attention", "an optimized_attention_override a node put on the model", True)
PYTORCH = HostAttention("attention_pytorch", "ComfyUI's default", False)
PYTORCH_FLAG = HostAttention("attention_pytorch", "--use-pytorch-cross-attention", True)
SUB_QUAD = HostAttention("attention_sub_quad", "ComfyUI's fallback when PyTorch attention is off", False)

# host, capability, budget GiB, streamed -> backend, exact, query chunk, reason fragment
TABLE = [
    (None, (9, 0), None, False, "sdpa_cudnn", True, 0, "fastest exact backend"),
    (PYTORCH, (9, 0), None, False, "sdpa_cudnn", True, 0, "its default pick: swapped for auto's own choice"),
    (SUB_QUAD, (9, 0), None, True, "sdpa_cudnn", True, 0, "its default pick: swapped"),
    (PYTORCH_FLAG, (9, 0), None, False, "sdpa_cudnn", True, 0, "PyTorch attention: swapped"),
    (SAGE, (9, 0), None, False, "existing", False, 0, "keeps attention_sage (--use-sage-attention)"),
    (SAGE, (9, 0), None, True, "existing", False, 0, "called once per query chunk by the streamed executor"),
    (SAGE, (9, 0), 4.2, True, "existing", False, 4096, "quantises attention: not exact"),
    (SAGE, (9, 0), 4, True, "sdpa_cudnn", True, 16384, "needs 4.01 GiB even at 64 query rows, over 4.00 GiB"),
    (SAGE, None, None, False, "sdpa", True, 0, "cannot run in the planned path (needs a CUDA device): swapped"),
    (FLASH, (8, 6), None, False, "existing", True, 0, "keeps attention_flash (--use-flash-attention)"),
    (KITCHEN, (9, 0), 4.2, True, "existing", False, 4096, "keeps attention_comfy_kitchen_int8 (--use-ck-attention)"),
    (SPLIT, (9, 0), 4, True, "existing", True, 16384, "keeps attention_split"),
    (OVERRIDE, (9, 0), None, True, "existing", True, 0, "keeps my_nodes.patched_attention (an optimized_attention_override"),
    (BASIC, (9, 0), None, False, "existing", True, 0, "keeps attention_basic"),
    (BASIC, (9, 0), 4, True, "sdpa_cudnn", True, 16384, "attention_basic (set by my_pack.attention (not a ComfyUI "
                                                        "flag)), the attention chosen for ComfyUI, cannot run"),
]


@pytest.mark.parametrize("host, cap, budget, streamed, backend, exact, chunk, fragment", TABLE)
def test_auto_keeps_the_chosen_attention_unless_default_or_it_cannot_run(host, cap, budget, streamed, backend, exact,
                                                                       chunk, fragment):
    choice = resolve_attention("auto", seq_len=S, **H3, device_capability=cap, available=ALL, streamed=streamed,
                               budget_bytes_for_attention=None if budget is None else int(budget * GIB),
                               host_attention=host, int8_kv_storage=False)
    assert (choice.backend, choice.exact, choice.query_chunk_tokens, choice.fits) == (backend, exact, chunk, True), \
        choice.reason
    assert fragment in choice.reason
    assert choice.host == host and not choice.uses_sol
    if backend != "existing" and host is not None:  # the reason says which happened, first
        assert choice.reasons[0].startswith("auto: ") and ("swapped" in choice.reasons[0])


def test_sage_working_set_counts_its_quantised_copies():
    """Sage (and kitchen's int8) quantise q, k and v per call: the kept path reserves those bytes, so a budget
    that fits bf16 K/V plus the rows of PyTorch attention needs smaller query chunks under sage."""
    kw = dict(seq_len=S, **H3, device_capability=(9, 0), available=ALL, streamed=True,
              budget_bytes_for_attention=int(4.2 * GIB))
    sage, flash = (resolve_attention("auto", host_attention=h, **kw) for h in (SAGE, FLASH))
    assert sage.query_chunk_tokens < flash.query_chunk_tokens
    rows = 4096
    extra = call_extra_bytes(sage, query_rows=rows, heads=56, head_dim=128, dtype=torch.bfloat16)
    assert extra == 56 * (rows + 2 * S) * 128
    assert call_extra_bytes(flash, query_rows=rows, heads=56, head_dim=128, dtype=torch.bfloat16) == 0
    spec = existing_spec(builtin.default_registry(), SAGE)
    assert (spec.exact, spec.cpu) == (False, False)


def test_explicit_modes_keep_their_meaning():
    kw = dict(seq_len=S, **H3, device_capability=(9, 0), available=ALL)
    existing = resolve_attention("existing", host_attention=PYTORCH, **kw)
    assert existing.backend == "existing" and "attention_pytorch (ComfyUI's default) runs as installed" in existing.reason
    sage = resolve_attention("existing", host_attention=SAGE, **kw)
    assert not sage.exact and "not exact" in sage.reason
    for host in (SAGE, PYTORCH, None):
        sol = resolve_attention("sol", host_attention=host, **kw)
        assert (sol.backend, sol.exact_backend) == ("sol", "sdpa_cudnn")
    with pytest.raises(AttentionModeError, match="host_attention"):
        resolve_attention("auto", host_attention="attention_sage", **kw)


def test_host_attention_fact():
    assert [h.kind for h in (SAGE, FLASH, KITCHEN, SPLIT, BASIC, OVERRIDE, PYTORCH, SUB_QUAD)] == \
        ["sage", "flash", "kitchen_int8", "split", "basic", "other", "pytorch", "sub_quad"]
    assert [h.swappable for h in (SAGE, PYTORCH, PYTORCH_FLAG, SUB_QUAD, SPLIT)] == [False, True, True, True, False]
    assert not SAGE.exact and not KITCHEN.exact and FLASH.exact
    with pytest.raises(TypeError, match="chosen"):
        HostAttention("attention_sage", "x", "yes")
    with pytest.raises(TypeError, match="function"):
        HostAttention("", "x", True)


@pytest.mark.parametrize("memory_mode", ["normal", "low_vram"])
def test_the_plan_keeps_the_chosen_attention_and_says_so(memory_mode):
    """Through the planner: auto keeps sage (streamed per query chunk in low_vram), and swaps PyTorch attention."""
    model, device = ModelProfile.preset("h3-int8"), DeviceProfile.card(80, 256, compute_capability=(9, 0))
    g = build_geometry(1280, 704, seconds=5.0)
    kept = plan(model, device, g, PlanRequest(memory_mode=memory_mode, host_attention=SAGE))
    assert (kept.attention.backend, kept.attention.exact) == ("existing", False), kept.attention.reasons
    assert any("keeps attention_sage (--use-sage-attention)" in r for r in kept.attention.reasons)
    assert kept.chunks.streams_attention == (memory_mode == "low_vram")
    swapped = plan(model, device, g, PlanRequest(memory_mode=memory_mode, host_attention=PYTORCH))
    assert swapped.attention.backend != "existing"
    assert "its default pick: swapped" in swapped.attention.reasons[0]
