"""The sweep's loop: one ComfyUI server, every case submitted in turn, checked, tabled and written as JSON."""

from __future__ import annotations

import argparse
import json
import re
import shutil
import sys
import tempfile
import time
import urllib.error
import urllib.request
import uuid
from collections import Counter
from pathlib import Path

import psutil

from tests.comfyui import harness

from .cases import Case, all_cases
from .outcome import OUTCOMES, Result, check_files, classify_history, classify_validation, reported_outputs, snapshot

INTERRUPT_GRACE_S = 30.0
CHILD_GRACE_S = 15.0
RESOURCE_TRACKER = "multiprocessing.resource_tracker"
FATAL = ("unclear", "crash")
FATAL_PROBLEMS = ("partial", "stray", "outside", "leftover", "lost", "stale")


def post_prompt(server: harness.ComfyServer, prompt: dict, timeout: float = 120.0) -> tuple[int, dict]:
    """POST /prompt as any client would (NaN and inf as Python's json writes them): (HTTP status, reply)."""
    body = json.dumps({"prompt": prompt, "client_id": uuid.uuid4().hex}).encode("utf-8")
    req = urllib.request.Request(server.url + "/prompt", data=body, method="POST",
                                 headers={"Content-Type": "application/json"})
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))   # never leaves the machine
    try:
        with opener.open(req, timeout=timeout) as resp:
            return resp.status, json.loads(resp.read() or b"{}")
    except urllib.error.HTTPError as err:
        text = err.read().decode("utf-8", errors="replace")
        try:
            return err.code, json.loads(text)
        except json.JSONDecodeError:   # named: a reply that is not JSON (a 500 page)
            return err.code, {"error": {"type": "http", "message": text[:2000]}}


def alive(server: harness.ComfyServer) -> bool:
    if server.process.poll() is not None:
        return False
    try:
        server.request("GET", "/queue", timeout=10.0)
    except (harness.ComfyHarnessError, OSError):   # named: no answer is what we test for
        return False
    return True


