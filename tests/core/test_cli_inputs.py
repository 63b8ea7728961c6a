"""`longmedia plan` as a new user meets it: bad input sweep (rc 2, one line naming the flag), honest output.

Every case runs in-process through `longmedia.cli.main`; corrupt, truncated and foreign checkpoints are built
in tmp_path from a real tiny H3 checkpoint.
"""

from __future__ import annotations

import json
import re
import struct
from pathlib import Path

import pytest

from longmedia.cli import main
from longmedia.cli_args import build_parser
from longmedia.errors import LongMediaInputError
from longmedia.h3.profiles import DeviceProfile, ModelProfile
from longmedia.job.geometry import build_geometry
from longmedia.planning.planner import plan
from longmedia.planning.types import PlanRequest
from longmedia.testing.tiny_h3 import write_tiny_h3


def _file(header: object, data: bytes = b"") -> bytes:
    text = json.dumps(header).encode() if not isinstance(header, bytes) else header
    return struct.pack("<Q", len(text)) + text + data


def _t(dtype="F32", shape=(2,), offsets=(0, 8)) -> dict:
    return {"dtype": dtype, "shape": list(shape), "data_offsets": list(offsets)}


def _tiny_parts(tmp_path: Path) -> tuple[bytes, dict, bytes]:
    raw = Path(write_tiny_h3(tmp_path / "tiny.safetensors", variant="int8")).read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    return raw, json.loads(raw[8:8 + n]), raw[8 + n:]


def _edited_tiny(edit):
    def build(tmp_path: Path) -> bytes:
        _, header, body = _tiny_parts(tmp_path)
        return _file(edit(header), body)
    return build


def _drop_all_but(*keep):
    return _edited_tiny(lambda h: {k: v for k, v in h.items() if k == "__metadata__" or k.endswith(keep)})


def _meta(key, value):
    def edit(h):
        h["__metadata__"][key] = value
        return h
    return _edited_tiny(edit)


def _quant_tensor_not_json(tmp_path: Path) -> bytes:
    _, header, body = _tiny_parts(tmp_path)
    name, info = next((k, v) for k, v in header.items() if k.endswith(".comfy_quant"))
    begin, end = info["data_offsets"]
    return _file(header, body[:begin] + b"\xff" * (end - begin) + body[end:])


