"""The Windows Triton bootstrap plan against a fake filesystem and platform."""

from __future__ import annotations

import ntpath

import pytest

from longmedia.kernels.triton_bootstrap import INCLUDE_VAR, apply, bootstrap_triton, plan_triton_bootstrap

PY = "C:\\ComfyUI_windows_portable\\python_embeded"
PYTHON_EXE = PY + "\\python.exe"
SITE = PY + "\\Lib\\site-packages"
TRITON = SITE + "\\triton"
TCC = TRITON + "\\runtime\\tcc"


class FakeFS:
    """Case-insensitive Windows-like filesystem from a set of file paths."""

    def __init__(self, files):
        self.files = {f.lower() for f in files}
        self.dirs: dict[str, set[str]] = {}
        for f in files:
            parts = f.split("\\")
            for i in range(1, len(parts)):
                self.dirs.setdefault("\\".join(parts[:i]).lower(), set()).add(parts[i])
        self.listed: list[str] = []

    def exists(self, path: str) -> bool:
        return path.lower() in self.files or path.lower() in self.dirs

    def listdir(self, path: str):
        self.listed.append(path)
        key = path.lower()
        if key not in self.dirs:
            raise FileNotFoundError(path)
        return sorted(self.dirs[key])


def embedded_python(python_headers: bool = True):
    files = [PYTHON_EXE, PY + "\\python312._pth", PY + "\\python312.zip"]
    if python_headers:
        files += [PY + "\\include\\Python.h", PY + "\\include\\pyconfig.h", PY + "\\libs\\python312.lib",
                  PY + "\\libs\\python3.lib"]
    return files


def tcc_files(include="include", winapi="include\\winapi"):
    files = [TCC + "\\tcc.exe", TCC + "\\libtcc.dll", TCC + "\\lib\\libtcc1.a", TCC + "\\lib\\kernel32.def"]
    files += [f"{TCC}\\{include}\\{h}" for h in ("stdio.h", "stdlib.h", "_mingw.h")]
    files += [f"{TCC}\\{winapi}\\{h}" for h in ("windows.h", "winbase.h")]
    return files


def plan_for(files, env=None, platform="win32", triton_dir=TRITON, platlib=SITE):
    fs = FakeFS(files)
    return plan_triton_bootstrap(platform, env or {}, fs.exists, fs.listdir, triton_dir, PYTHON_EXE,
                                 platlib=platlib), fs


def test_linux_is_a_noop_that_touches_nothing():
    fs = FakeFS([])
    plan = plan_triton_bootstrap("linux", {"PATH": "/usr/bin"}, fs.exists, fs.listdir, "/venv/triton",
                                 "/venv/bin/python")
    assert plan.is_noop and plan.ok and plan.compiler is None
    assert "not Windows" in plan.reasons[0]
    assert fs.listed == []


def test_windows_with_headers_where_tcc_looks_is_a_noop():
    plan, _ = plan_for(embedded_python() + tcc_files())
    assert plan.embedded_python and plan.is_noop and plan.ok
    assert plan.compiler == TCC + "\\tcc.exe"
    assert any("finds its headers where it looks" in r for r in plan.reasons)


def test_headers_are_matched_case_insensitively():
    files = embedded_python() + [f.replace("windows.h", "Windows.H").replace("winapi", "WinAPI")
                                 for f in tcc_files()]
    plan, _ = plan_for(files)
    assert plan.is_noop and plan.ok


def test_embedded_python_with_winapi_headers_elsewhere_in_tcc_sets_the_include_variable():
    plan, _ = plan_for(embedded_python() + tcc_files(winapi="win32\\include\\winapi"))
    assert plan.ok and plan.embedded_python
    assert plan.set_env == ((INCLUDE_VAR, TCC + "\\win32\\include\\winapi"),)
    assert any("windows.h" in r and "win32\\include\\winapi" in r for r in plan.reasons)


def test_both_header_sets_elsewhere_and_existing_variable_kept_first():
    env = {INCLUDE_VAR: "D:\\mine\\include"}
    plan, _ = plan_for(embedded_python() + tcc_files(include="lib\\include", winapi="lib\\include\\winapi"), env)
    assert plan.set_env == ((INCLUDE_VAR, f"D:\\mine\\include;{TCC}\\lib\\include;{TCC}\\lib\\include\\winapi"),)
    environ = dict(env, PATH="C:\\Windows")
    result = apply(plan, environ)
    assert environ[INCLUDE_VAR] == plan.set_env[0][1] and environ["PATH"] == "C:\\Windows"
    assert result.applied == ((INCLUDE_VAR, "D:\\mine\\include", plan.set_env[0][1]),)
    assert apply(plan, environ).applied == ()          # idempotent


