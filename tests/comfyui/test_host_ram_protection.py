"""LongMedia keeps host RAM for its own allocations on a machine whose RAM ComfyUI's pins have filled: in real
ComfyUI (0.33.0 and upstream), on the tiny checkpoints, with the machine's RAM facts stood in (a 32 GB machine
whose pins left 1 GiB available). Before the sampled latent moves into host RAM, the Sampler frees pins through
ComfyUI's pin API until the latent and ComfyUI's own 2 GiB floor fit; the output is unchanged."""

from __future__ import annotations

import torch
from harness import run_longmedia, sampler_job

from longmedia.planning.host_ram import PIN_BUDGET_FLOOR_BYTES
from longmedia.planning.types import PlanRequest
from longmedia.testing.small_machine import SmallMachine
from longmedia.units import GIB


def _latent_bytes(parts) -> int:
    return sum(p.numel() * p.element_size() for p in parts)


def test_the_sampler_frees_pins_before_the_latent_moves_into_host_ram(sampler_env):
    request = PlanRequest(memory_mode="low_vram", attention_mode="existing", sol_qkv_chunk_tokens=64)
    (rv, ra), _, plain = run_longmedia(sampler_env, request, *sampler_job(sampler_env, "fp32"))
    machine = SmallMachine(available=GIB, pinned=27 * GIB)  # a 32 GB machine whose pins left 1 GiB
    result = sampler_env["core"].run_sampler(*sampler_job(sampler_env, "fp32"), request, ram_facts=machine.facts())
    ov, oa = result.output["samples"].unbind()
    assert torch.equal(ov, rv) and torch.equal(oa, ra)  # protection changes no value
    events = [e for e in result.report.host_ram.events if "latent" in e.what]
    assert len(events) == 1, result.report.host_ram.events
    wanted = _latent_bytes((ov, oa))
    assert events[0].wanted_bytes == wanted
    assert events[0].available_before_bytes < wanted + PIN_BUDGET_FLOOR_BYTES <= events[0].available_after_bytes
    assert wanted + PIN_BUDGET_FLOOR_BYTES - GIB in machine.asked  # through the pin API, the shortfall asked for
    report = result.report.to_dict()["host_ram"]
    assert report["freed_pin_bytes"] >= wanted + PIN_BUDGET_FLOOR_BYTES - GIB
    assert any("moves to host RAM" in line for line in result.report.summary_lines())
    # with RAM to spare nothing is freed
    assert not [e for e in plain.report.host_ram.events if "latent" in e.what and e.freed_pin_bytes]


def test_stock_blocks_reading_ahead_still_equal_stock_bit_for_bit(sampler_env):
    """Read-ahead on stock blocks (normal mode, the host's attention) goes through a block replacement that runs
    ComfyUI's own block with the same arguments: the output is stock's bit for bit, and every block of every model
    call told the read-ahead it started."""
    from longmedia.testing.tiny_h3 import TINY_DIMS

    request = PlanRequest(memory_mode="normal", attention_mode="existing")
    (sv, sa), _ = [t["samples"].unbind() for t in sampler_env["ncs"].SamplerCustomAdvanced.execute(
        *sampler_job(sampler_env, "int8")).result]
    result = sampler_env["core"].run_sampler(*sampler_job(sampler_env, "int8"), request, read_ahead_blocks=2)
    ov, oa = result.output["samples"].unbind()
    assert torch.equal(ov, sv) and torch.equal(oa, sa)
    host = result.report.host_ram
    calls = len(result.report.steps)
    assert calls >= 2 and host.prefetch_blocks == TINY_DIMS.num_blocks * calls
    assert any("reads the next blocks' weights ahead" in n for n in result.report.notes)


def test_block_file_slices_find_the_ranges_comfyuis_loader_records(comfy_inprocess, tiny_checkpoints):
    """ComfyUI's Dynamic-VRAM loader (`comfy.utils.load_safetensors`, which needs comfy-aimdo's mmap and so a GPU)
    records each tensor's file range on its storage as a `comfy.memory_management.TensorFileSlice`; LongMedia reads
    that record. Here the records are made with ComfyUI's own type, from the checkpoint's header, on a tiny H3
    checkpoint: LongMedia finds each block weight's range, the bytes there are the tensor's, and the kernel takes
    the read-ahead advice for them."""
    import inspect
    import json
    import os
    import struct
    import threading

    import comfy.memory_management
    import comfy.utils
    from safetensors.torch import load_file

    from longmedia.comfy.host.ram import block_file_slices
    from longmedia.execution.disk_prefetch import DiskPrefetch

    loader = inspect.getsource(comfy.utils.load_safetensors)
    assert "_comfy_tensor_file_slice" in loader and "TensorFileSlice(" in loader  # the record LongMedia reads
    assert comfy.memory_management.TensorFileSlice._fields == ("file_ref", "lock", "offset", "size")

    path = str(tiny_checkpoints["int8"])
    tensors = load_file(path)
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n))
    keys = [k for k in header if k.startswith("blocks.0.") and k.endswith(".weight")]
    handle = open(path, "rb")  # noqa: SIM115 - held by the records, as ComfyUI's loader holds its file handle
    lock = threading.Lock()

    class Holder(torch.nn.Module):
        def __init__(self, weight):
            super().__init__()
            self.weight = torch.nn.Parameter(weight, requires_grad=False)

    holders = []
    for k in keys:
        start, end = header[k]["data_offsets"]
        t = tensors[k].clone()
        t.untyped_storage()._comfy_tensor_file_slice = comfy.memory_management.TensorFileSlice(
            handle, lock, 8 + n + start, end - start)
        holders.append(Holder(t))
    try:
        slices = block_file_slices(torch.nn.Sequential(*holders))
        assert len(slices) == len(keys) >= 4
        for s, k in zip(slices, keys):
            assert s.size == tensors[k].numel() * tensors[k].element_size()
            with open(path, "rb") as f:
                f.seek(s.offset)
                assert f.read(s.size) == tensors[k].contiguous().view(torch.uint8).numpy().tobytes()
        if hasattr(os, "posix_fadvise"):
            prefetch = DiskPrefetch(lambda i: slices, blocks=1, ahead=1)
            prefetch.on_block(0)
            prefetch.close()
            assert prefetch.failures == [] and prefetch.advised_bytes == sum(s.size for s in slices)
    finally:
        handle.close()
