"""Real-ComfyUI test harness: a throwaway server on 127.0.0.1 and an in-process `comfy` import.

The server runs `main.py --cpu` from the checkout at LONGMEDIA_COMFYUI_ROOT with the test
interpreter, a temporary `--base-directory` (models, custom_nodes, input, output, temp, user, an
sqlite file), our pack and the test node pack linked into its custom_nodes and the tiny H3
checkpoints in its models/diffusion_models. Every request goes to 127.0.0.1 with proxies disabled.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

import pytest

ENV_VAR = "LONGMEDIA_COMFYUI_ROOT"
REPO_ROOT = Path(__file__).resolve().parents[2]
TESTNODES_DIR = Path(__file__).resolve().parent / "testnodes"
PACK_LINK_NAME = "ComfyUI-LongMedia"
TESTNODES_LINK_NAME = "longmedia_testnodes"
HOST = "127.0.0.1"
STARTUP_TIMEOUT_S = 180.0
LOG_TAIL_CHARS = 6000
TINY_VARIANTS = ("bf16", "fp32", "int8")
TINY_TEXT_DIM = 96  # longmedia.testing.tiny_h3.TINY_DIMS.text_dim


class ComfyHarnessError(RuntimeError):
    """The test server did not start, refused a prompt, or a prompt failed; the message carries the detail."""


def comfyui_root() -> Path | None:
    """The checkout named by LONGMEDIA_COMFYUI_ROOT, or None when unset."""
    value = os.environ.get(ENV_VAR, "").strip()
    if not value:
        return None
    root = Path(value).expanduser().resolve()
    if not (root / "main.py").is_file() or not (root / "comfy").is_dir():
        raise ComfyHarnessError(f"{ENV_VAR}={value!r} is not a ComfyUI checkout (no main.py and comfy/ there): "
                                "point it at the directory holding ComfyUI's main.py")
    return root


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((HOST, 0))
        return sock.getsockname()[1]


def _opener() -> urllib.request.OpenerDirector:
    # no proxy handler: traffic to the local server must never leave the machine
    return urllib.request.build_opener(urllib.request.ProxyHandler({}))


def prepare_base_directory(base: Path, *, variants: tuple[str, ...] = TINY_VARIANTS, seed: int = 0) -> Path:
    """Lay out a ComfyUI base directory: linked custom nodes, tiny checkpoints, empty io folders."""
    from longmedia.testing.tiny_h3 import write_tiny_h3

    for sub in ("custom_nodes", "models/diffusion_models", "input", "output", "temp", "user"):
        (base / sub).mkdir(parents=True, exist_ok=True)
    for link, target in ((PACK_LINK_NAME, REPO_ROOT), (TESTNODES_LINK_NAME, TESTNODES_DIR)):
        path = base / "custom_nodes" / link
        if not path.exists():
            path.symlink_to(target, target_is_directory=True)
    for variant in variants:
        write_tiny_h3(base / "models" / "diffusion_models", variant=variant, seed=seed)
    return base


@dataclass
class ComfyServer:
    """A running ComfyUI server process and its API helpers."""

    root: Path
    base: Path
    port: int
    process: subprocess.Popen
    log_path: Path

    @property
    def url(self) -> str:
        return f"http://{HOST}:{self.port}"

    def log_tail(self, chars: int = LOG_TAIL_CHARS) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return "(no server log)"
        return text[-chars:]

    def request(self, method: str, path: str, payload: Any = None, timeout: float = 30.0) -> Any:
        data = None if payload is None else json.dumps(payload).encode("utf-8")
        req = urllib.request.Request(self.url + path, data=data, method=method,
                                     headers={"Content-Type": "application/json"})
        try:
            with _opener().open(req, timeout=timeout) as resp:
                body = resp.read()
        except urllib.error.HTTPError as err:
            detail = err.read().decode("utf-8", errors="replace")
            raise ComfyHarnessError(f"{method} {path} -> HTTP {err.code}: {detail[:4000]}") from err
        return json.loads(body) if body else None

    def object_info(self) -> dict:
        return self.request("GET", "/object_info")

    def submit(self, prompt: Mapping[str, Any]) -> str:
        """Queue an API-format prompt; return its prompt_id (raises with ComfyUI's node_errors on refusal)."""
        reply = self.request("POST", "/prompt", {"prompt": dict(prompt), "client_id": uuid.uuid4().hex})
        if reply.get("node_errors"):
            raise ComfyHarnessError(f"prompt refused: {json.dumps(reply['node_errors'])[:4000]}")
        return reply["prompt_id"]

    def wait(self, prompt_id: str, timeout: float = 120.0, poll_s: float = 0.2) -> dict:
        """Poll /history until the prompt finishes (bounded); return its history entry."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise ComfyHarnessError(f"server exited (code {self.process.returncode}) while running "
                                        f"{prompt_id}:\n{self.log_tail()}")
            entry = self.request("GET", f"/history/{prompt_id}").get(prompt_id)
            if entry and entry.get("status", {}).get("completed") is not None and (
                    entry["status"].get("status_str") in ("success", "error")):
                return entry
            time.sleep(poll_s)
        raise ComfyHarnessError(f"prompt {prompt_id} did not finish within {timeout} s:\n{self.log_tail()}")

    def run(self, prompt: Mapping[str, Any], timeout: float = 120.0) -> dict:
        """submit + wait + raise_on_error: the history entry of a prompt that succeeded."""
        entry = self.wait(self.submit(prompt), timeout)
        raise_on_error(entry)
        return entry

    def run_watching(self, prompt: Mapping[str, Any], timeout: float = 120.0) -> tuple[dict, list[dict]]:
        """run(), listening on the websocket: the history entry and the JSON messages the server sent this client."""
        import asyncio

        import aiohttp

        client_id = uuid.uuid4().hex
        messages: list[dict] = []

        async def listen() -> None:
            url = f"ws://{HOST}:{self.port}/ws?clientId={client_id}"
            async with aiohttp.ClientSession(trust_env=False) as session, session.ws_connect(url) as ws:
                reply = await (await session.post(f"{self.url}/prompt", json={
                    "prompt": dict(prompt), "client_id": client_id})).json()
                if reply.get("node_errors") or "prompt_id" not in reply:
                    raise ComfyHarnessError(f"prompt refused: {json.dumps(reply)[:4000]}")
                messages.append({"type": "submitted", "data": {"prompt_id": reply["prompt_id"]}})
                async for msg in ws:
                    if msg.type != aiohttp.WSMsgType.TEXT:
                        continue   # binary frames: previews and progress text
                    data = json.loads(msg.data)
                    messages.append(data)
                    if data.get("type") in ("execution_success", "execution_error", "execution_interrupted"):
                        return

        asyncio.run(asyncio.wait_for(listen(), timeout))
        entry = self.wait(messages[0]["data"]["prompt_id"], timeout)
        raise_on_error(entry)
        return entry, messages[1:]

    def output_path(self, name: str) -> Path:
        return self.base / "output" / name

    def custom_node_import_error(self, link_name: str = PACK_LINK_NAME) -> str | None:
        """The log lines of a failed import of custom node `link_name`, or None when it imported."""
        log = self.log_tail(10 ** 7)
        if f"(IMPORT FAILED): {self.base / 'custom_nodes' / link_name}" not in log:
            return None
        lines = [ln for ln in log.splitlines() if link_name in ln or "Error" in ln]
        return "\n".join(lines[-20:])

    def stop(self, timeout: float = 20.0) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=timeout)


def raise_on_error(entry: Mapping[str, Any]) -> None:
    """Raise ComfyHarnessError naming the failed node, its exception and traceback, if the prompt failed."""
    status = entry.get("status", {})
    if status.get("status_str") == "success":
        return
    for event, data in status.get("messages", []):
        if event == "execution_error":
            trace = "".join(data.get("traceback", []))
            raise ComfyHarnessError(
                f"node {data.get('node_id')} ({data.get('node_type')}) failed: "
                f"{data.get('exception_type')}: {data.get('exception_message')}\n{trace}")
    raise ComfyHarnessError(f"prompt did not succeed: {json.dumps(status)[:4000]}")


def h3_latent_shapes(width: int, height: int, length: int, *, video_channels: int = 24,
                     audio_channels: int = 32) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """Video [1, C, T, H/16, W/16] and audio [1, C, 2, T40] of an H3 latent: frames snap up to 17k+5 at 24 fps."""
    frames = max(5, length)
    while frames % 17 != 5:
        frames += 1
    latent_t = 2 if frames <= 5 else (frames - 5) // 17 * 5 + 2
    return ((1, video_channels, latent_t, height // 16, width // 16),
            (1, audio_channels, 2, round(frames / 24 * 40)))


def t2va_prompt(unet_name: str, out_name: str, *, width: int = 64, height: int = 64, length: int = 22,
                steps: int = 2, seed: int = 42, cfg: float = 3.0, text: str = "a red fox trots through fresh snow",
                positive: list | None = None, text_dim: int = TINY_TEXT_DIM) -> dict[str, dict]:
    """Stock H3 t2va API prompt: UNETLoader -> MiniMaxH3SigmaShift -> CFGGuider -> SamplerCustomAdvanced.

    Node ids are names ("unet", "shift", "guider", ...) so tests can splice nodes in. Conditioning
    comes from the tiny test text encoder through the stock CLIPTextEncode ("pos"/"neg"), or from
    `positive` (a [node_id, output] link) when given; LongMediaTestSaveLatent ("save") writes the
    sampled video/audio latents to output/`out_name`.
    """
    return {
        "unet": {"class_type": "UNETLoader", "inputs": {"unet_name": unet_name, "weight_dtype": "default"}},
        "shift": {"class_type": "MiniMaxH3SigmaShift",
                  "inputs": {"model": ["unet", 0], "shift_video": 12.0, "shift_audio": 3.0}},
        "clip": {"class_type": "LongMediaTestTinyCLIP", "inputs": {"seed": 0, "text_dim": text_dim}},
        "pos": {"class_type": "CLIPTextEncode", "inputs": {"clip": ["clip", 0], "text": text}},
        "neg": {"class_type": "CLIPTextEncode", "inputs": {"clip": ["clip", 0], "text": ""}},
        "guider": {"class_type": "CFGGuider", "inputs": {"model": ["shift", 0], "positive": positive or ["pos", 0],
                                                         "negative": ["neg", 0], "cfg": cfg}},
        "sampler": {"class_type": "KSamplerSelect", "inputs": {"sampler_name": "euler"}},
        "sigmas": {"class_type": "BasicScheduler",
                   "inputs": {"model": ["shift", 0], "scheduler": "simple", "steps": steps, "denoise": 1.0}},
        "noise": {"class_type": "RandomNoise", "inputs": {"noise_seed": seed}},
        "latent": {"class_type": "EmptyMiniMaxH3LatentAV", "inputs": {"width": width, "height": height, "length": length}},
        "sample": {"class_type": "SamplerCustomAdvanced",
                   "inputs": {"noise": ["noise", 0], "guider": ["guider", 0], "sampler": ["sampler", 0],
                              "sigmas": ["sigmas", 0], "latent_image": ["latent", 0]}},
        "save": {"class_type": "LongMediaTestSaveLatent", "inputs": {"samples": ["sample", 0], "filename": out_name}},
    }


def server_command(root: Path, base: Path, port: int) -> list[str]:
    return [sys.executable, str(root / "main.py"), "--cpu", "--listen", HOST, "--port", str(port),
            "--disable-auto-launch", "--base-directory", str(base), "--database-url", f"sqlite:///{base / 'comfyui.db'}",
            "--disable-api-nodes", "--preview-method", "none", "--log-stdout"]


def server_env() -> dict[str, str]:
    """The server's environment: this repository on PYTHONPATH (after main.py's own folder, which Python puts first,
    so ComfyUI's `nodes` stays ComfyUI's), so the pack and the test nodes import this checkout's `longmedia`."""
    env = dict(os.environ)
    env.update({"PYTHONUNBUFFERED": "1", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
                "DO_NOT_TRACK": "1", "NO_PROXY": HOST, "no_proxy": HOST})
    env["PYTHONPATH"] = os.pathsep.join([str(REPO_ROOT), *[p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]])
    return env


