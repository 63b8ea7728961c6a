"""Ulysses sequence parallelism on gloo CPU ranks equals the single-process blocks within fp32 1e-5."""

import tempfile
from pathlib import Path

import pytest
import torch

from longmedia.execution.chunks import ChunkSizes
from longmedia.h3.dims import H3Dims
from longmedia.parallel.partition import RowShards, head_counts
from longmedia.parallel.shards import shard_mod_rows, shard_rope, shard_rows
from longmedia.testing.reference_block import rope_table
from longmedia.testing.sequence_parallel import SPCase, rank_main, single_process, spawn_ranks

DIMS = H3Dims(hidden=64, heads=4, head_dim=32, ffn=128, text_dim=48, rope_inv_freq_len=4, time_embed_dim=32)
ODD = H3Dims(hidden=48, heads=3, head_dim=32, ffn=96, text_dim=40, rope_inv_freq_len=4, time_embed_dim=24)

CASES = (
    SPCase("stock", DIMS, 37, seed=1),
    SPCase("streamed_per_token", DIMS, 37, chunks=ChunkSizes(5, 3, 7, 0), layout="per_token", query_chunk=11, seed=2),
    SPCase("head_groups_odd_heads", ODD, 41, chunks=ChunkSizes(6, 0, 9, 2), seed=3),
    SPCase("segmented_pass", DIMS, 49, chunks=ChunkSizes(7, 0, 7, 0), layout="segmented", seed=4),
    SPCase("fewer_rows_than_ranks", DIMS, 3, seed=5),
)


def rel(a, b):
    return ((a - b).norm() / b.norm()).item()


@pytest.mark.parametrize("world", [2, 4])
def test_ranks_equal_the_single_process(world):
    with tempfile.TemporaryDirectory() as out:
        codes = spawn_ranks(world, rank_main, (CASES, out), timeout_s=240)
        assert codes == [0] * world
        for case in CASES:
            ref = single_process(case)
            got = torch.load(Path(out) / f"{case.name}.pt")
            assert got.shape == ref.shape and torch.isfinite(got).all()
            assert rel(got, ref) <= 1e-5, (case.name, rel(got, ref))
            start = case_inputs_x(case)
            assert rel(ref, start) > 1e-2, case.name  # the blocks really changed the rows


def case_inputs_x(case):
    from longmedia.testing.sequence_parallel import case_inputs
    return case_inputs(case)[1]


@pytest.mark.parametrize("heads,world,want", [(56, 2, (28, 28)), (56, 3, (19, 19, 18)), (56, 5, (12, 11, 11, 11, 11)),
                                              (3, 4, (1, 1, 1, 0))])
def test_head_counts_cover_every_head(heads, world, want):
    assert head_counts(heads, world) == want and sum(want) == heads


@pytest.mark.parametrize("seq_len,world", [(37, 2), (37, 4), (3, 4), (104_000, 3)])
def test_row_shards_cover_every_row_once(seq_len, world):
    shards = RowShards(seq_len, world)
    spans = [shards.span(r) for r in range(world)]
    assert spans[0][0] == 0 and spans[-1][1] == seq_len
    assert all(a[1] == b[0] for a, b in zip(spans, spans[1:]))
    assert shards.padded_len - seq_len < world


def test_shards_slice_rows_mod_rows_and_rope_consistently():
    g = torch.Generator().manual_seed(9)
    shards = RowShards(10, 4)  # rows 0-2, 3-5, 6-8, 9 + two padding rows
    x = torch.randn(10, 5, generator=g)
    rope = rope_table(10, DIMS, torch.float32, None, g)
    per_token = torch.randint(0, 6, (6,), generator=g)
    mod_rows = [(0, 4, 1), (4, 10, per_token)]
    for rank in range(4):
        a, b = shards.span(rank)
        xs, rs = shard_rows(x, shards, rank), shard_rope(rope, shards, rank)
        assert xs.shape[0] == 3 and torch.equal(xs[: b - a], x[a:b]) and not xs[b - a:].any()
        assert torch.equal(rs[:, : b - a], rope[:, a:b]) and not rs[:, b - a:].any()
        for lo, hi, row in shard_mod_rows(mod_rows, shards, rank):
            assert 0 <= lo < hi <= b - a
            if isinstance(row, torch.Tensor):
                assert torch.equal(row, per_token[a + lo - 4:a + hi - 4])
    assert shard_mod_rows(mod_rows, shards, 3) == [(0, 1, shard_mod_rows(mod_rows, shards, 3)[0][2])]


def test_env_launch_on_loopback_with_separate_processes(tmp_path):
    """The multi-host launch (docs/USER_GUIDE: env:// rendezvous), as separate processes on 127.0.0.1."""
    import os
    import socket
    import subprocess
    import sys

    from longmedia.testing.sequence_parallel import LOOPBACK_CASES

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    procs = []
    for rank in range(2):
        env = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE="2")
        procs.append(subprocess.Popen([sys.executable, "-m", "longmedia.testing.sequence_parallel", str(tmp_path)],
                                      env=env, cwd=Path(__file__).resolve().parents[2]))
    try:
        codes = [p.wait(timeout=120) for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    assert codes == [0, 0]
    for case in LOOPBACK_CASES:
        got = torch.load(tmp_path / f"{case.name}.pt")
        assert rel(got, single_process(case)) <= 1e-5


MEMORY_DIMS = H3Dims(hidden=96, heads=4, head_dim=32, ffn=256, text_dim=48, rope_inv_freq_len=4, time_embed_dim=32)
MEMORY_CASES = (SPCase("mem_stock", MEMORY_DIMS, 1500, blocks=1, seed=21),
                SPCase("mem_streamed", MEMORY_DIMS, 1500, blocks=1, chunks=ChunkSizes(128, 0, 128), seed=22),
                SPCase("mem_groups", MEMORY_DIMS, 1500, blocks=1, chunks=ChunkSizes(96, 32, 200, 2), seed=23))


def test_a_rank_allocates_within_the_planned_bytes(tmp_path):
    """block_memory at a rank's rows plus `exchange_buffer_bytes` bounds what a rank allocates (live-bytes tracker)."""
    from longmedia.execution.memory import block_memory
    from longmedia.parallel.cost import exchange_buffer_bytes
    from longmedia.testing.sequence_parallel import measure_main

    world = 2
    assert spawn_ranks(world, measure_main, (MEMORY_CASES, str(tmp_path)), timeout_s=240) == [0] * world
    for case in MEMORY_CASES:
        rows = RowShards(case.seq_len, world).rows_per_rank
        bm = block_memory(rows, case.dims, case.chunks, dtype_bytes=4)
        planned = max(bm.attention_bytes + exchange_buffer_bytes(case.seq_len, world, case.dims, case.chunks, 4),
                      bm.mlp_bytes)
        for rank in range(world):
            measured = int((tmp_path / f"{case.name}.{rank}.peak").read_text())
            assert measured <= planned, (case.name, rank, measured, planned)
            assert measured >= 0.7 * planned, (case.name, rank, measured, planned)  # and tight
