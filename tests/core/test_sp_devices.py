"""The Sampler's `devices` list names only GPUs the host has (issue 47): on a CPU-only ComfyUI, 'gpu:0,gpu:1' used to
resolve both labels to the CPU and run two CPU ranks without a word; 'gpu:3' on a one-GPU host fell back to the
default device. Each is refused, naming `devices` and the devices the host has. ComfyUI's resolver is faked here with
its 0.33.0 behaviour (model_management.resolve_gpu_device_option: the Nth of get_all_torch_devices, else None)."""

from __future__ import annotations

import sys
import types

import pytest
import torch

from longmedia.comfy.sp.devices import parse_devices
from longmedia.errors import LongMediaInputError


def fake_comfy(monkeypatch, devices: list[str]) -> None:
    mm = types.ModuleType("comfy.model_management")
    all_devices = [torch.device(d) for d in devices]

    def resolve_gpu_device_option(option):
        if option in (None, "default"):
            return None
        if option == "cpu":
            return torch.device("cpu")
        if option.startswith("gpu:"):
            idx = int(option[4:])
            return all_devices[idx] if 0 <= idx < len(all_devices) else None
        return None

    mm.resolve_gpu_device_option = resolve_gpu_device_option
    mm.get_all_torch_devices = lambda: list(all_devices)
    mm.get_torch_device = lambda: all_devices[0]
    package = types.ModuleType("comfy")
    package.model_management = mm
    monkeypatch.setitem(sys.modules, "comfy", package)
    monkeypatch.setitem(sys.modules, "comfy.model_management", mm)


def test_gpu_labels_on_a_cpu_only_host_are_refused(monkeypatch):
    fake_comfy(monkeypatch, ["cpu"])
    with pytest.raises(LongMediaInputError, match="names a GPU this host does not have") as info:
        parse_devices("gpu:0,gpu:1", "cpu")
    assert info.value.input_name == "devices" and "cpu,cpu" in str(info.value)


def test_a_gpu_index_past_the_host_s_gpus_is_refused(monkeypatch):
    fake_comfy(monkeypatch, ["cuda:0", "cuda:1"])
    with pytest.raises(LongMediaInputError, match="gpu:3 names a GPU this host does not have") as info:
        parse_devices("gpu:0,gpu:3", "cuda:0")
    assert "gpu:0, gpu:1" in str(info.value)


def test_the_host_s_own_gpus_and_cpu_ranks_still_resolve(monkeypatch):
    fake_comfy(monkeypatch, ["cuda:0", "cuda:1"])
    assert parse_devices("gpu:0,gpu:1", "cuda:0") == (torch.device("cuda:0"), torch.device("cuda:1"))
    fake_comfy(monkeypatch, ["cpu"])
    assert parse_devices("cpu,cpu", "cpu") == (torch.device("cpu"), torch.device("cpu"))
    assert parse_devices("", "cpu") == ()


@pytest.mark.parametrize("single", ["cuda:7", "2", "-1", "cuda:0", "gpu:1", 2])
def test_a_single_entry_other_than_the_model_s_device_is_refused(monkeypatch, single):
    """Issue 49: a single `devices` entry used to be ignored without a word (one device ran, the report silent)."""
    fake_comfy(monkeypatch, ["cpu"])
    with pytest.raises(LongMediaInputError) as info:
        parse_devices(single, "cpu")
    assert info.value.input_name == "devices"


def test_the_model_s_own_device_alone_is_one_device(monkeypatch):
    fake_comfy(monkeypatch, ["cuda:0", "cuda:1"])
    assert parse_devices("gpu:0", "cuda:0") == parse_devices("cuda:0", "cuda:0") == parse_devices(" ", "cuda:0") == ()
    with pytest.raises(LongMediaInputError, match="model's own device"):
        parse_devices("gpu:1", "cuda:0")
