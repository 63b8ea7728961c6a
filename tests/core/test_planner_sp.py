"""The planner's sp_degree dimension: a rank's activations at its rows, host RAM per rank, the cost model."""

import json

import pytest

from longmedia.errors import LongMediaInputError
from longmedia.execution.memory import block_memory
from longmedia.h3.profiles import DeviceProfile, ModelProfile
from longmedia.job.geometry import build_geometry
from longmedia.parallel.cost import exchange_buffer_bytes, link_bytes_per_block
from longmedia.planning.attention_path import default_attention_path
from longmedia.planning.planner import plan
from longmedia.planning.stage_times import block_fit
from longmedia.planning.types import PlanRequest

INT8 = ModelProfile.preset("h3-int8")
G14 = build_geometry(1344, 768, seconds=14.4)


def _plan(vram, request, ram=128, g=G14):
    return plan(INT8, DeviceProfile.card(vram, ram), g, request, attention_resolver=default_attention_path)


def test_one_rank_is_the_plan_without_the_dimension():
    a, b = _plan(24, PlanRequest()), _plan(24, PlanRequest(sp_degree=1))
    assert a == b and a.sp is None and not any("sequence parallel" in r for r in a.reasons)


@pytest.mark.parametrize("degree", [2, 3, 4])
def test_a_rank_plans_its_rows_and_the_exchange_buffers(degree):
    fixed = dict(memory_mode="low_vram", sol_qkv_chunk_tokens=4096, sol_out_proj_chunk_tokens=4096,
                 mlp_chunk_tokens=4096)  # the same chunks: with more room the search would take larger ones
    one, many = _plan(16, PlanRequest(**fixed)), _plan(16, PlanRequest(**fixed, sp_degree=degree))
    rows = -(-G14.seq_len // degree)
    assert many.sp.rows_per_rank == rows and sum(many.sp.heads_per_rank) == 56
    want = block_memory(rows, INT8.dims, many.chunks, 2, int8_linears=True)
    extra = exchange_buffer_bytes(G14.seq_len, degree, INT8.dims, many.chunks, 2)
    assert many.memory.block_activation_bytes == max(want.attention_bytes + extra, want.mlp_bytes)
    assert many.memory.block_activation_bytes < one.memory.block_activation_bytes


def test_more_ranks_let_a_less_constrained_mode_fit():
    one, two = _plan(16, PlanRequest()), _plan(16, PlanRequest(sp_degree=4))
    order = ("normal", "low_vram", "ultra_low_vram")
    assert order.index(two.memory_mode) < order.index(one.memory_mode) or (
        two.chunks.qkv_chunk_tokens > one.chunks.qkv_chunk_tokens)


def test_the_cost_model_is_stated_and_its_speedup_follows_it():
    p = _plan(141, PlanRequest(sp_degree=2, sp_link_gbps=50.0))
    sp, s = p.sp, G14.seq_len
    a, b = block_fit()
    rows = -(-s // 2)
    assert sp.block_seconds_rank_compute / sp.block_seconds_single == pytest.approx((a * rows + b * s * rows) /
                                                                                     (a * s + b * s * s))
    assert sp.link_bytes_per_block == link_bytes_per_block(s, 2, INT8.dims, 2) == int(4 * rows * 7168 * 2 / 2)
    assert sp.block_seconds_link == pytest.approx(sp.link_bytes_per_block / 50e9)
    assert 1.0 < sp.expected_speedup < 2.0 and sp.link_source == "declared"
    text = next(r for r in p.reasons if r.startswith("sequence parallel on 2 ranks"))
    assert f"x{sp.expected_speedup:.2f}" in text and "50 GB/s" in text
    slow = _plan(141, PlanRequest(sp_degree=2, sp_link_gbps=1.0)).sp
    assert slow.expected_speedup < sp.expected_speedup
    assert _plan(141, PlanRequest(sp_degree=2)).sp.link_source == "assumed"
    assert json.loads(p.to_json())["sp"]["expected_speedup"] == pytest.approx(sp.expected_speedup)


def test_host_ram_is_planned_per_rank():
    one, four = _plan(16, PlanRequest(), ram=64), _plan(16, PlanRequest(sp_degree=4), ram=64)
    budget = DeviceProfile.card(16, 64).pinned_budget_bytes
    assert four.pinning.pinned_bytes <= budget // 4 < one.pinning.pinned_bytes or one.pinning.pinned_bytes <= budget // 4
    assert four.sp.pinned_bytes_per_rank == four.pinning.pinned_bytes
    assert four.sp.host_ram_bytes_per_rank == INT8.weight_bytes
    assert "split 4 ways" in next(r for r in four.reasons if r.startswith("sequence parallel on"))


def test_auto_attention_is_exact_under_sequence_parallelism():
    p = _plan(24, PlanRequest(sp_degree=2))
    assert p.attention.exact and any("existing (exact) attention" in r for r in p.reasons)


@pytest.mark.parametrize("kwargs,name", [({"sp_degree": 0}, "sp_degree"), ({"sp_degree": 9}, "sp_degree"),
                                         ({"sp_degree": 2, "attention_mode": "sol"}, "attention_mode"),
                                         ({"sp_link_gbps": 0.0}, "sp_link_gbps")])
def test_bad_sequence_parallel_requests_are_refused(kwargs, name):
    with pytest.raises(LongMediaInputError) as e:
        PlanRequest(**kwargs)
    assert e.value.input_name == name if hasattr(e.value, "input_name") else name in str(e.value)
