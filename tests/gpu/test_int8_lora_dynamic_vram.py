"""An INT8 H3 with a LoRA under Dynamic VRAM, every weight from ComfyUI's cast buffers (issue 46): LongMedia's
streamed phases cast the LoRA'd weight the way stock's INT8 layers do, requantized to INT8, so they hold INT8 bytes
and run stock's weight. In a child process (see lora_int8_process.py): comfy-aimdo initialises before torch."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from child_run import run_child

HERE = Path(__file__).resolve().parent
pytestmark = pytest.mark.skipif(not os.environ.get("LONGMEDIA_COMFYUI_ROOT", "").strip(),
                                reason="LONGMEDIA_COMFYUI_ROOT is not set (source tools/gpu/bootstrap.sh)")


@pytest.fixture(scope="module")
def child(tmp_path_factory):
    return run_child("lora_int8_process.py", tmp_path_factory, "int8_lora_dynamic_vram.json")


def test_the_lora_is_loaded_dynamically_and_moves_stock(child):
    assert child.get("patcher", {}).get("dynamic") is True, child.get("_tail")
    assert child["patcher"]["lora_patches"] > 0
    assert child["stock_lora"]["ok"] and child["stock_plain"]["ok"], child.get("_tail")
    assert child["lora_moves_stock"] > 1e-3


def test_the_streamed_cast_hands_out_stocks_requantized_int8_weight(child):
    c = child.get("cast", {})
    assert c.get("ok"), c.get("traceback") or child.get("_tail")
    assert c["has_lowvram_function"], c  # the LoRA is applied at cast time (the case under test)
    assert c["stock"]["quantized"] and c["stock"]["element_bytes"] == 1
    assert c["ours"]["quantized"] and c["ours"]["element_bytes"] == 1, c  # INT8 bytes, not a bf16 copy
    assert c["ours_equal_stock_values"] and c["ours_equal_stock_output"], c
    assert not c["old"]["quantized"], c  # the control: without requantizing the cast is a dequantized weight


def test_normal_mode_with_the_lora_equals_stock_bit_for_bit(child):
    r = child["normal_lora"]
    assert r.get("ok"), r.get("traceback") or child.get("_tail")
    assert r["equal_stock"], r


def test_low_vram_with_the_lora_is_as_close_to_stock_as_without_it(child):
    lora, plain, old = child["low_vram_lora"], child["low_vram_plain"], child["low_vram_lora_old_cast"]
    for r in (lora, plain, old):
        assert r.get("ok"), r.get("traceback") or child.get("_tail")
        assert r["finite"]
    assert lora["rel_stock"] <= 2e-2 and plain["rel_stock"] <= 2e-2, (lora, plain)
    # the requantized cast runs stock's weight: its distance to stock is the chunking's alone, below the old cast's
    assert lora["rel_stock"] < old["rel_stock"], (lora, old)
