"""Setup's schema on this ComfyUI (V3 dynamic inputs) and the flat fallback an older one gets.

The pack is imported the way ComfyUI imports a custom node folder (tools/gen_parameters.py's loader).
"""

from __future__ import annotations

import importlib

from test_parameters_live import _generator

from longmedia.comfy.setup import FRAME_INPUTS, REFERENCE_INPUTS


def _setup_module(comfyui_root):
    gen = _generator()
    gen.import_comfyui(comfyui_root)
    return importlib.import_module(f"{gen.load_pack().__name__}.nodes.setup")


def _names(inputs) -> list[str]:
    return [i.id for i in inputs]


def test_both_hosts_get_the_dynamic_family(comfy_inprocess, comfyui_root):
    setup = _setup_module(comfyui_root)
    assert setup.dynamic_inputs_available()
    schema = setup.LongMediaSetup.define_schema()
    family = next(i for i in schema.inputs if i.id == "family")
    assert [o.key for o in family.options] == ["t2va", "fl2va", "ref2va"]
    assert not set(_names(schema.inputs)) & set(FRAME_INPUTS + REFERENCE_INPUTS)


def test_without_dynamic_inputs_the_schema_is_flat(comfy_inprocess, comfyui_root, monkeypatch):
    """An older ComfyUI (no io.DynamicCombo / io.Autogrow): a `family` combo and every frame and reference
    socket listed, under the names the dynamic schema's groups use last (ref_image_1, not pictures.ref_image_1)."""
    setup = _setup_module(comfyui_root)
    monkeypatch.delattr(setup.io, "DynamicCombo")
    assert not setup.dynamic_inputs_available()
    inputs = setup.LongMediaSetup.define_schema().inputs
    family = next(i for i in inputs if i.id == "family")
    assert family.get_io_type() == "COMBO" and family.options == ["t2va", "fl2va", "ref2va"]
    names = _names(inputs)
    assert sorted(n for n in names if n in FRAME_INPUTS + REFERENCE_INPUTS) == sorted(FRAME_INPUTS + REFERENCE_INPUTS)
    assert names.index("positive") < names.index("negative") < names.index("first_frame")
