"""Windows Triton bootstrap: make triton-windows' bundled TinyCC find its headers, for this process only.

triton-windows (>= 3.2.0.post13) builds its launcher with the TinyCC it ships in
`triton/runtime/tcc/` unless `CC` is set or an MSVC developer environment is active
(`VCINSTALLDIR` + `VCToolsVersion`). It looks for `tcc.exe` under `sysconfig`'s platlib, and TinyCC
looks for its C headers in `<tcc>/include` and its WinAPI headers in `<tcc>/include/winapi`.
On embedded Pythons (ComfyUI's `python_embeded`, an `._pth` file beside python.exe) either can miss:
Triton installed outside platlib, or the headers not where TinyCC looks. The plan then:

* sets `CC` to the bundled `tcc.exe` when Triton would not find it under platlib;
* adds the folders holding `stdio.h` / `windows.h` inside TinyCC's own folder to `C_INCLUDE_PATH`,
  which TinyCC reads as system include folders (split on ';' on Windows). Triton's own extra-include
  variables (`TRITON_CUDACRT_PATH`, `TRITON_CUDART_PATH`) take one folder each and are meant for
  CUDA headers, so they are left alone;
* names what cannot be fixed from here (no WinAPI headers anywhere in TinyCC's folder; an embedded
  Python without `include\\Python.h` or `libs\\python3*.lib`).

`plan_triton_bootstrap` is pure (platform, environment and filesystem are arguments); `apply` writes
the planned variables into the given environment mapping (this process's `os.environ`, inherited by
the compiler Triton spawns). Nothing is written to disk and nothing is patched.
"""

from __future__ import annotations

import ntpath
from dataclasses import dataclass
from typing import Callable, Iterable, Mapping, MutableMapping

Exists = Callable[[str], bool]
ListDir = Callable[[str], Iterable[str]]

INCLUDE_VAR = "C_INCLUDE_PATH"
SEARCH_DEPTH = 4          # folders below TinyCC's folder searched for misplaced headers
SEARCH_LIMIT = 2000       # folders visited at most
TCC_NAMES = ("tcc", "tcc.exe")
HEADERS = ("stdio.h", "windows.h")   # TinyCC's C library headers and its WinAPI headers


@dataclass(frozen=True)
class BootstrapPlan:
    """What to set (name, value) for this process, why, and what is missing that cannot be set right."""

    platform: str
    compiler: str | None              # what Triton will build with, as far as the plan can tell
    embedded_python: bool
    set_env: tuple[tuple[str, str], ...]
    reasons: tuple[str, ...]
    problems: tuple[str, ...]

    @property
    def is_noop(self) -> bool:
        return not self.set_env

    @property
    def ok(self) -> bool:
        return not self.problems


@dataclass(frozen=True)
class BootstrapResult:
    """What `apply` changed: (name, previous value or None, new value)."""

    plan: BootstrapPlan
    applied: tuple[tuple[str, str | None, str], ...]

    @property
    def lines(self) -> tuple[str, ...]:
        return (self.plan.reasons + tuple(f"set {n}={new!r} (was {old!r})" for n, old, new in self.applied)
                + tuple(f"problem: {p}" for p in self.plan.problems))


def _children(listdir: ListDir, path: str) -> list[str]:
    try:
        return list(listdir(path))
    except OSError:  # named reason: a missing or unreadable folder has no children
        return []


def _child(listdir: ListDir, path: str, name: str) -> str | None:
    """The child of `path` named `name`, matched case-insensitively as Windows does."""
    for child in _children(listdir, path):
        if child.lower() == name.lower():
            return ntpath.join(path, child)
    return None


def _folders_holding(listdir: ListDir, root: str, header: str) -> list[str]:
    """Folders at most SEARCH_DEPTH below `root` (root included) holding `header`, shallowest first."""
    found, queue, visited = [], [(root, 0)], 0
    while queue and visited < SEARCH_LIMIT:
        folder, depth = queue.pop(0)
        visited += 1
        children = _children(listdir, folder)
        if any(c.lower() == header for c in children):
            found.append(folder)
        if depth < SEARCH_DEPTH:
            queue.extend((ntpath.join(folder, c), depth + 1) for c in sorted(children) if "." not in c)
    return found


def _python_problems(listdir: ListDir, python_dir: str) -> list[str]:
    problems = []
    include = _child(listdir, python_dir, "include")
    if include is None or _child(listdir, include, "Python.h") is None:
        problems.append(f"Python.h is missing from {ntpath.join(python_dir, 'include')}: Triton cannot build its "
                        "launcher with any compiler. Copy the 'include' and 'libs' folders of the same Python minor "
                        f"version into {python_dir} (triton-windows README, 'Special notes for ComfyUI with "
                        "embeded Python').")
    libs = _child(listdir, python_dir, "libs")
    if libs is None or not any(c.lower().startswith("python3") and c.lower().endswith(".lib")
                               for c in _children(listdir, libs)):
        problems.append(f"python3*.lib is missing from {ntpath.join(python_dir, 'libs')}: Triton cannot link its "
                        f"launcher. Copy the 'libs' folder of the same Python minor version into {python_dir}.")
    return problems


def _msvc_cl(env: Mapping[str, str], exists: Exists) -> str | None:
    base, version = env.get("VCINSTALLDIR"), env.get("VCToolsVersion")
    if not base or not version:
        return None
    cl = ntpath.join(base, "Tools", "MSVC", version, "bin", "Hostx64", "x64", "cl.exe")
    return cl if exists(cl) else None


