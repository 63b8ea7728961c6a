"""Sol's key summaries outlive the attention phase: the block's AttentionFn keeps them (memoised per K/V) until the
block call returns, so they are live in its MLP phase too, and the planner counts them there as well as in the
attention phase (`AttentionPath.held_bytes`)."""

import contextlib

import pytest
import torch

from longmedia.attention.backends import default_registry
from longmedia.attention.registry import BuildContext
from longmedia.execution.chunks import ChunkSizes
from longmedia.execution.memory import block_memory
from longmedia.execution.streamed_block import run_block
from longmedia.h3.dims import H3Dims
from longmedia.h3.profiles import DeviceProfile, ModelProfile
from longmedia.job.geometry import build_geometry
from longmedia.planning.planner import plan
from longmedia.planning.types import PlanRequest
from longmedia.testing.live_bytes import LiveBytes
from longmedia.testing.reference_block import ReferenceBlock, make_block_inputs

pytestmark = pytest.mark.usefixtures("comfy_execution_context")  # as ComfyUI runs nodes

DIMS = H3Dims(hidden=96, heads=4, head_dim=32, ffn=256, rope_inv_freq_len=4, time_embed_dim=32)
SEQ = 700


def _summaries(heads: int, seq_len: int, head_dim: int, elem_bytes: int) -> int:
    """A mean key and a summed value per 64-key block and head (written out here, not read from the code)."""
    return 2 * heads * -(-seq_len // 64) * head_dim * elem_bytes


def _live_at_mlp(attention) -> int:
    """Bytes the block made that are still live when its MLP phase starts (the hidden state and inputs excluded)."""
    block = ReferenceBlock(DIMS).randomize_(torch.Generator().manual_seed(0))
    x, t_emb, rows, rope = make_block_inputs(DIMS, SEQ, generator=torch.Generator().manual_seed(1))
    seen = []
    with LiveBytes() as live:
        @contextlib.contextmanager
        def phase(name):
            if name == "mlp":
                seen.append(sum(n for ref, n in live.live.values() if not ref.expired()))
            yield

        run_block(block, x, t_emb, rows, rope, chunks=ChunkSizes(128, 0, 128), attention=attention, phase=phase)
    return seen[0]


def test_sol_key_summaries_are_live_in_the_block_mlp_phase():
    """What the count below rests on: the same block run with Sol holds its key summaries (the fp32 reference's:
    fp32) more than with exact attention when the MLP phase starts."""
    registry = default_registry()
    sol = registry.build("sol_reference", BuildContext(tau=1.0))
    exact = registry.build("sdpa", BuildContext())
    assert _live_at_mlp(sol) - _live_at_mlp(exact) == _summaries(DIMS.heads, SEQ, DIMS.head_dim, 4) > 0


@pytest.mark.parametrize("name, elem_bytes", [("sol", 2), ("sol_reference", 4)])
def test_sol_backends_declare_the_summaries_they_hold(name, elem_bytes):
    """bf16 q/k/v: the Triton kernel keeps its summaries in q's dtype, the fp32 reference in fp32."""
    spec = default_registry().get(name)
    facts = dict(seq_len=109_190, heads=56, head_dim=128, dtype_bytes=2)
    held = spec.held_bytes(**facts)
    assert held == _summaries(56, 109_190, 128, elem_bytes)
    assert held < spec.extra_bytes(**facts, query_rows=16384)  # part of what a call allocates


def test_a_plan_whose_mlp_phase_is_larger_counts_sol_summaries_there():
    """A streamed attention with a stock MLP (mlp_chunk_tokens=0) makes the MLP the block's larger phase; Sol's key
    summaries are live in it, so the block's activation bytes are the MLP's plus the summaries."""
    model = ModelProfile.preset("h3-int8")
    g = build_geometry(1344, 768, seconds=10)
    p = plan(model, DeviceProfile.card(48, 128), g,
             PlanRequest(attention_mode="sol", memory_mode="low_vram", mlp_chunk_tokens=0))
    assert p.attention.backend == "sol" and p.chunks.streams_attention and not p.chunks.streams_mlp
    stages = block_memory(g.seq_len, model.dims, p.chunks, 2, int8_linears=True)
    summaries = _summaries(model.dims.heads, g.seq_len, model.dims.head_dim, 2)
    assert stages.mlp_bytes > stages.attention_bytes + p.attention.extra_bytes  # the MLP phase is the peak
    assert p.memory.block_activation_bytes == stages.mlp_bytes + summaries
    assert any("counted in its MLP phase too" in r for r in p.reasons)
    assert p.attention.held_bytes == summaries


def test_exact_attention_holds_nothing_past_its_calls():
    model = ModelProfile.preset("h3-int8")
    g = build_geometry(1344, 768, seconds=10)
    p = plan(model, DeviceProfile.card(48, 128), g,
             PlanRequest(attention_mode="existing", memory_mode="low_vram", mlp_chunk_tokens=0))
    stages = block_memory(g.seq_len, model.dims, p.chunks, 2, int8_linears=True)
    assert p.attention.held_bytes == 0
    assert p.memory.block_activation_bytes == max(stages.attention_bytes, stages.mlp_bytes)
