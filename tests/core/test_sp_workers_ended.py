"""Rank 0 ends its sequence-parallel workers after a failure or a Cancel (`SPRanks.close(clean=False)`,
`SPRanks.failure`), including a worker that would never leave by itself.

The worker here has joined the gloo group and is busy outside any collective (as a slow model load is), so nothing
rank 0 does to the group reaches it: only the kill path ends it. The ranks object is rank 0's own (`SPRanks`),
given this worker and this group in place of the ones `start` spawns (its workers import ComfyUI).
"""

from __future__ import annotations

import os
import tempfile
import time

import pytest
import torch
import torch.multiprocessing as mp

from longmedia.comfy.sp.ranks import JOIN_S, LongMediaWorkerError, SPRanks
from longmedia.parallel.group import Rendezvous, open_group

BUSY_S = 120.0  # far past the test's bound: a worker still alive after the kill path has not been ended


def busy_worker(rank: int, rdv: Rendezvous, busy_s: float) -> None:
    """Join the group, then stay busy outside any collective (a load that takes minutes)."""
    torch.set_num_threads(1)
    open_group(rdv, rank)
    time.sleep(busy_s)


@pytest.mark.parametrize("path", ["close", "failure"])
def test_a_worker_that_would_not_leave_by_itself_is_ended(path):
    ctx = mp.get_context("spawn")
    with tempfile.TemporaryDirectory(prefix="lm_sp_kill_") as tmp:
        rdv = Rendezvous(f"file://{os.path.join(tmp, 'rendezvous')}", 2, timeout_s=60)
        worker = ctx.Process(target=busy_worker, args=(1, rdv, BUSY_S), daemon=True)
        worker.start()
        ranks = SPRanks((torch.device("cpu"), torch.device("cpu")), "gloo")
        try:
            ranks.procs, ranks.errors = [worker], ctx.Queue()
            ranks.group = open_group(rdv, 0)          # returns once the worker has joined: it is in the group
            assert worker.is_alive()
            started = time.monotonic()
            if path == "close":
                ranks.close(clean=False)            # a Cancel or an exception mid-run
                words = None
            else:
                error = ranks.failure(RuntimeError("Connection closed by peer (test)"))
                assert isinstance(error, LongMediaWorkerError)
                words = str(error)
            took = time.monotonic() - started
            assert not worker.is_alive(), f"{path}: the worker outlived rank 0's kill path"
            assert worker.exitcode is not None and worker.exitcode < 0, worker.exitcode   # ended by a signal
            assert took < JOIN_S, f"{path} took {took:.1f} s"
            if words is not None:
                assert f"rank 1 (cpu) killed by signal {-worker.exitcode}" in words and "every worker ended" in words
        finally:
            if worker.is_alive():
                worker.kill()
                worker.join(10)
            ranks.close(clean=False)