def _header_plan(tcc: str, env: Mapping[str, str], listdir: ListDir) -> tuple[list[tuple[str, str]], list[str],
                                                                              list[str]]:
    """(variables, reasons, problems) for TinyCC at `tcc` finding stdio.h and windows.h."""
    tcc_dir = ntpath.dirname(tcc)
    default_dirs = (ntpath.join(tcc_dir, "include"), ntpath.join(tcc_dir, "include", "winapi"))
    present = {h: any(_child(listdir, d, h) is not None for d in default_dirs) for h in HEADERS}
    if all(present.values()):
        return [], [f"TinyCC finds its headers where it looks ({' and '.join(default_dirs)})"], []
    existing = [p for p in env.get(INCLUDE_VAR, "").split(";") if p]
    add, reasons, problems = [], [], []
    for header in HEADERS:
        if present[header]:
            continue
        found = _folders_holding(listdir, tcc_dir, header)
        if not found:
            problems.append(f"TinyCC cannot find {header}: it is not in {' or '.join(default_dirs)} nor in any "
                            f"folder up to "
                            f"{SEARCH_DEPTH} levels below {tcc_dir}. Reinstall triton-windows "
                            "(python.exe -m pip install --force-reinstall triton-windows), or set CC to MSVC's cl.exe "
                            "from a Visual Studio developer prompt.")
            continue
        reasons.append(f"TinyCC looks for {header} in {' and '.join(default_dirs)}; it is in {found[0]}")
        if found[0] not in existing and found[0] not in add:
            add.append(found[0])
    variables = [(INCLUDE_VAR, ";".join(existing + add))] if add else []
    return variables, reasons, problems


def plan_triton_bootstrap(platform: str, env: Mapping[str, str], exists: Exists, listdir: ListDir,
                          triton_dir: str | None, python_exe: str, *, platlib: str | None = None) -> BootstrapPlan:
    """What this process must set for Triton to build its launcher on `platform` (pure: all I/O is injected).

    `triton_dir`: the installed `triton` package folder (None: not installed). `platlib`:
    sysconfig's platlib, where triton-windows expects itself (None: not checked).
    """
    if not platform.startswith("win"):
        return BootstrapPlan(platform, None, False, (), (f"{platform} is not Windows: nothing to do",), ())
    python_dir = ntpath.dirname(python_exe)
    embedded = any(c.lower().endswith("._pth") for c in _children(listdir, python_dir))
    problems = _python_problems(listdir, python_dir) if embedded else []
    reasons = [f"embedded Python at {python_dir}" if embedded else f"regular Python at {python_dir}"]

    def plan(compiler, variables=(), more_reasons=(), more_problems=()) -> BootstrapPlan:
        return BootstrapPlan(platform, compiler, embedded, tuple(variables), tuple(reasons) + tuple(more_reasons),
                             tuple(problems) + tuple(more_problems))

    if triton_dir is None:
        return plan(None, more_reasons=("Triton is not installed: nothing to do",))
    cc = env.get("CC")
    variables = []
    if cc:
        if ntpath.basename(cc).lower() not in TCC_NAMES:
            return plan(cc, more_reasons=(f"CC={cc} is set and is not TinyCC: Triton builds with it",))
        if not ntpath.isabs(cc):
            return plan(cc, more_reasons=(f"CC={cc} selects TinyCC by name only: its headers are not checked",))
        tcc = cc
        reasons.append(f"CC={cc} selects TinyCC")
    else:
        cl = _msvc_cl(env, exists)
        if cl is not None:
            return plan(cl, more_reasons=(f"MSVC developer environment active: Triton builds with {cl}",))
        tcc = ntpath.join(triton_dir, "runtime", "tcc", "tcc.exe")
        if not exists(tcc):
            return plan(None, more_reasons=(f"no bundled TinyCC at {tcc} (triton-windows before 3.2.0.post13): "
                                            "Triton uses cl, gcc or clang from PATH",))
        expected = ntpath.join(platlib, "triton", "runtime", "tcc", "tcc.exe") if platlib else None
        if expected is not None and not exists(expected):
            variables.append(("CC", tcc))
            reasons.append(f"Triton looks for TinyCC at {expected}, but this Triton's is {tcc}: setting CC")
        else:
            reasons.append(f"Triton builds with its bundled TinyCC at {tcc}")
    header_vars, header_reasons, header_problems = _header_plan(tcc, env, listdir)
    return plan(tcc, variables + header_vars, header_reasons, header_problems)


def apply(plan: BootstrapPlan, environ: MutableMapping[str, str]) -> BootstrapResult:
    """Write the plan's variables into `environ` (pass `os.environ`: this process and its children only)."""
    applied = []
    for name, value in plan.set_env:
        previous = environ.get(name)
        if previous != value:
            environ[name] = value
            applied.append((name, previous, value))
    return BootstrapResult(plan, tuple(applied))


def bootstrap_triton(environ: MutableMapping[str, str] | None = None) -> BootstrapResult:
    """Plan from this process's platform, environment and files, and apply to `environ` (default `os.environ`).

    Call before the first Triton kernel launches: Triton picks its compiler once per process.
    """
    import importlib.util
    import os
    import sys
    import sysconfig

    target = os.environ if environ is None else environ
    spec = importlib.util.find_spec("triton")
    locations = list(spec.submodule_search_locations or []) if spec is not None else []
    plan = plan_triton_bootstrap(sys.platform, dict(target), os.path.exists, os.listdir,
                                 locations[0] if locations else None, sys.executable,
                                 platlib=sysconfig.get_paths().get("platlib"))
    return apply(plan, target)