def wait_history(server: harness.ComfyServer, prompt_id: str, timeout: float) -> dict | None:
    """The prompt's finished history entry, or None when the server died or it did not finish in time."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if server.process.poll() is not None:
            return None
        try:
            entry = server.request("GET", f"/history/{prompt_id}", timeout=30.0).get(prompt_id)
        except (harness.ComfyHarnessError, OSError):   # named: a busy server answering late; the deadline decides
            entry = None
        if entry and entry.get("status", {}).get("status_str") in ("success", "error"):
            return entry
        time.sleep(0.1)
    return None


def children(server: harness.ComfyServer) -> list[psutil.Process]:
    try:
        return psutil.Process(server.process.pid).children(recursive=True)
    except psutil.NoSuchProcess:   # named: the server itself is gone (a crash, recorded elsewhere)
        return []


def _worker(process: psutil.Process) -> bool:
    """A child of the server that should be gone after a prompt: anything but Python's own resource tracker (which
    multiprocessing starts once, the first time a process spawns, and which lives as long as the server)."""
    try:
        if not process.is_running() or process.status() == psutil.STATUS_ZOMBIE:
            return False
        return not any(RESOURCE_TRACKER in part for part in process.cmdline())
    except psutil.NoSuchProcess:   # named: it ended while we looked
        return False


def leftover_processes(server: harness.ComfyServer) -> list[str]:
    deadline = time.monotonic() + CHILD_GRACE_S
    while True:
        left = [p for p in children(server) if _worker(p)]
        if not left or time.monotonic() > deadline:
            return [f"pid {p.pid}: {' '.join(p.cmdline())[:200]}" for p in left]
        time.sleep(0.5)


def run_case(server: harness.ComfyServer, case: Case, workdir: Path, root_names: set[str]) -> Result:
    result = Result(case.name, case.category, case.expect)
    before = snapshot(workdir)
    started_ns, t0 = time.time_ns(), time.monotonic()
    status, reply = post_prompt(server, case.prompt)
    entry = None
    if status == 200 and "prompt_id" in reply:
        entry = wait_history(server, reply["prompt_id"], case.timeout_s)
        if entry is None:
            result.outcome = "crash"
            result.message = ("server died" if server.process.poll() is not None
                              else f"no result within {case.timeout_s:.0f} s")
            if server.process.poll() is None:
                server.request("POST", "/interrupt", {})
                wait_history(server, reply["prompt_id"], INTERRUPT_GRACE_S)
        else:
            classify_history(result, entry)
    elif status == 400:
        classify_validation(result, reply)
    else:
        result.outcome = "unclear" if server.process.poll() is None else "crash"
        result.message = f"POST /prompt -> HTTP {status}: {json.dumps(reply)[:1000]}"
    result.seconds = time.monotonic() - t0
    if not alive(server):
        result.outcome, result.message = "crash", f"server not answering after the case: {result.message}"
        return result
    for left in leftover_processes(server):
        result.problem("leftover", left)
    after = snapshot(workdir)
    reported = reported_outputs(entry) if entry is not None and result.outcome == "ran" else []
    for rel in check_files(result, before, after, reported, started_ns):
        (workdir / rel).unlink(missing_ok=True)
    for name in sorted({p.name for p in server.root.iterdir()} - root_names):
        result.problem("outside", str(server.root / name))
    for rel in case.outside:
        if (workdir / rel).exists():
            result.problem("outside", str(workdir / rel))
            shutil.rmtree(workdir / rel, ignore_errors=True)
    return result


def table(results: list[Result]) -> str:
    cats = sorted({r.category for r in results})
    width = max(len(c) for c in [*cats, "category"])
    head = f"{'category':<{width}} " + " ".join(f"{o:>18}" for o in OUTCOMES) + f" {'total':>6} {'problems':>8}"
    lines = [head, "-" * len(head)]
    for cat in [*cats, "ALL"]:
        rows = [r for r in results if cat in ("ALL", r.category)]
        counts = Counter(r.outcome for r in rows)
        problems = sum(bool(r.problems) for r in rows)
        if cat == "ALL":
            lines.append("-" * len(head))
        lines.append(f"{cat:<{width}} " + " ".join(f"{counts.get(o, 0):>18}" for o in OUTCOMES)
                     + f" {len(rows):>6} {problems:>8}")
    return "\n".join(lines)


def start(root: Path, base: Path) -> harness.ComfyServer:
    return harness.start_server(root, base)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="python -m tools.input_sweep", description=__doc__)
    ap.add_argument("--only", default="", help="run the cases whose name or category matches this regex")
    ap.add_argument("--list", action="store_true", help="list the cases and exit")
    ap.add_argument("--json", type=Path, default=None, help="where to write every case's outcome "
                                                             "(default: input_sweep.json in the work folder)")
    ap.add_argument("--keep", action="store_true", help="keep the work folder (server log, base directory)")
    return ap.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    root = harness.comfyui_root()
    if root is None and not args.list:
        print(f"set {harness.ENV_VAR} to a ComfyUI checkout", file=sys.stderr)
        return 2
    workdir = Path(tempfile.mkdtemp(prefix="longmedia_sweep_"))
    try:
        cases = [c for c in all_cases(workdir) if not args.only or re.search(args.only, f"{c.category} {c.name}")]
    except BaseException:   # named: any failure building the cases leaves no empty work folder behind
        shutil.rmtree(workdir)
        raise
    if args.list:
        for case in cases:
            print(f"{case.category:<22} {case.expect or '-':<8} {case.name[:120]!r}")
        print(f"{len(cases)} cases")
        shutil.rmtree(workdir)
        return 0
    base = harness.prepare_base_directory(workdir / "base", variants=("fp32",))
    json_path = args.json or workdir / "input_sweep.json"
    server = start(root, base)
    root_names = {p.name for p in root.iterdir()}
    results: list[Result] = []
    t0 = time.monotonic()
    try:
        for i, case in enumerate(cases, 1):
            result = run_case(server, case, workdir, root_names)
            results.append(result)
            flag = "" if result.outcome not in FATAL and not result.problems and not result.surprise else "  <-- "
            print(f"[{i:>3}/{len(cases)}] {result.outcome:<18} {result.seconds:6.1f}s {case.name[:90]!r}{flag}"
                  f"{result.surprise} {sorted(result.problems)}", flush=True)
            if result.outcome == "crash":
                shutil.copy(server.log_path, workdir / f"server_crash_{i}.log")
                server.stop()
                server = start(root, base)
    finally:
        server.stop()
        json_path.write_text(json.dumps({"comfyui_root": str(root), "seconds": round(time.monotonic() - t0, 1),
                                         "cases": [r.as_json() for r in results]}, indent=1))
    print()
    print(table(results))
    bad = [r for r in results if r.outcome in FATAL or any(k in r.problems for k in FATAL_PROBLEMS)]
    surprises = [r for r in results if r.surprise]
    for r in bad:
        print(f"\n{r.outcome.upper()} {r.name[:120]!r} at {r.node}: {r.error_type}: {r.message[:700]!r}"
              f"{' problems: ' + json.dumps(r.problems) if r.problems else ''}")
    for r in surprises:
        print(f"\nSURPRISE {r.name[:120]!r}: {r.surprise}; {r.error_type}: {r.message[:400]!r}")
    print(f"\n{len(results)} cases in {time.monotonic() - t0:.0f} s; {len(bad)} failing, {len(surprises)} surprises; "
          f"outcomes: {json_path}")
    if not args.keep and args.json is not None:
        shutil.rmtree(workdir, ignore_errors=True)
    elif not args.keep:
        print(f"work folder kept for the JSON: {workdir}")
    return 1 if bad or surprises else 0
