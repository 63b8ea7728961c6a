"""A small DevTools-protocol client for the headless-Chromium tests (aiohttp, which ComfyUI already needs).

The browser is kept offline (every host but 127.0.0.1 resolves to nothing); every console message,
exception and log entry is collected and sorted into ours, the stock frontend's known noise, or unexpected.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import re
import shutil
import subprocess
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import aiohttp

CHROMIUM_ENV = "LONGMEDIA_CHROMIUM"
CHROMIUM_NAMES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
# Console noise of the stock frontend, each with why it is not ours. Nothing mentioning LongMedia is ever ignored.
FRONTEND_NOISE = (
    ("optional user files the frontend probes (404)", re.compile(r"/(user\.css|api/userdata)\b")),
    ("the frontend's settings store reads the graph while it boots",
     re.compile(r"^ComfyApp graph accessed before initialization$")),
    ("the test browser is offline: external fetches are refused",
     re.compile(r"(https?://(?!127\.0\.0\.1)[^\s'\"]+.*(Content Security Policy|ERR_NAME_NOT_RESOLVED))|"
                r"((Content Security Policy|ERR_NAME_NOT_RESOLVED).*https?://(?!127\.0\.0\.1))")),
)

def chromium_binary() -> str | None:
    explicit = os.environ.get(CHROMIUM_ENV, "").strip()
    if explicit:
        return explicit if Path(explicit).is_file() else None
    return next((path for name in CHROMIUM_NAMES if (path := shutil.which(name))), None)


@dataclass(frozen=True)
class ConsoleEntry:
    """One console message, uncaught exception or browser log entry; `where`: its URL and stack frames' URLs."""

    kind: str
    level: str
    text: str
    where: str = ""

    @property
    def ours(self) -> bool:
        """Raised in our extension's file, or naming LongMedia (a network entry only by its URL)."""
        return "/extensions/ComfyUI-LongMedia/" in self.where or (
            self.kind != "log/network" and "longmedia" in self.text.lower())

    @property
    def noise_reason(self) -> str | None:
        if self.ours:
            return None
        return next((why for why, pattern in FRONTEND_NOISE
                     if pattern.search(self.text) or pattern.search(self.where.split(" ")[0])), None)


def _entry(event: dict) -> ConsoleEntry | None:
    method, p = event.get("method"), event.get("params", {})
    if method in ("Runtime.consoleAPICalled", "Runtime.exceptionThrown"):
        d = p.get("exceptionDetails", {})
        frames = (p.get("stackTrace") or d.get("stackTrace") or {}).get("callFrames", [])
        where = " ".join([d.get("url", "")] * bool(d.get("url")) + [f["url"] for f in frames])
        if method == "Runtime.exceptionThrown":
            return ConsoleEntry("exception", "error", d.get("exception", {}).get("description") or d.get("text", ""),
                                where)
        text = " ".join(str(a.get("value", a.get("description", ""))) for a in p.get("args", []))
        return ConsoleEntry("console", p.get("type", ""), text, where)
    if method == "Log.entryAdded":
        e = p.get("entry", {})
        return ConsoleEntry("log/" + e.get("source", ""), e.get("level", ""), e.get("text", ""), e.get("url", ""))
    return None