FILES = {
    "empty": lambda p: b"",
    "four bytes": lambda p: b"\x01\x02\x03\x04",
    "header length past the end": lambda p: struct.pack("<Q", 4096) + b"{}",
    "header length 2**63": lambda p: struct.pack("<Q", 2**63) + b"{}",
    "header length 0": lambda p: struct.pack("<Q", 0),
    "bad json": lambda p: _file(b"{nope"),
    "not utf-8": lambda p: _file(b"\xff\xfe{}"),
    "header is a list": lambda p: _file([1, 2, 3]),
    "header is a string": lambda p: _file("weights"),
    "header {a: 1}": lambda p: _file({"a": 1}),
    "no data_offsets": lambda p: _file({"a": {"dtype": "F32", "shape": [2]}}, bytes(8)),
    "no dtype": lambda p: _file({"a": {"shape": [2], "data_offsets": [0, 8]}}, bytes(8)),
    "no shape": lambda p: _file({"a": {"dtype": "F32", "data_offsets": [0, 8]}}, bytes(8)),
    "dtype is a number": lambda p: _file({"a": _t(dtype=5)}, bytes(8)),
    "shape is a string": lambda p: _file({"a": _t(shape="ab")}, bytes(8)),
    "negative shape": lambda p: _file({"a": _t(shape=(-2,))}, bytes(8)),
    "boolean shape": lambda p: _file({"a": _t(shape=(True, True))}, bytes(8)),
    "offsets reversed": lambda p: _file({"a": _t(offsets=(8, 0))}, bytes(8)),
    "one offset": lambda p: _file({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0]}}, bytes(8)),
    "offsets a string": lambda p: _file({"a": {"dtype": "F32", "shape": [2], "data_offsets": "0-8"}}, bytes(8)),
    "offsets overlap": lambda p: _file({"a": _t(), "b": _t(offsets=(4, 12))}, bytes(12)),
    "offsets leave a gap": lambda p: _file({"a": _t(), "b": _t(offsets=(12, 20))}, bytes(20)),
    "shape does not match bytes": lambda p: _file({"a": _t(shape=(3,))}, bytes(8)),
    "metadata is a list": lambda p: _file({"__metadata__": ["a"], "a": _t()}, bytes(8)),
    "metadata values not strings": lambda p: _file({"__metadata__": {"a": 1}, "a": _t()}, bytes(8)),
    "tensor entry is a number": lambda p: _file({"a": 7}),
    "truncated to a third": lambda p: (lambda raw: raw[: len(raw) // 3])(_tiny_parts(p)[0]),
    "last byte missing": lambda p: _tiny_parts(p)[0][:-1],
    "bytes after the last tensor": lambda p: _tiny_parts(p)[0] + b"\0" * 16,
    "foreign model": lambda p: _file({"a.weight": _t(), "b.weight": _t(shape=(1,), offsets=(8, 12))}, bytes(12)),
    "only the H3 marker keys": _drop_all_but("video_patch_proj.weight", "audio_patch_proj.weight"),
    "metadata config not JSON": _meta("config", "{not json"),
    "metadata config heads zero": _meta("config", json.dumps({"transformer": {"num_attention_heads": 0}})),
    "quantisation metadata not JSON": _meta("_quantization_metadata", "[1,"),
    "comfy_quant tensor not JSON": _quant_tensor_not_json,
}


@pytest.mark.parametrize("name", list(FILES))
def test_bad_checkpoint_is_one_line_naming_the_file(name, tmp_path, capsys):
    path = tmp_path / "model.safetensors"
    path.write_bytes(FILES[name](tmp_path))
    assert main(["plan", "--model", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(f"longmedia plan: error: --model={path} is not allowed"), err
    assert "Traceback" not in err


@pytest.mark.parametrize("model, what", [("dir", "directory"), ("missing.safetensors", "No such file"),
                                         ("weights.bin", "a checkpoint file (.safetensors or .sft)")])
def test_model_paths_that_are_not_checkpoints(model, what, tmp_path, capsys):
    (tmp_path / "dir.safetensors").mkdir()
    arg = str(tmp_path / ("dir.safetensors" if model == "dir" else model))
    assert main(["plan", "--model", arg]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--model=" in err and what in err, err


# (arguments, the flag the one-line message must name)
BAD = [
    *[(["--vram-gb", v], "--vram-gb") for v in ("1", "0", "-16", "nan", "inf", "100000")],
    *[(["--ram-gb", v], "--ram-gb") for v in ("2", "nan", "1e9")],
    *[(["--width", v], "--width") for v in ("7", "0", "-1344", "100000", "wide")],
    *[(["--height", v], "--height") for v in ("31", "20000")],
    *[(["--seconds", v], "--seconds") for v in ("0", "-5", "nan", "inf", "150.38", "4000", "1e-9", "ten")],
    *[(["--frames", v], "--frames") for v in ("0", "-1", "3700", "100000")],
    (["--seconds", "5", "--frames", "100"], "--frames"),
    *[(["--fps", v], "--fps") for v in ("30", "0")],
    *[(["--text-tokens", v], "--text-tokens") for v in ("-1", "100000")],
    *[(["--segment-seconds", v], "--segment-seconds") for v in ("0", "-1", "nan", "200")],
    (["--segment-seconds", "5", "--context-frames", "23"], "--context-frames"),
    (["--segment-seconds", "5", "--context-frames", "0"], "--context-frames"),
    (["--context-frames", "22"], "--context-frames"),
    *[(["--vram-activation-reserve-mb", v], "--vram-activation-reserve-mb")
      for v in ("16000", "100000", "-1", "1048577")],
    (["--vram-gb", "8", "--vram-activation-reserve-mb", "8000"], "--vram-activation-reserve-mb"),
    *[(["--inter-block-vram-guard-mb", v], "--inter-block-vram-guard-mb") for v in ("1048576", "20000", "-1")],
    (["--inter-block-guard-emergency-mb", "1048576"], "--inter-block-guard-emergency-mb"),
    (["--late-block-guard-target-mb", "99999"], "--late-block-guard-target-mb"),
    (["--step-boundary-cleanup-mb", "50000"], "--step-boundary-cleanup-mb"),
    *[(["--late-block-guard-start", v], "--late-block-guard-start") for v in ("50", "-1", "99")],
    *[(["--inter-block-guard-cooldown-blocks", v], "--inter-block-guard-cooldown-blocks") for v in ("51", "-1")],
    *[(["--mlp-chunk-tokens", v], "--mlp-chunk-tokens") for v in ("5", "-1", str(2**21))],
    (["--sol-qkv-chunk-tokens", "63"], "--sol-qkv-chunk-tokens"),
    (["--sol-out-proj-chunk-tokens", "1"], "--sol-out-proj-chunk-tokens"),
    *[(["--picture", v], "--picture") for v in ("0x0", "big", "99999x99999")],
    *[(["--video", v], "--video") for v in ("640x360", "640x360:0", "640x360:4:sound")],
    *[(["--audio", v], "--audio") for v in ("-1", "nan", "loud")],
    (["--picture", "1344x768"] * 12, "--picture"),
    (["--memory-mode", "turbo"], "--memory-mode"),
    (["--attention-mode", "fast"], "--attention-mode"),
    (["--os", "beos"], "--os"),
    (["--reference-budget", "huge"], "--reference-budget"),
    (["--ref-image-size", "tiny"], "--ref-image-size"),
    (["--model", "h3-int4"], "--model"),
    (["--bogus"], "--bogus"),
]


@pytest.mark.parametrize("args, flag", BAD, ids=[" ".join(a)[:40] for a, _ in BAD])
def test_bad_input_is_rc_2_and_one_line_naming_the_flag(args, flag, capsys):
    assert main(["plan", *args]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("longmedia plan: error: "), err
    assert flag in err and "Traceback" not in err, err
    node_names = re.findall(r"\b(?:segment_seconds|context_frames|context_frames|vram_gb|[a-z]+_mb|"
                            r"[a-z]+_chunk_tokens|keyframes\[)", err)
    assert not node_names, (node_names, err)


def test_sweep_is_about_ninety_cases():
    assert len(BAD) + len(FILES) + 3 >= 90


# --- honest output -------------------------------------------------------------------------------------------

def _run(capsys, *args) -> tuple[int, str]:
    rc = main(["plan", *args])
    return rc, capsys.readouterr().out


def test_one_unit_family(capsys):
    rc, out = _run(capsys)
    assert rc == 0
    assert "16 GB (16.00 GiB) card, 64 GB (64.00 GiB) RAM" in out
    # GB/s is the disk's read rate as disks are sold and as --disk-gbps takes it, not a memory size
    assert not re.search(r"\d MB\b", out) and not re.search(r"\d GB\b(?! \(|-class|/s)", out), out
    assert "reserve      840 MiB" in out and "inter-block 872 MiB" in out
    assert "GiB" in build_parser().format_help() or "GiB" in _plan_help()


def _plan_help() -> str:
    parser = build_parser()
    sub = next(a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction")
    return sub.choices["plan"].format_help()


def test_help_has_a_line_for_every_flag():
    sub = next(a for a in build_parser()._actions if a.__class__.__name__ == "_SubParsersAction")
    actions = [a for a in sub.choices["plan"]._actions if a.option_strings]
    assert len(actions) > 30
    for a in actions:
        assert a.help and len(a.help) > 8, a.option_strings
    text = _plan_help()
    assert "GiB" in text and "Exit codes" in text and "3 DOES NOT FIT" in " ".join(text.split())


@pytest.mark.parametrize("args, note", [
    ([], "10 s -> 10.125 s = 243 frames (H3's 17k+5 frame grid at 24 fps)"),
    (["--frames", "100"], "100 frames -> 107 frames = 4.458 s"),
])
def test_snapped_sizes_and_durations_are_shown_with_the_reason(args, note, capsys):
    rc, out = _run(capsys, *args)
    assert rc == 0 and note in out, out
    job = next(line for line in out.splitlines() if line.strip().startswith("job "))
    if "--width" in args:
        assert note.split(" -> ")[1].split()[0] in job


def test_no_snap_note_for_values_on_the_grid(capsys):
    rc, out = _run(capsys, "--seconds", "10.125")
    assert rc == 0 and "as planned:" not in out


def test_weights_resident_and_headroom_are_separate(capsys):
    rc, out = _run(capsys)
    rows = {line.split()[0]: line for line in out.splitlines() if line.startswith("  ")}
    # the card as the nodes see it: 16 GiB less the context and ComfyUI's own footprint (COMFYUI_HELD_BYTES)
    assert "15.19 GiB free of the 16.00 GiB card" in rows["vram"] and "14.37 GiB usable" in rows["vram"]
    assert "12.20 GiB needed at the peak" in rows["activations"]
    assert "1.28 GiB outside torch's count" in rows["activations"]
    assert "2.78 GiB resident of 30.90 GiB (0.60 GiB in use + 2.17 GiB elastic" in rows["weights"]
    assert rows["headroom"].split("headroom")[1].split()[0] == "2.17"
    # one verdict, the whole job's: the plan table states none of its own, and one figure is the predicted peak
    assert "FIT" not in rows["headroom"] and out.count("-> FITS") == 0
    assert len(re.findall(r"[\d.]+ GiB predicted peak|predicted peak (?:of |at )?[\d.]+", out)) == 1


def test_does_not_fit_exits_3_and_says_how_short(capsys):
    rc, out = _run(capsys, "--vram-gb", "8", "--seconds", "60", "--picture", "2048x2048", "--reference-budget", "max")
    assert rc == 3 and "short by" in out and "DOES NOT FIT" in out and "try --segment-seconds 5.87" in out
    assert main(["plan", "--vram-gb", "8", "--seconds", "60", "--json"]) == 3
    assert json.loads(capsys.readouterr().out)["fits"] is False


def test_nothing_fits_is_said_once_and_never_as_0_s(capsys):
    rc, out = _run(capsys, "--vram-gb", "8", "--width", "4096", "--height", "4096", "--seconds", "3")
    assert rc == 3
    assert not re.search(r"(?<![\d.])0 s\b", out) and "suggest 0" not in out
    assert out.count("no segment length fits this card") == 1
    assert "no segment length fits either (see reasons)" in out


def test_limits_are_stated_against_the_typed_value(capsys):
    assert main(["plan", "--seconds", "150.38"]) == 2
    err = capsys.readouterr().err
    assert "--seconds=150.38 is not allowed: expected at most 150.375 s in one pass" in err
    assert "seconds=151.08" not in err and "It would be 3626 frames = 151.083 s" in err
    # on the grid, but over the row cap in one pass: Setup refuses it, so the CLI does, naming the cap
    assert main(["plan", "--seconds", "150.375"]) == 2
    assert "at most 1048576 packed rows per pass" in capsys.readouterr().err
    assert main(["plan", "--seconds", "150.375", "--segment-seconds", "10"]) in (0, 3)


def test_reserve_and_guards_are_checked_against_the_card(capsys):
    assert main(["plan", "--vram-activation-reserve-mb", "16000"]) == 2
    err = capsys.readouterr().err
    assert "--vram-activation-reserve-mb=16000 is not allowed: expected an integer from 0 to 15553" in err
    assert "out of the 15554 MiB of VRAM usable for the job on the 16 GB card with 64 GB RAM (16.00 GiB in all);" in err
    assert main(["plan", "--inter-block-vram-guard-mb", "1048576"]) == 2
    assert "expected an integer from 0 to 16384" in capsys.readouterr().err
    assert main(["plan", "--inter-block-vram-guard-mb", "16384"]) == 0


def test_node_messages_keep_node_input_names():
    """The core names the node input; only the CLI rewrites it as a flag."""
    model, device = ModelProfile.preset("h3-int8"), DeviceProfile.card(16, 64)
    g = build_geometry(1344, 768, seconds=5)
    with pytest.raises(LongMediaInputError) as info:
        plan(model, device, g, PlanRequest(vram_activation_reserve_mb=20000))
    assert str(info.value).startswith("vram_activation_reserve_mb=20000 is not allowed")
    with pytest.raises(LongMediaInputError, match=r"^step_boundary_cleanup_mb=99999"):
        plan(model, device, g, PlanRequest(step_boundary_cleanup_mb=99999))


def test_cli_text_names_flags_not_fields(capsys):
    rc, out = _run(capsys, "--vram-gb", "8", "--seconds", "30", "--vram-activation-reserve-mb", "100")
    assert rc in (0, 3)
    assert "--segment-seconds 5.87" in out and "segment_seconds" not in out
    assert "--segment-seconds=5.87 (--segment-seconds" not in out
    assert "--vram-activation-reserve-mb=100 is under half" in out and "vram_activation_reserve_mb" not in out


@pytest.mark.parametrize("args, warning", [
    (["--reference-budget", "high"], "--reference-budget high has no effect: no --picture"),
    (["--ref-image-size", "max", "--audio", "3"], "--ref-image-size max has no effect"),
    (["--mlp-chunk-tokens", "1048576"], "--mlp-chunk-tokens 1048576 has no effect: a pass has 73642 rows"),
    (["--inter-block-vram-guard-mb", "0", "--inter-block-guard-cooldown-blocks", "4"],
     "--inter-block-guard-cooldown-blocks has no effect: --inter-block-vram-guard-mb 0 turns that guard off"),
    (["--mlp-chunk-tokens", "4096"], "--mlp-chunk-tokens in normal mode take the blocks off the stock path"),
    (["--sol-out-proj-chunk-tokens", "4096"], "--sol-out-proj-chunk-tokens has no effect while"),
])
def test_inputs_without_effect_are_warned_about(args, warning, capsys):
    rc, out = _run(capsys, *args)
    assert rc in (0, 3) and warning in out, out


def test_image_to_video_with_references_plans(capsys):
    rc, out = _run(capsys, "--picture", "1024x1024", "--first-frame", "--last-frame", "--json")
    assert rc == 0
    d = json.loads(out)
    kinds = [s["kind"] for s in d["geometry"]["row_spans"]]
    assert kinds.count("cond") == 2 and "ref_img" in kinds
    rc, out = _run(capsys, "--picture", "1024x1024", "--first-frame")
    assert rc == 0 and "anchored as a guide (stock MiniMaxH3AddGuide)" in out
    rc, out = _run(capsys, "--first-frame")
    assert rc == 0 and "in the prompt as MiniMaxH3ImageToVideo presents it" in out
