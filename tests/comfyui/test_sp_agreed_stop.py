"""The ranks' agreed stop before a block (`sp.block.sp_replacement`), with nothing else able to stop them.

Two gloo ranks run the sequence-parallel block replacement side by side (one thread each): rank 0 with what
`sp.run.install_sp` hands it (ComfyUI's `processing_interrupted` to ask, `comfy_interrupt` to stop), rank 1 with
what a worker's `sp.ranks._serve` hands it (never asks, `RanksStopped` to stop). The blocks are the clean-room
reference blocks on plain torch weights: no ComfyUI op runs inside them, so ComfyUI's per-op interrupt check is
not there, and only the agreement can stop a rank.
"""

from __future__ import annotations

import os
import tempfile
import threading

import torch

from longmedia.execution.chunks import ChunkSizes
from longmedia.execution.linear import plain_weights
from longmedia.h3.dims import H3Dims
from longmedia.parallel.group import Rendezvous, open_group
from longmedia.testing.reference_block import ReferenceBlock, random_mod_rows, rope_table

DIMS = H3Dims(hidden=64, heads=4, head_dim=32, ffn=128, text_dim=48, rope_inv_freq_len=4, time_embed_dim=32)
ROWS = 37
JOIN_S = 60.0


def _inputs(seed: int):
    g = torch.Generator().manual_seed(seed)
    blocks = [ReferenceBlock(DIMS).randomize_(g) for _ in range(2)]
    args = {"img": torch.randn(ROWS, DIMS.hidden, generator=g), "t_emb": torch.randn(2, DIMS.time_embed_dim, generator=g),
            "mod_segments": random_mod_rows(ROWS, g), "rope_freqs": rope_table(ROWS, DIMS, torch.float32, None, g),
            "transformer_options": {}}
    return blocks, args


def _rank(rank: int, rdv: Rendezvous, seed: int, before_block_1: threading.Barrier, seen: list, outcome: dict) -> None:
    """One rank: blocks 0 and 1 of one model call through the SP replacement; records which blocks started and
    how block 1 ended."""
    import comfy.model_management as mm

    from longmedia.comfy.patching.block_patch import comfy_interrupt
    from longmedia.comfy.sp.block import PassState, RanksStopped, sp_replacement

    torch.set_num_threads(1)
    with torch.inference_mode():
        group = open_group(rdv, rank)
        blocks, args = _inputs(seed)
        asks, stops = (mm.processing_interrupted, comfy_interrupt) if rank == 0 else (lambda: False, lambda: None)
        state = PassState()
        fns = [sp_replacement(b, i, 1, group, state, ChunkSizes(), lambda opts, heads: None, asks, stops,
                              weights=plain_weights, on_block=lambda i, edge: seen.append((rank, i, edge)))
               for i, b in enumerate(blocks)]
        x = fns[0](args, {})["img"]
        outcome[(rank, 0)] = "ran" if x.shape == (-(-ROWS // 2), DIMS.hidden) else f"ran, {tuple(x.shape)}"
        before_block_1.wait(JOIN_S)          # rank 0's Cancel comes here, between the two blocks
        try:
            fns[1](dict(args, img=x), {})
            outcome[(rank, 1)] = "ran"
        except RanksStopped:
            outcome[(rank, 1)] = "RanksStopped"
        except mm.InterruptProcessingException:
            outcome[(rank, 1)] = "interrupted"


def _recorded(rank: int, *args) -> None:
    """`_rank`, its unexpected error kept for the test to report (a thread's exception reaches nobody)."""
    outcome = args[-1]
    try:
        _rank(rank, *args)
    except BaseException as error:  # noqa: BLE001 - reported by the test's assertion
        outcome[(rank, "error")] = repr(error)


def test_a_cancel_on_rank_0_stops_every_rank_before_the_next_block(comfy_inprocess):
    import comfy.model_management as mm

    seen, outcome = [], {}
    cancel = threading.Barrier(2, action=lambda: mm.interrupt_current_processing(True))   # the Cancel button
    with tempfile.TemporaryDirectory(prefix="lm_sp_stop_") as tmp:
        rdv = Rendezvous(f"file://{os.path.join(tmp, 'rendezvous')}", 2, timeout_s=30)
        threads = [threading.Thread(target=_recorded, args=(r, rdv, 7, cancel, seen, outcome), daemon=True,
                                    name=f"longmedia-test-rank{r}") for r in range(2)]
        try:
            for t in threads:
                t.start()
            for t in threads:
                t.join(JOIN_S)
            assert not any(t.is_alive() for t in threads), "a rank is still running"
        finally:
            mm.interrupt_current_processing(False)
    assert outcome.get((0, 0)) == outcome.get((1, 0)) == "ran", outcome     # block 0 ran on both ranks
    assert sorted(e for e in seen if e[1] == 0) == [(0, 0, "end"), (0, 0, "start"), (1, 0, "end"), (1, 0, "start")]
    assert all(i == 0 for _, i, _ in seen), f"a rank started block 1 after rank 0's Cancel: {seen}"
    assert outcome[(0, 1)] == "interrupted" and outcome[(1, 1)] == "RanksStopped", outcome