class Browser:
    """Headless Chromium with one page, driven through the DevTools protocol (a synchronous facade)."""

    def __init__(self, exe: str, profile: Path, log_path: Path):
        self.loop = asyncio.new_event_loop()
        self.events: list[dict] = []
        self._next, self._pending = 0, {}
        shutil.rmtree(profile, ignore_errors=True)
        args = [exe, "--headless=new", "--disable-gpu", "--remote-debugging-port=0", f"--user-data-dir={profile}",
                "--window-size=1600,1000", "--no-first-run", "--no-default-browser-check", "--disable-extensions",
                "--host-resolver-rules=MAP * ~NOTFOUND , EXCLUDE 127.0.0.1", "about:blank"]
        if hasattr(os, "geteuid") and os.geteuid() == 0:
            args.insert(1, "--no-sandbox")  # Chromium refuses its sandbox as root (CI containers)
        with open(log_path, "wb") as log:
            self.process = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        try:
            self.loop.run_until_complete(self._connect(profile / "DevToolsActivePort"))
        except BaseException:
            self.close()
            raise

    async def _connect(self, port_file: Path) -> None:
        deadline = time.monotonic() + 30
        while not (port_file.is_file() and len(port_file.read_text().split()) >= 2):
            if self.process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"Chromium did not open its DevTools port (exit code {self.process.poll()})")
            await asyncio.sleep(0.1)
        port = port_file.read_text().split()[0]
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        targets = json.loads(opener.open(f"http://127.0.0.1:{port}/json/list", timeout=10).read())
        url = next(t["webSocketDebuggerUrl"] for t in targets if t["type"] == "page")
        self.session = aiohttp.ClientSession(trust_env=False)
        self.ws = await self.session.ws_connect(url, max_msg_size=0)
        self.reader = asyncio.ensure_future(self._read())
        for domain in ("Runtime", "Log", "Page"):
            await self._send(f"{domain}.enable")

    async def _read(self) -> None:
        async for msg in self.ws:
            data = json.loads(msg.data)
            future = self._pending.pop(data.get("id"), None)
            if future is not None and not future.done():
                future.set_result(data)
            elif "method" in data:
                self.events.append(data)

    async def _send(self, method: str, timeout: float = 60.0, **params) -> dict:
        self._next += 1
        future = self.loop.create_future()
        self._pending[self._next] = future
        await self.ws.send_str(json.dumps({"id": self._next, "method": method, "params": params}))
        reply = await asyncio.wait_for(future, timeout)
        if "error" in reply:
            raise RuntimeError(f"{method}: {reply['error']}")
        return reply["result"]

    def call(self, method: str, timeout: float = 60.0, **params) -> dict:
        return self.loop.run_until_complete(self._send(method, timeout, **params))

    def eval(self, expression: str, timeout: float = 60.0):
        """Evaluate JS in the page (promises awaited); its JSON value, or RuntimeError with the JS error."""
        result = self.call("Runtime.evaluate", timeout, expression=expression, awaitPromise=True, returnByValue=True)
        if "exceptionDetails" in result:
            d = result["exceptionDetails"]
            raise RuntimeError(d.get("exception", {}).get("description") or d.get("text"))
        return result["result"].get("value")

    def wait_for(self, expression: str, timeout: float, what: str) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.eval(expression):
                return
            self.loop.run_until_complete(asyncio.sleep(0.25))
        raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}:\n{self.console_text()}")

    def mark(self) -> int:
        """A position in the event log: console(since=mark) is what came after it."""
        self.loop.run_until_complete(asyncio.sleep(0.05))  # let the reader drain queued events
        return len(self.events)

    def console(self, since: int = 0) -> list[ConsoleEntry]:
        self.mark()
        return [e for e in map(_entry, self.events[since:]) if e is not None]

    def console_text(self, since: int = 0) -> str:
        return "\n".join(f"[{e.kind} {e.level}] {e.text} {e.where}" for e in self.console(since))[-6000:]

    def screenshot(self, path: Path, clip: dict | None = None) -> Path:
        """The viewport as PNG, or only `clip` ({x, y, width, height} in CSS px)."""
        params = {"format": "png"}
        if clip is not None:
            params["clip"] = {**clip, "scale": 1}
        data = self.call("Page.captureScreenshot", **params)["data"]
        path.write_bytes(base64.b64decode(data))
        return path

    def close(self) -> None:
        async def shutdown():
            if getattr(self, "reader", None) is not None:
                self.reader.cancel()
            for part in (getattr(self, "ws", None), getattr(self, "session", None)):
                if part is not None:
                    await part.close()
        try:
            self.loop.run_until_complete(shutdown())
        finally:
            self.loop.close()
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)


def unexpected(entries: list[ConsoleEntry]) -> list[ConsoleEntry]:
    """Errors (and LongMedia warnings) that are not the stock frontend's known noise."""
    return [e for e in entries if (e.level in ("error", "assert") and e.noise_reason is None)
            or (e.level in ("warning", "warn") and e.ours)]