def start_server(root: Path, base: Path, *, timeout: float = STARTUP_TIMEOUT_S) -> ComfyServer:
    """Start ComfyUI on a free local port and wait (bounded) until /object_info answers."""
    port = free_port()
    log_path = base / "server.log"
    log = open(log_path, "wb")
    try:
        process = subprocess.Popen(server_command(root, base, port), cwd=str(root), env=server_env(),
                                   stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    finally:
        log.close()
    server = ComfyServer(root=root, base=base, port=port, process=process, log_path=log_path)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise ComfyHarnessError(f"ComfyUI exited with code {process.returncode} during startup:\n{server.log_tail()}")
        try:
            server.request("GET", "/object_info", timeout=10.0)
            return server
        except (ComfyHarnessError, OSError):
            time.sleep(0.5)
    server.stop()
    raise ComfyHarnessError(f"ComfyUI did not answer /object_info within {timeout} s:\n{server.log_tail()}")


def import_comfy_in_process(root: Path, monkeypatch: pytest.MonkeyPatch):
    """Import ComfyUI's `comfy` package from `root` in this process, on the CPU: the one place the tests put a
    ComfyUI checkout on this process's import path (`monkeypatch.syspath_prepend`, undone with `monkeypatch`)."""
    monkeypatch.syspath_prepend(str(root))
    from comfy.cli_args import args

    args.cpu = True
    import comfy.model_management
    import comfy.sd

    return comfy


def tiny_sampler_job(patcher, *, width: int = 128, height: int = 96, frames: int = 39, seed: int = 3,
                     steps: int = 2, cfg: float = 3.0):
    """SamplerCustomAdvanced's inputs for a tiny H3 patcher, as the in-process tests sample it: (noise, CFG guider
    over random tiny conditioning, euler, simple sigmas, an empty H3 AV latent). ComfyUI must be importable."""
    import comfy.samplers
    from comfy_extras import nodes_custom_sampler as ncs
    from comfy_extras import nodes_minimax_h3 as h3n

    from longmedia.testing import conditioning as tc
    from longmedia.testing.tiny_h3 import TINY_DIMS

    guider = comfy.samplers.CFGGuider(patcher)
    guider.set_conds(tc.random_conditioning(11, dims=TINY_DIMS, seed=1), tc.random_conditioning(5, dims=TINY_DIMS, seed=2))
    guider.set_cfg(cfg)
    sigmas = comfy.samplers.calculate_sigmas(patcher.get_model_object("model_sampling"), "simple", steps).cpu()
    latent = h3n.EmptyMiniMaxH3LatentAV.execute(width, height, frames).result[0]
    return ncs.Noise_RandomNoise(seed), guider, comfy.samplers.sampler_object("euler"), sigmas, latent


# the in-process sampler tests' size: 12 latent frames x 12 rows + 130 audio rows + text: ~290 packed rows
SAMPLER_WIDTH, SAMPLER_HEIGHT, SAMPLER_LENGTH = 128, 96, 39


def sampler_job(env, variant: str = "fp32", seed: int = 3, steps: int = 2):
    """`tiny_sampler_job` for one of the `sampler_env` fixture's patchers (variant fp32 or int8) at the in-process
    sampler tests' size."""
    return tiny_sampler_job(env["models"][variant], width=SAMPLER_WIDTH, height=SAMPLER_HEIGHT, frames=SAMPLER_LENGTH,
                            seed=seed, steps=steps)


def run_longmedia(env, request, *args, device_profile=None, memory_reader=None):
    """LongMedia's sampler core (`run_sampler`) on a `sampler_job`: (output samples unbound, denoised samples
    unbound, the result)."""
    result = env["core"].run_sampler(*args, request, device_profile=device_profile, memory_reader=memory_reader)
    return result.output["samples"].unbind(), result.denoised["samples"].unbind(), result


class DeviceReadings:
    """Device memory readings for `run_sampler(..., memory_reader=...)` / `run_segmented`, that differ at every read.

    Each read returns the next scripted `MemorySnapshot` (`script(...)`), else a fresh random one; every snapshot
    handed out is kept in `reads`, and ("read", index) is appended to `events`, so a test can place each read
    among the other things it records (model calls, passes). Per test, never shared.
    """

    def __init__(self, seed: int, events: list | None = None) -> None:
        import random

        self.random = random.Random(seed)
        self.events = events if events is not None else []
        self.reads: list = []
        self._script: list = []

    def snapshot(self, device: Any = "cpu", *, free: int | None = None):
        """A random reading of a 16 GiB card (free memory `free` when given)."""
        import torch

        from longmedia.report.memory import MemorySnapshot

        gib, mib = 1 << 30, 1 << 20
        total = 16 * gib
        allocated = self.random.randrange(gib // 4, 2 * gib)
        reserved = allocated + self.random.randrange(mib, gib // 2)
        free = self.random.randrange(4 * gib, total - reserved - gib) if free is None else free
        return MemorySnapshot(str(torch.device(device)), allocated, reserved, free, total,
                              self.random.randrange(gib, 3 * gib), self.random.randrange(0, gib))

    def script(self, *snapshots) -> None:
        self._script.extend(snapshots)

    def __call__(self, device):
        snap = self._script.pop(0) if self._script else self.snapshot(device)
        self.reads.append(snap)
        self.events.append(("read", len(self.reads) - 1))
        return snap
