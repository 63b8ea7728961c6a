"""Test support for sequence parallelism on CPU ranks: seeded cases (a stack of clean-room blocks and their
inputs, built identically in every process), the single-process reference, a rank's run, and a spawner that
starts N gloo ranks with torch.multiprocessing, bounds their time, and leaves no process behind.
"""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.multiprocessing as mp

from ..execution.chunks import ChunkSizes
from ..execution.streamed_block import run_block
from ..h3.dims import H3Dims
from ..parallel.group import Rendezvous, open_group
from ..parallel.ulysses import run_blocks
from .reference_block import ReferenceBlock, random_mod_rows, rope_table

# the modulation row of each row-span kind with two timestep rows (6 rows: t_row * 3 + tag), as ComfyUI tags them
SPAN_ROWS = {"text": 1, "video": 0, "audio": 2, "cond": 3, "ref_img": 3, "cond_audio": 5, "ref_audio": 5}
# a segmented job's later pass: its context (cond video rows and their audio) before the targets
SEGMENTED_SPANS = (("text", 9), ("cond", 8), ("cond_audio", 6), ("audio", 10), ("video", 16))


@dataclass(frozen=True)
class SPCase:
    """One parallel-vs-single comparison: dims, rows, blocks, chunk sizes and the modulation layout."""

    name: str
    dims: H3Dims
    seq_len: int
    blocks: int = 2
    chunks: ChunkSizes = ChunkSizes()
    layout: str = "random"     # random spans / per_token rows / segmented pass spans
    query_chunk: int = 0
    seed: int = 0


def case_mod_rows(case: SPCase, g: torch.Generator):
    if case.layout == "segmented":
        rows, a = [], 0
        for kind, n in SEGMENTED_SPANS:
            rows.append((a, a + n, SPAN_ROWS[kind]))
            a += n
        assert a == case.seq_len, (a, case.seq_len)
        return rows
    spans = random_mod_rows(case.seq_len, g)
    if case.layout == "per_token":  # ComfyUI 0.38's masked jobs: a per-token LongTensor row in some spans
        spans = [(a, b, torch.randint(0, 6, (b - a,), generator=g) if i % 2 == 0 else row)
                 for i, (a, b, row) in enumerate(spans)]
        assert any(isinstance(r, torch.Tensor) for _, _, r in spans)
    return spans


def case_inputs(case: SPCase):
    """(blocks, x, t_emb, mod_rows, rope): random, the same in every process for one case."""
    g = torch.Generator().manual_seed(case.seed)
    blocks = [ReferenceBlock(case.dims).randomize_(g) for _ in range(case.blocks)]
    x = torch.randn(case.seq_len, case.dims.hidden, generator=g)
    t_emb = torch.randn(2, case.dims.time_embed_dim, generator=g)
    mod_rows = case_mod_rows(case, g)
    rope = rope_table(case.seq_len, case.dims, torch.float32, None, g)
    return blocks, x, t_emb, mod_rows, rope


def single_process(case: SPCase) -> torch.Tensor:
    """The reference: the blocks one after another on the whole sequence, in one process."""
    blocks, x, t_emb, mod_rows, rope = case_inputs(case)
    for block in blocks:
        x = run_block(block, x, t_emb, mod_rows, rope, chunks=case.chunks)
    return x


def rank_main(rank: int, rdv: Rendezvous, cases: tuple[SPCase, ...], out_dir: str) -> None:
    """One rank: join the group, run every case sharded, rank 0 saves each full output as <name>.pt."""
    torch.set_num_threads(1)
    group = open_group(rdv, rank)
    for case in cases:
        blocks, x, t_emb, mod_rows, rope = case_inputs(case)
        out = run_blocks(group, blocks, x, t_emb, mod_rows, rope, chunks=case.chunks, query_chunk=case.query_chunk)
        if rank == 0:
            torch.save(out, Path(out_dir) / f"{case.name}.pt")


def measure_main(rank: int, rdv: Rendezvous, cases: tuple[SPCase, ...], out_dir: str) -> None:
    """One rank: each case's first block on this rank's rows under the live-bytes tracker; rank r writes
    <name>.<r>.peak (the hidden state's bytes included, as `block_memory` counts it)."""
    from ..parallel.ulysses import ShardedPass
    from .live_bytes import LiveBytes

    torch.set_num_threads(1)
    group = open_group(rdv, rank)
    for case in cases:
        blocks, x, t_emb, mod_rows, rope = case_inputs(case)
        sp = ShardedPass(group, x.shape[0], mod_rows, rope)
        h = sp.enter(x)
        with LiveBytes() as lb:
            sp.block(blocks[0], h, t_emb, chunks=case.chunks, query_chunk=case.query_chunk)
        peak = lb.peak_bytes + h.numel() * h.element_size()
        (Path(out_dir) / f"{case.name}.{rank}.peak").write_text(str(peak))


def spawn_ranks(world: int, target, args: tuple, timeout_s: float = 120.0) -> list[int]:
    """Start `world` processes `target(rank, rdv, *args)` over a fresh file:// rendezvous; join them within
    `timeout_s`, kill any still running, and return their exit codes (no process is left behind)."""
    ctx = mp.get_context("spawn")
    with tempfile.TemporaryDirectory(prefix="lm_sp_") as tmp:
        rdv = Rendezvous(f"file://{os.path.join(tmp, 'rendezvous')}", world, timeout_s=timeout_s)
        procs = [ctx.Process(target=target, args=(rank, rdv, *args), daemon=True) for rank in range(world)]
        for p in procs:
            p.start()
        try:
            for p in procs:
                p.join(timeout_s)
        finally:
            for p in procs:
                if p.is_alive():
                    p.kill()
                    p.join(10)
        return [p.exitcode for p in procs]


LOOPBACK_DIMS = H3Dims(hidden=64, heads=4, head_dim=32, ffn=128, text_dim=48, rope_inv_freq_len=4, time_embed_dim=32)
LOOPBACK_CASES = (
    SPCase("loopback_streamed", LOOPBACK_DIMS, 29, chunks=ChunkSizes(4, 0, 6, 0), layout="per_token", seed=11),
)


def main(argv: list[str] | None = None) -> int:
    """`python -m longmedia.testing.sequence_parallel OUT_DIR`: one rank of an env:// launch (MASTER_ADDR,
    MASTER_PORT, RANK, WORLD_SIZE set by the launcher, one process per rank, on one host or several)."""
    import sys

    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m longmedia.testing.sequence_parallel OUT_DIR  (env: MASTER_ADDR MASTER_PORT RANK WORLD_SIZE)")
        return 2
    rdv = Rendezvous("env://", int(os.environ["WORLD_SIZE"]), timeout_s=120)
    rank_main(int(os.environ["RANK"]), rdv, LOOPBACK_CASES, args[0])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
