"""`RankGroup.any_rank`, the agreement the ranks' stop before a block rests on (`parallel.ulysses.agreed_stop`): three
gloo ranks (one thread each) ask in turn; every rank gets True exactly when some rank asked, and `run_blocks` stops
every rank before the same block when one rank alone asks."""

from __future__ import annotations

import os
import tempfile
import threading

import torch

from longmedia.h3.dims import H3Dims
from longmedia.parallel.group import Rendezvous, open_group
from longmedia.parallel.ulysses import run_blocks
from longmedia.testing.sequence_parallel import SPCase, case_inputs

DIMS = H3Dims(hidden=64, heads=4, head_dim=32, ffn=128, text_dim=48, rope_inv_freq_len=4, time_embed_dim=32)
WORLD = 3
JOIN_S = 60.0


def _on_ranks(work) -> dict:
    """`work(group)` on WORLD ranks (one thread each); {rank: its result or its error's repr}."""
    out = {}

    def one(rank, rdv):
        try:
            torch.set_num_threads(1)
            out[rank] = work(open_group(rdv, rank))
        except BaseException as error:  # noqa: BLE001 - reported by the test's assertion
            out[rank] = repr(error)

    with tempfile.TemporaryDirectory(prefix="lm_any_rank_") as tmp:
        rdv = Rendezvous(f"file://{os.path.join(tmp, 'rendezvous')}", WORLD, timeout_s=30)
        threads = [threading.Thread(target=one, args=(r, rdv), daemon=True) for r in range(WORLD)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(JOIN_S)
        assert not any(t.is_alive() for t in threads), "a rank is still waiting"
    return out


def test_any_rank_is_true_on_every_rank_exactly_when_one_asks():
    rounds = [None, 0, 2, None, 1]     # which rank asks in each round (None: no rank)
    out = _on_ranks(lambda g: [g.any_rank(g.rank == asker) for asker in rounds])
    want = [asker is not None for asker in rounds]
    assert out == {r: want for r in range(WORLD)}, out


def test_run_blocks_stops_every_rank_before_the_block_one_rank_asked_at():
    """Rank 1 alone asks before block 2 (of 3); every rank returns None, having started blocks 0 and 1 only."""
    case = SPCase("stop", DIMS, 23, blocks=3, seed=31)

    def work(group):
        blocks, x, t_emb, mod_rows, rope = case_inputs(case)
        started = []
        asked = iter([False, False, group.rank == 1])

        def stop_requested():
            started.append(len(started))
            return next(asked)

        out = run_blocks(group, blocks, x, t_emb, mod_rows, rope, chunks=case.chunks, stop_requested=stop_requested)
        return out is None, started

    assert _on_ranks(work) == {r: (True, [0, 1, 2]) for r in range(WORLD)}
