"""Corrupt, truncated and foreign .safetensors files: a ModelProfile or a LongMediaInputError, never anything else.

Property-based (hypothesis) over the bytes of a real tiny H3 checkpoint: truncation points, header length
fields, and header JSON with tensors, fields and __metadata__ replaced by arbitrary JSON. The CLI answers
every failure with rc 2 and one line on stderr naming the file.
"""

from __future__ import annotations

import contextlib
import io
import json
import struct
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from longmedia.cli import main
from longmedia.errors import LongMediaInputError
from longmedia.h3.profiles import ModelProfile
from longmedia.testing.tiny_h3 import write_tiny_h3

SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
JSON = st.recursive(st.none() | st.booleans() | st.integers(-2**70, 2**70) | st.floats(allow_nan=False)
                    | st.text(max_size=8),
                    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=4),
                    max_leaves=12)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> tuple[bytes, dict, bytes]:
    """(file bytes, header dict, data section) of a valid tiny INT8 H3 checkpoint."""
    path = write_tiny_h3(tmp_path_factory.mktemp("fuzz") / "tiny.safetensors", variant="int8")
    raw = Path(path).read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    return raw, json.loads(raw[8:8 + n]), raw[8 + n:]


def _file(header: object, data: bytes) -> bytes:
    text = json.dumps(header).encode()
    return struct.pack("<Q", len(text)) + text + data


def _outcome(raw: bytes) -> tuple[str, int, str]:
    """('profile' | 'error', CLI rc, CLI stderr) for a file holding `raw`."""
    with tempfile.TemporaryDirectory() as d:
        path = str(Path(d) / "model.safetensors")
        Path(path).write_bytes(raw)
        try:
            ModelProfile.from_safetensors(path)
            kind = "profile"
        except LongMediaInputError as exc:
            assert path in str(exc) and "\n" not in str(exc)
            kind = "error"
        err = io.StringIO()
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            rc = main(["plan", "--model", path, "--width", "256", "--height", "256", "--seconds", "1"])
        return kind, rc, err.getvalue().replace(path, "<path>")


def _check(raw: bytes) -> str:
    kind, rc, err = _outcome(raw)
    if kind == "error":
        assert rc == 2 and err.count("\n") == 1 and err.startswith("longmedia plan: error: --model="), err
        assert "<path>" in err and "Traceback" not in err
    else:
        assert rc in (0, 3), (rc, err)
    return kind


def test_the_untouched_file_plans(tiny):
    assert _check(tiny[0]) == "profile"


@SETTINGS
@given(cut=st.floats(0, 1, exclude_max=True))
def test_any_truncation_is_a_named_error(tiny, cut):
    raw = tiny[0]
    assert _check(raw[: int(cut * len(raw))]) == "error"


@SETTINGS
@given(length=st.integers(0, 2**64 - 1))
def test_any_header_length_field(tiny, length):
    raw = tiny[0]
    _check(struct.pack("<Q", length) + raw[8:])


@SETTINGS
@given(data=st.data())
def test_tensor_fields_replaced_by_arbitrary_json(tiny, data):
    _, header, body = tiny
    header = json.loads(json.dumps(header))
    names = sorted(k for k in header if k != "__metadata__")
    name = data.draw(st.sampled_from(names))
    field = data.draw(st.sampled_from(["dtype", "shape", "data_offsets", None]))
    if field is None:
        header[name] = data.draw(JSON)
    elif data.draw(st.booleans()):
        del header[name][field]
    else:
        header[name][field] = data.draw(JSON)
    _check(_file(header, body))


@SETTINGS
@given(meta=JSON, data=st.data())
def test_metadata_replaced_by_arbitrary_json(tiny, meta, data):
    _, header, body = tiny
    header = json.loads(json.dumps(header))
    if data.draw(st.booleans()) and isinstance(header.get("__metadata__"), dict):
        key = data.draw(st.sampled_from(sorted(header["__metadata__"])))
        header["__metadata__"][key] = data.draw(st.text(max_size=20) | JSON.map(json.dumps))
    else:
        header["__metadata__"] = meta
    _check(_file(header, body))


@SETTINGS
@given(header=JSON, body=st.binary(max_size=64))
def test_arbitrary_json_header(header, body):
    assert _check(_file(header, body)) == "error" or isinstance(header, dict)


@SETTINGS
@given(raw=st.binary(max_size=96))
def test_arbitrary_bytes(raw):
    assert _check(raw) == "error"


@SETTINGS
@given(data=st.data())
def test_shapes_and_offsets_shuffled(tiny, data):
    """Moving one tensor's offsets or shape keeps the file readable only if the layout still tiles the data."""
    _, header, body = tiny
    header = json.loads(json.dumps(header))
    names = sorted(k for k in header if k != "__metadata__")
    name = data.draw(st.sampled_from(names))
    begin, end = header[name]["data_offsets"]
    shift = data.draw(st.integers(-end, 64).filter(lambda s: s != 0))
    header[name]["data_offsets"] = [max(0, begin + shift), max(0, end + shift)]
    _check(_file(header, body))


def test_foreign_model_is_named_by_what_it_lacks(tmp_path, capsys):
    foreign = _file({"a.weight": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
                     "b.weight": {"dtype": "F32", "shape": [1], "data_offsets": [8, 12]}}, bytes(12))
    path = tmp_path / "foreign.safetensors"
    path.write_bytes(foreign)
    assert main(["plan", "--model", str(path)]) == 2
    err = capsys.readouterr().err
    assert "not an h3 checkpoint" in err.lower() and "video_patch_proj.weight" in err and "2 tensors" in err
    assert str(path) in err and err.count("\n") == 1
