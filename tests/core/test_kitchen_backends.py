"""comfy-kitchen's attention kernels as registry backends: declarations, probes (kitchen faked: absent, too old,
no CUDA, no kernel) and the factories' calling conventions (a fake kitchen module; the real eager path:
tests/comfyui/test_kitchen_attention.py)."""

import types

import pytest
import torch
from attention_fakes import rand_qkv  # tests/core helper

from longmedia.attention import backends as builtin
from longmedia.attention import kitchen
from longmedia.attention.protocol import merge_heads
from longmedia.attention.registry import BackendUnavailableError, BuildContext

pytestmark = pytest.mark.usefixtures("comfy_execution_context")  # as ComfyUI runs nodes


def fake_kitchen(log, *, sol=True, int8=True, available=True):
    """A stand-in comfy_kitchen: exact attention behind kitchen's signatures, recording every call."""
    def sol_attn(q, k, v, tau=1.0, scale=None, sink_blocks=None, sink_q=None, key_bias=None, topk_ratio=0.0,
                 tail=True, block_len=None, coarse_gate=None, token_aug=0):
        assert q.shape == k.shape == v.shape and q.shape[-1] == 128  # kitchen's own rule: (B, T, H, 128)
        log.append(("sol_attn", tau, scale, sink_blocks, sink_q, topk_ratio))
        out = torch.nn.functional.scaled_dot_product_attention(*(t.transpose(1, 2) for t in (q, k, v)), scale=scale)
        return out.transpose(1, 2).contiguous()

    def int8_attention(q, k, v, *, scale=None, attn_mask=None):
        log.append(("int8_attention", q.shape[2], k.shape[2], scale))
        return torch.nn.functional.scaled_dot_product_attention(q, k, v, scale=scale)

    module = types.SimpleNamespace(sol_attn_is_available=lambda: available, int8_attention_is_available=lambda: available)
    if sol:
        module.sol_attn = sol_attn
    if int8:
        module.int8_attention = int8_attention
    return module


def test_declared_capabilities():
    reg = builtin.default_registry()
    sol, int8, chunked = reg.get("kitchen_sol"), reg.get("kitchen_int8"), reg.get("kitchen_sol_chunked")
    assert not (sol.exact or int8.exact or chunked.exact)
    assert (sol.takes_tau, int8.takes_tau, chunked.takes_tau) == (True, False, True)
    assert (sol.call_shape, int8.call_shape, chunked.call_shape) == ("whole_sequence", "query_chunks", "qkv_producer")
    assert sol.requires == int8.requires == "comfy-kitchen >= 0.2.36"
    assert sol.rel_l2_bound == 0.12 and int8.rel_l2_bound == 0.01
    ok = dict(dtype=torch.bfloat16, head_dim=128, seq_len=100_000, device_capability=(9, 0))
    assert sol.supports(**ok) == (True, "supported") and int8.supports(**ok) == (True, "supported")
    assert "head_dim in (128,)" in sol.supports(**(ok | dict(head_dim=64)))[1]
    assert "float32" in sol.supports(**(ok | dict(dtype=torch.float32)))[1]
    assert int8.supports(**(ok | dict(dtype=torch.float32, head_dim=96)))[0]
    assert "head_dim <= 256" in int8.supports(**(ok | dict(head_dim=320)))[1]
    assert ">= 7.5" in int8.supports(**(ok | dict(device_capability=(7, 0))))[1]
    assert ">= 8.0" in sol.supports(**(ok | dict(device_capability=(7, 5))))[1]
    assert "CUDA" in sol.supports(**(ok | dict(device_capability=None)))[1]
    # memory at the H200 measurement's size (106,496 tokens x 56 heads): workspace + the bf16 output ~ 4.2 GiB
    w = dict(seq_len=106_496, heads=56, head_dim=128, dtype_bytes=2, query_rows=106_496)
    assert abs((sol.extra_bytes(**w) + 106_496 * 56 * 128 * 2) / 2**30 - 4.2) < 0.1
    chunk = int8.extra_bytes(**(w | dict(query_rows=8192)))  # int8 q/k/v copies + scales
    assert 56 * (8192 + 2 * 106_496) * 128 < chunk < 1.01 * 56 * (8192 + 2 * 106_496) * 128
    padded = int8.extra_bytes(**(w | dict(head_dim=96, query_rows=8192)))  # pads to 128 and slices the output
    assert padded > chunk


@pytest.mark.parametrize("version, cuda, module, fragment, ok", [
    (None, True, None, "comfy-kitchen is not installed (needs comfy-kitchen >= 0.2.36)", False),
    ((0, 2, 31), True, None, "comfy-kitchen 0.2.31 is older than comfy-kitchen >= 0.2.36: it has no sol_attn", False),
    ((0, 2, 36), False, None, "need a CUDA device, torch sees none", False),
    ((0, 2, 40), True, dict(sol=False), "comfy-kitchen 0.2.40 has no sol_attn", False),
    ((0, 2, 40), True, dict(available=False), "sol_attn_is_available() is False", False),
    ((0, 2, 36), True, {}, "comfy-kitchen 0.2.36 sol_attn", True),
    ((0, 3), True, {}, "comfy-kitchen 0.3 sol_attn", True),
])
def test_probe(version, cuda, module, fragment, ok):
    def load():
        if module is None:
            raise AssertionError("the probe imported kitchen before checking version and CUDA")
        return fake_kitchen([], **module)
    probe = kitchen.kitchen_availability("sol_attn", "sol_attn_is_available", version=lambda: version, cuda=lambda: cuda,
                                  module=load)
    assert probe() == (ok, probe()[1]) and fragment in probe()[1]


