"""Decode & Save's writer runs one chunk behind the VAE on its own thread (longmedia.media.encode_ahead): the
hand-over returns while the previous chunk is still being written, never more than one chunk waits, chunks arrive
in order and unchanged, and the writer's errors reach the caller."""

from __future__ import annotations

import threading

import pytest
import torch

from longmedia.media.encode_ahead import EncodeAhead


def _worker_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("longmedia-mp4")]


def test_the_hand_over_returns_while_the_last_chunk_is_written_and_waits_for_it_before_the_next():
    release = threading.Event()
    started, written, modes = [], [], []

    def write(frames):
        started.append(frames)
        modes.append(torch.is_inference_mode_enabled())
        assert release.wait(10)
        written.append(frames)

    chunks = [torch.randn(17, 4, 6, 3) for _ in range(3)]
    ahead = EncodeAhead(write)
    ahead(chunks[0])                               # returns at once: the VAE goes on with the next chunk
    for _ in range(100):
        if started:
            break
        threading.Event().wait(0.01)
    assert len(started) == 1 and written == []     # chunk 0 is being written, in the worker

    second = threading.Thread(target=ahead, args=(chunks[1],))
    second.start()
    second.join(0.3)
    assert second.is_alive() and len(started) == 1   # chunk 1 waits until chunk 0 is written: two in RAM at most
    release.set()
    second.join(10)
    ahead(chunks[2])
    ahead.wait()                                   # what the VAE's sink calls before it copies the next chunk off
    assert len(written) == 3                       # the device: then the one before is written, RAM holds one
    ahead.finish()
    assert [id(c) for c in written] == [id(c) for c in chunks] and ahead.handed == 3
    assert all(modes)                              # the worker runs inside inference mode, as ComfyUI's nodes do
    assert not _worker_threads()


def test_a_writer_error_reaches_the_caller_at_the_next_hand_over_and_discard_drops_it():
    def write(frames):
        raise OSError("disk full")

    ahead = EncodeAhead(write)
    ahead(torch.randn(2, 2, 2, 3))
    with pytest.raises(OSError, match="disk full"):
        ahead(torch.randn(2, 2, 2, 3))
    ahead.finish()

    ahead = EncodeAhead(write)
    ahead(torch.randn(2, 2, 2, 3))
    with pytest.raises(OSError, match="disk full"):
        ahead.finish()

    ahead = EncodeAhead(write)
    ahead(torch.randn(2, 2, 2, 3))
    ahead.discard()                                # after a Cancel: the error in flight is not the one reported
    assert not _worker_threads()


def test_inline_the_writer_runs_in_the_caller_s_thread_before_the_hand_over_returns():
    written = []
    ahead = EncodeAhead(lambda frames: written.append((frames, threading.current_thread().name)), threaded=False)
    chunk = torch.randn(3, 2, 2, 3)
    ahead(chunk)
    assert written == [(chunk, threading.current_thread().name)]
    ahead.wait()
    ahead.finish()
    assert not _worker_threads()