def test_nothing_found_names_what_is_missing():
    files = [f for f in embedded_python() + tcc_files() if "winapi" not in f]
    plan, _ = plan_for(files)
    assert plan.is_noop and not plan.ok
    (problem,) = plan.problems
    assert "windows.h" in problem and TCC + "\\include\\winapi" in problem and "force-reinstall" in problem


def test_embedded_python_without_include_and_libs_is_reported():
    plan, _ = plan_for(embedded_python(python_headers=False) + tcc_files())
    assert plan.is_noop and len(plan.problems) == 2
    assert "Python.h is missing from " + PY + "\\include" in plan.problems[0]
    assert "python3*.lib is missing" in plan.problems[1]


def test_triton_outside_platlib_points_cc_at_its_bundled_tcc():
    target = "C:\\ComfyUI_windows_portable\\extra\\triton"
    files = embedded_python() + [f.replace(TRITON, target) for f in tcc_files()]
    plan, _ = plan_for(files, triton_dir=target)
    assert plan.set_env == (("CC", target + "\\runtime\\tcc\\tcc.exe"),)
    environ: dict[str, str] = {}
    assert apply(plan, environ).applied == (("CC", None, target + "\\runtime\\tcc\\tcc.exe"),)


@pytest.mark.parametrize("env,compiler,reason", [
    ({"CC": "C:\\msys64\\mingw64\\bin\\gcc.exe"}, "C:\\msys64\\mingw64\\bin\\gcc.exe", "is not TinyCC"),
    ({"CC": "tcc"}, "tcc", "by name only"),
])
def test_cc_that_is_not_a_checkable_tcc_is_left_alone(env, compiler, reason):
    plan, _ = plan_for(embedded_python() + [f for f in tcc_files() if "winapi" not in f], env)
    assert plan.is_noop and plan.ok and plan.compiler == compiler
    assert reason in plan.reasons[-1]


def test_cc_pointing_at_another_tcc_gets_its_headers_checked():
    other = "D:\\tools\\tcc"
    files = embedded_python() + [f.replace(TCC, other) for f in tcc_files(winapi="winapi")]
    plan, _ = plan_for(files, {"CC": other + "\\tcc.exe"})
    assert plan.set_env == ((INCLUDE_VAR, other + "\\winapi"),)


def test_msvc_developer_environment_is_a_noop():
    vc = "C:\\Program Files\\Microsoft Visual Studio\\2022\\Community\\VC\\"
    cl = ntpath.join(vc, "Tools", "MSVC", "14.42.34433", "bin", "Hostx64", "x64", "cl.exe")
    env = {"VCINSTALLDIR": vc, "VCToolsVersion": "14.42.34433"}
    plan, _ = plan_for(embedded_python() + [f for f in tcc_files() if "winapi" not in f] + [cl], env)
    assert plan.is_noop and plan.ok and plan.compiler == cl


def test_no_bundled_tcc_and_no_triton():
    plan, _ = plan_for(embedded_python())
    assert plan.is_noop and plan.compiler is None and "no bundled TinyCC" in plan.reasons[-1]
    plan, _ = plan_for(embedded_python(), triton_dir=None)
    assert plan.is_noop and "not installed" in plan.reasons[-1]


def test_regular_python_skips_the_python_header_check():
    files = ["C:\\Python312\\python.exe"] + tcc_files()
    fs = FakeFS(files)
    plan = plan_triton_bootstrap("win32", {}, fs.exists, fs.listdir, TRITON, "C:\\Python312\\python.exe",
                                 platlib=SITE)
    assert not plan.embedded_python and plan.ok and plan.is_noop


def test_bootstrap_on_this_machine_changes_nothing_off_windows():
    environ = {"PATH": "/usr/bin"}
    result = bootstrap_triton(environ)
    assert result.applied == () and environ == {"PATH": "/usr/bin"}
    assert result.lines[0].endswith("is not Windows: nothing to do")
