"""tools/gpu/flash4.sh on stand-in parts: the first call waits, the second installs; the libraries' archive is
unpacked after the wheels, so a wheel sharing its top-level folder (nvidia-cutlass-dsl's libs-base) does not wipe
them; a corrupted part is refused by its sha256; cutlass's dsl_packages goes on PYTHONPATH."""

from __future__ import annotations

import hashlib
import io
import os
import shutil
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "tools" / "gpu" / "flash4.sh"

pytestmark = pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")


def _archive() -> bytes:
    """A stand-in for the CUDA 13 libraries: files under the folder libs-base's wheel also installs."""
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w:xz") as tar:
        for name, data in (("nvidia_cutlass_dsl/cu13/lib/libcute_dsl_runtime.so", os.urandom(4000)),
                           ("nvidia_cutlass_dsl/dsl_packages/cutlass/_mlir/_cutlass_ir.so", os.urandom(3000))):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return out.getvalue()


def _wheel(folder: Path, name: str, files: dict[str, str]) -> None:
    """A minimal py3-none-any wheel pip installs with --no-deps."""
    dist = f"{name}-1.0.dist-info"
    with zipfile.ZipFile(folder / f"{name}-1.0-py3-none-any.whl", "w") as z:
        for path, text in files.items():
            z.writestr(path, text)
        z.writestr(f"{dist}/METADATA", f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n")
        z.writestr(f"{dist}/WHEEL", "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n")
        z.writestr(f"{dist}/RECORD", "")


def _parts(tmp: Path) -> tuple[Path, Path]:
    data = _archive()
    half = (len(data) + 1) // 2
    a, b = tmp / "c1" / ".flash4_a", tmp / "c2" / ".flash4_b"
    a.mkdir(parents=True)
    b.mkdir(parents=True)
    (a / "cu13.tar.xz.part00").write_bytes(data[:half])
    (b / "cu13.tar.xz.part01").write_bytes(data[half:])
    manifest = f"archive cu13.tar.xz {hashlib.sha256(data).hexdigest()}\n" + "".join(
        f"part {p.name} {hashlib.sha256(p.read_bytes()).hexdigest()}\n"
        for p in (a / "cu13.tar.xz.part00", b / "cu13.tar.xz.part01"))
    (a / "MANIFEST").write_text(manifest)
    (b / "MANIFEST").write_text(manifest)
    _wheel(b, "libs_base", {"nvidia_cutlass_dsl/dsl_packages/cutlass/__init__.py": "",
                            "nvidia_cutlass_dsl/__init__.py": ""})
    _wheel(b, "flash_attn_stand_in", {"flash_attn/__init__.py": "", "flash_attn/cute/__init__.py": "import cutlass\n"})
    return a.parent, b.parent


def _call(repo: Path, tmp: Path) -> tuple[str, str]:
    """Source flash4.sh from `repo` as a device call does; (LONGMEDIA_FLASH4, PYTHONPATH) after it."""
    env = {**os.environ, "LONGMEDIA_GPU_SITE": str(tmp / "site"), "PYTHONPATH": str(tmp / "site"),
           "FLASH4_PARTS": str(tmp / "parts")}
    bindir = tmp / "bin"
    bindir.mkdir(exist_ok=True)
    if not (bindir / "python3").exists():
        (bindir / "python3").symlink_to(sys.executable)   # this interpreter, with pip
    env["PATH"] = f"{bindir}{os.pathsep}{env['PATH']}"
    done = subprocess.run(["bash", "-c", f". {SCRIPT}; echo \"RESULT=$LONGMEDIA_FLASH4\"; echo \"PP=$PYTHONPATH\""],
                          cwd=repo, env=env, capture_output=True, text=True, timeout=300)
    lines = dict(line.split("=", 1) for line in done.stdout.splitlines() if line.startswith(("RESULT=", "PP=")))
    return lines.get("RESULT", ""), lines.get("PP", "") + "\n" + done.stdout + done.stderr


def test_two_calls_install_and_keep_the_libraries(tmp_path):
    first, second = _parts(tmp_path)
    state, log = _call(first, tmp_path)
    assert state == "waiting", log
    state, log = _call(second, tmp_path)
    assert state == "installed", log
    site = tmp_path / "site"
    assert (site / "nvidia_cutlass_dsl/cu13/lib/libcute_dsl_runtime.so").is_file(), "the wheels wiped the libraries"
    assert (site / "nvidia_cutlass_dsl/dsl_packages/cutlass/__init__.py").is_file()
    assert f"{site}/nvidia_cutlass_dsl/dsl_packages" in log.splitlines()[0]
    assert _call(second, tmp_path)[0] == "installed"      # a third call finds it installed


def test_a_corrupted_part_is_not_installed(tmp_path):
    first, second = _parts(tmp_path)
    part = second / ".flash4_b" / "cu13.tar.xz.part01"
    part.write_bytes(b"x" + part.read_bytes()[1:])
    assert _call(first, tmp_path)[0] == "waiting"
    state, log = _call(second, tmp_path)
    assert state == "waiting" and "cu13.tar.xz.part01" in log, log
    assert not (tmp_path / "site" / "nvidia_cutlass_dsl").exists()