def test_probe_survives_a_broken_install():
    def load():
        raise OSError("libcudart.so.13: cannot open shared object file")
    probe = kitchen.kitchen_availability("int8_attention", None, version=lambda: (0, 2, 40), cuda=lambda: True, module=load)
    assert probe() == (False, "comfy-kitchen 0.2.40 is not importable (OSError: libcudart.so.13: cannot open shared "
                              "object file)")


def test_producer_is_declared_but_never_built():
    reg = builtin.default_registry()
    ok, why = reg.get("kitchen_sol_chunked").availability()
    assert not ok and "QKV producer" in why and "projections" in why
    with pytest.raises(BackendUnavailableError, match="QKV producer"):
        reg.build("kitchen_sol_chunked", BuildContext(tau=1.0))
    with pytest.raises(BackendUnavailableError, match="QKV producer"):
        reg.get("kitchen_sol_chunked").factory(BuildContext(tau=1.0))


@pytest.mark.parametrize("text, expected", [("0.2.36", (0, 2, 36)), ("0.2.40.dev1+cu128", (0, 2, 40)),
                                            ("0.3.0rc1", (0, 3, 0)), ("1", (1,)), ("dev", ())])
def test_parse_version(text, expected):
    assert kitchen.parse_version(text) == expected


def test_sink_blocks_cover_every_range():
    assert kitchen.sink_blocks((), 1000) == [0, 0]
    assert kitchen.sink_blocks(((0, 300),), 1000) == [0, 5]
    assert kitchen.sink_blocks(((0, 300), (700, 1100)), 1000) == [0, 16]  # one hull, clipped to the keys
    assert kitchen.sink_blocks(((130, 200),), 1000) == [2, 4]


def test_sol_factory_calls_kitchen_in_its_layout(monkeypatch):
    log = []
    monkeypatch.setattr(kitchen, "import_kitchen", lambda: fake_kitchen(log))
    q, k, v = rand_qkv(seed=3, heads=2, rows=200, seq=200, dim=128)  # strided views into one fused buffer
    ctx = BuildContext(tau=0.9, sink_ranges=((0, 70),), exact_query_ranges=((0, 70),), sm_scale=0.1)
    out = builtin.default_registry().get("kitchen_sol").factory(ctx)(q, k, v, q_offset=0)
    torch.testing.assert_close(out, merge_heads(torch.nn.functional.scaled_dot_product_attention(q, k, v, scale=0.1)))
    assert log == [("sol_attn", 0.9, 0.1, [0, 2], [0, 2], 0.0)]
    topk = kitchen._sol_factory(BuildContext(topk_ratio=0.2))
    topk(q, k, v, q_offset=0)
    assert log[-1] == ("sol_attn", 1.0, None, [0, 0], [0, 0], 0.2)
    with pytest.raises(BackendUnavailableError, match="whole-sequence calls only"):
        kitchen._sol_factory(ctx)(q[:, :, :64], k, v, q_offset=0)
    with pytest.raises(BackendUnavailableError, match="tau"):
        kitchen._sol_factory(BuildContext())


def test_int8_factory_takes_query_chunks(monkeypatch):
    log = []
    monkeypatch.setattr(kitchen, "import_kitchen", lambda: fake_kitchen(log))
    q, k, v = rand_qkv(seed=4, heads=3, rows=96, seq=160, dim=32)
    out = builtin.default_registry().get("kitchen_int8").factory(BuildContext())(q, k, v, q_offset=64)
    torch.testing.assert_close(out, merge_heads(torch.nn.functional.scaled_dot_product_attention(q, k, v)))
    assert log == [("int8_attention", 96, 160, None)]


def test_factories_refuse_without_kitchen(monkeypatch):
    def missing():
        raise ImportError("No module named 'comfy_kitchen'")
    monkeypatch.setattr(kitchen, "import_kitchen", missing)
    with pytest.raises(BackendUnavailableError, match="not importable"):
        kitchen._int8_factory(BuildContext())
    monkeypatch.setattr(kitchen, "import_kitchen", lambda: fake_kitchen([], int8=False))
    with pytest.raises(BackendUnavailableError, match="has no int8_attention"):
        kitchen._int8_factory(BuildContext())


def test_this_machines_probe_is_honest():
    """Whatever kitchen this venv has, the probe explains itself (the base venv has 0.2.31, no CUDA here)."""
    for result in builtin.default_registry().check_availability(("kitchen_sol", "kitchen_int8")):
        if not torch.cuda.is_available():
            assert not result.available
        assert result.reason and "comfy-kitchen" in result.reason
