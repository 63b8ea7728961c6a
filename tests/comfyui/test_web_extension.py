"""web/longmedia.js in headless Chromium against the real ComfyUI server (classic canvas and Nodes 2.0).

A small DevTools-protocol client (aiohttp, which ComfyUI already needs) drives the system Chromium:
the page loads the server's frontend with our pack installed, JS evaluated in the page queries
`app.graph`, and every console message, exception and log entry is collected. The browser is kept
offline (every host but 127.0.0.1 resolves to nothing). Screenshots land under pytest's tmp dir and
their paths are printed. Skipped loudly when no Chromium is installed (`apt-get install -y chromium`,
or point LONGMEDIA_CHROMIUM at a binary).
"""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
from harness import REPO_ROOT

from longmedia.planning.types import ATTENTION_MODES, MANUAL_FIELDS, MEMORY_MODES

pytest.importorskip("aiohttp", reason="the DevTools client needs aiohttp (a ComfyUI requirement)")
from devtools import CHROMIUM_ENV, Browser, chromium_binary, unexpected  # noqa: E402

EXTENSION = "LongMedia.Nodes"
SOL_INPUTS = ("sol_tau_start", "sol_tau_end", "sol_curve", "sol_min_tokens", "sol_dense_percent",
              "sol_sink_conditioning")
READY_TIMEOUT_S = 90.0
RUN_TIMEOUT_S = 180.0
# Helpers installed in the page as window.longmediaTest (the tests' only way into the graph).
PAGE_JS = r"""
(() => {
  const EXT = "LongMedia.Nodes", REPORT = "longmedia_report_view";
  const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
  const settle = async () => { app.canvas?.setDirty(true, true); await sleep(350); };
  const ext = () => app.extensions.find((e) => e.name === EXT);
  const widget = (node, name) => node.widgets.find((w) => w.name === name);
  const panel = (node) => widget(node, REPORT)?.element;
  const set = (node, name, value) => {
    const w = widget(node, name);
    w.value = value;
    w.callback?.(value, app.canvas, node);
  };
  const add = (type, pos, values = {}) => {
    const node = LiteGraph.createNode(type);
    if (!node) throw new Error(`node type ${type} is not registered`);
    app.graph.add(node); node.pos = pos;
    for (const [name, value] of Object.entries(values)) set(node, name, value);
    return node;
  };
  // Widget names the user can see, in widget order: from the DOM in Nodes 2.0, from litegraph on the canvas.
  const visible = (node) => {
    const names = node.widgets.map((w) => w.name).filter((n) => n !== REPORT);
    if (!LiteGraph.vueNodesMode) return names.filter((n) => node.isWidgetVisible(widget(node, n)));
    const el = document.querySelector(`[data-node-id="${node.id}"]`);
    const lines = new Set((el?.innerText ?? "").split("\n").map((t) => t.trim()));
    return names.filter((n) => lines.has(n));
  };
  // Setup (2 segments) -> Sampler -> Hi-Res -> Refiner on the tiny checkpoint, every stage streamed (low_vram).
  const buildTiny = (seed) => {
    app.graph.clear();
    const streamed = { memory_mode: "low_vram", attention_mode: "existing" };
    const n = {
      unet: add("UNETLoader", [0, 0], { unet_name: "tiny_h3_fp32.safetensors" }),
      shift: add("MiniMaxH3SigmaShift", [0, 140]), clip: add("LongMediaTestTinyCLIP", [0, 300], { text_dim: 96 }),
      // the seed in the prompt makes Setup run again (a cached node sends no executed event)
      pos: add("CLIPTextEncode", [300, 0], { text: `a red fox trots through fresh snow ${seed}` }),
      neg: add("CLIPTextEncode", [300, 240], { text: "" }),
      setup: add("LongMediaSetup", [300, 480], { width: 64, height: 64, seconds: 3.0, segment_seconds: 1.5 }),
      guider: add("CFGGuider", [600, 0], { cfg: 3.0 }), sampler: add("KSamplerSelect", [600, 180]),
      sigmas: add("BasicScheduler", [600, 280], { steps: 2 }), noise: add("RandomNoise", [600, 440], { noise_seed: seed }),
      lm: add("LongMediaSampler", [900, 0], streamed),
      hires: add("LongMediaHiRes", [1340, 0], { scale: 1.25, denoise: 0.5, ...streamed }),
      refiner: add("LongMediaRefiner", [1790, 0], { steps: 2, denoise: 0.25, ...streamed }),
      save: add("LongMediaTestSaveLatent", [2240, 0], { filename: `web_${seed}.safetensors` }),
    };
    for (const [a, slot, b, name] of [
      ["unet", 0, "shift", "model"], ["clip", 0, "pos", "clip"], ["clip", 0, "neg", "clip"],
      ["pos", 0, "setup", "positive"], ["neg", 0, "setup", "negative"], ["shift", 0, "guider", "model"],
      ["setup", 0, "guider", "positive"], ["setup", 1, "guider", "negative"], ["shift", 0, "sigmas", "model"],
      ["setup", 2, "lm", "latent"], ["setup", 3, "lm", "job"], ["sigmas", 0, "lm", "sigmas"],
      ["sigmas", 0, "hires", "sigmas"], ["lm", 0, "hires", "latent"], ["hires", 0, "refiner", "latent"],
      ["refiner", 0, "save", "samples"],
      ...["lm", "hires", "refiner"].flatMap((stage) => [["noise", 0, stage, "noise"], ["guider", 0, stage, "guider"],
                                                         ["sampler", 0, stage, "sampler"]])]) {
      n[a].connect(slot, n[b], n[b].findInputSlot(name));
    }
    return n;
  };
  window.longmediaTest = {
    ready: () => !!app.graph && !!app.canvas,
    classify: (info) => ext().classifyInputs(info),
    extensionUrl: () => performance.getEntriesByType("resource").map((e) => e.name)
      .find((n) => n.includes("/extensions/ComfyUI-LongMedia/")) ?? "",
    fitView: async () => { await app.extensionManager.command.execute("Comfy.Canvas.FitView"); await sleep(800); },
    focus: async (id) => {
      const node = app.graph.getNodeById(id), ds = app.canvas.ds;
      ds.scale = 0.75; ds.offset[0] = 200 / 0.75 - node.pos[0]; ds.offset[1] = 120 / 0.75 - node.pos[1];
      await settle(); await sleep(500);
    },
    buildTiny: () => { buildTiny(1); return app.graph.serialize(); },
    // [on screen, height in graph units] of each node's plan panel (DOM widgets off screen are not shown)
    panelBoxes: (ids) => ids.map((id) => {
      const el = panel(app.graph.getNodeById(id));
      return [!!el?.getClientRects().length, (el?.getBoundingClientRect().height ?? 0) / app.canvas.ds.scale];
    }),
    async modeWalk() {
      app.graph.clear();
      const node = add("LongMediaSampler", [100, 100]);
      const seen = {};
      const look = async (key) => { await settle(); seen[key] = visible(node); };
      await look("auto");
      set(node, "memory_mode", "low_vram"); await look("low_vram");
      set(node, "memory_mode", "auto"); set(node, "attention_mode", "scheduled_sol"); await look("scheduled_sol");
      set(node, "attention_mode", "sol"); set(node, "memory_mode", "ultra_low_vram"); await look("sol+ultra");
      set(node, "memory_mode", "auto"); set(node, "attention_mode", "auto");
      const toggle = () => (LiteGraph.vueNodesMode ? (node.showAdvanced = !node.showAdvanced) : node.toggleAdvanced());
      toggle(); await look("show_advanced");
      toggle(); await look("hide_advanced");
      seen.serialized = node.serialize().widgets_values;
      seen.prompt_inputs = Object.keys((await app.graphToPrompt()).output[node.id].inputs);
      // newer frontends (1.53) hand combo values over as an array-like object: compare the values
      const values = (name) => Array.from(Object.values(widget(node, name).options.values));
      seen.options = [values("memory_mode"), values("attention_mode")];
      set(node, "memory_mode", "low_vram");
      await app.loadGraphData(app.graph.serialize(), true, true, "longmedia-mode-walk");
      await settle(); seen.reloaded_low_vram = visible(app.graph.nodes.find((n) => n.type === "LongMediaSampler"));
      return seen;
    },
    async runTiny() {
      const n = buildTiny(Date.now() % 1000000007), ours = [n.lm, n.hires, n.refiner];
      const out = { error: null, panels: {} };
      try {
        await app.queuePrompt(0, 1);
        for (let i = 0; i < 360 && !ours.every((x) => x.longmediaReport); i++) await sleep(500);
        const missing = ours.filter((x) => !x.longmediaReport).map((x) => x.type);
        if (missing.length) throw new Error(`no longmedia_report reached ${missing.join(", ")}`);
        out.prompt_id = Object.keys(await (await fetch("/api/history?max_items=1")).json())[0];
        await settle();
        for (const x of [n.setup, ...ours]) out.panels[x.type] = { id: x.id, text: panel(x)?.innerText ?? "" };
      } catch (e) { out.error = String(e?.stack ?? e); }
      return out;
    },
    async load(data, name) {
      await app.loadGraphData(data, true, true, name);
      await settle();
      const ours = app.graph.nodes.filter((n) => String(n.type).startsWith("LongMedia"));
      const kinds = new Set(["INT", "FLOAT", "STRING", "BOOLEAN", "COMBO"]);
      const shown = (n, names) => names.length > 0 && names.every((m) => visible(n).includes(m));
      return ours.map((n) => {
        const def = n.constructor.nodeData, g = def ? ext().classifyInputs(def) : { manual: [], sol: [] };
        const specs = Object.values({ ...(def?.input?.required ?? {}), ...(def?.input?.optional ?? {}) });
        return { type: n.type, registered: !!def, widgets: n.widgets?.length ?? 0,
                 widget_inputs: specs.filter((s) => Array.isArray(s[0]) || kinds.has(s[0])).length,
                 memory_mode: n.widgets?.find((w) => w.name === "memory_mode")?.value ?? null,
                 attention_mode: n.widgets?.find((w) => w.name === "attention_mode")?.value ?? null,
                 manual_visible: shown(n, g.manual), sol_visible: shown(n, g.sol) };
      });
    },
  };
})();
"""


def screenshot(page: Browser, path: Path, capsys) -> Path:
    """Save a screenshot (a test artifact) and print where it is."""
    page.screenshot(path)
    with capsys.disabled():
        print(f"\n[web] screenshot: {path}")
    return path


@pytest.fixture(scope="module")
def chromium() -> str:
    exe = chromium_binary()
    if exe is None:
        pytest.skip(f"NO CHROMIUM: the web extension browser test is skipped. Install it (apt-get install -y "
                    f"chromium) or set {CHROMIUM_ENV}=/path/to/chromium")
    return exe


@pytest.fixture(scope="module")
def shots(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("web_screenshots")


@pytest.fixture(scope="module", params=["classic", "nodes2"])
def page(request, chromium, comfy_server, tmp_path_factory):
    """The frontend in one renderer, our extension loaded, the graph empty, the console checked for errors."""
    assert comfy_server.custom_node_import_error() is None
    vue = request.param == "nodes2"
    # Start on the stock default graph (no template download) in the requested renderer.
    comfy_server.request("POST", "/settings", {"Comfy.TutorialCompleted": True, "Comfy.VueNodes.Enabled": vue,
                                               "LiteGraph.Canvas.MinFontSizeForLOD": 0})  # full detail when zoomed out
    tmp = tmp_path_factory.mktemp(f"chromium_{request.param}")
    browser = Browser(chromium, tmp / "profile", tmp / "chromium.log")
    try:
        browser.call("Page.navigate", url=comfy_server.url + "/")
        browser.wait_for("!!(window.app && window.app.vueAppReady && window.app.extensions && "
                         f"window.app.extensions.some((e) => e.name === {json.dumps(EXTENSION)}))",
                         READY_TIMEOUT_S, f"the frontend with extension {EXTENSION}")
        browser.eval(PAGE_JS)
        browser.wait_for("window.longmediaTest.ready()", READY_TIMEOUT_S, "the first graph")
        assert browser.eval("window.LiteGraph.vueNodesMode === true") is vue
        browser.renderer = request.param
        yield browser
    finally:
        browser.close()


def test_extension_loads_without_console_errors(page, comfy_server):
    info = comfy_server.object_info()["LongMediaSampler"]
    groups = page.eval(f"window.longmediaTest.classify({json.dumps(info)})")
    assert groups["manual"] == list(MANUAL_FIELDS)
    assert groups["sol"] == list(SOL_INPUTS)
    assert page.eval("window.longmediaTest.extensionUrl()").endswith("/longmedia.js")
    assert unexpected(page.console()) == [], page.console_text()


def test_controls_follow_the_modes(page):
    mark = page.mark()
    seen = page.eval("window.longmediaTest.modeWalk()")
    base = ["memory_mode", "attention_mode"]
    assert seen["auto"] == base, seen
    assert seen["low_vram"] == base + list(MANUAL_FIELDS), seen
    assert seen["scheduled_sol"] == base + list(SOL_INPUTS), seen
    assert seen["sol+ultra"] == base + list(SOL_INPUTS) + list(MANUAL_FIELDS), seen
    assert seen["show_advanced"] == base + list(SOL_INPUTS) + list(MANUAL_FIELDS), seen
    assert seen["hide_advanced"] == base, seen
    assert seen["reloaded_low_vram"] == base + list(MANUAL_FIELDS), seen
    # hiding never changes what is saved or sent: every control keeps its value in the workflow and the prompt
    assert seen["serialized"] == ["auto", "auto", 1.3, 0.8, "cosine", 16384, 0.2, "exact_kv"] + [-1] * 10
    assert seen["prompt_inputs"] == base + list(SOL_INPUTS) + list(MANUAL_FIELDS)
    assert seen["options"] == [list(MEMORY_MODES), list(ATTENTION_MODES)]
    assert unexpected(page.console(mark)) == [], page.console_text(mark)


def test_report_panels_after_a_real_run(page, comfy_server, shots, capsys):
    """Setup -> Sampler (2 segments) -> Hi-Res -> Refiner through the UI: each shows what its report says."""
    mark = page.mark()
    out = page.eval("window.longmediaTest.runTiny()", timeout=RUN_TIMEOUT_S + 30)
    assert out["error"] is None, out
    history = comfy_server.wait(out["prompt_id"], timeout=RUN_TIMEOUT_S)["outputs"]
    panels = out["panels"]
    stages = ("LongMediaSampler", "LongMediaHiRes", "LongMediaRefiner")
    page.eval(f"window.longmediaTest.focus({panels['LongMediaSampler']['id']})")
    boxes = page.eval(f"window.longmediaTest.panelBoxes({json.dumps([panels[t]['id'] for t in stages])})")
    assert all(shown and height >= 60 for shown, height in boxes), boxes
    assert "2 segments" in panels["LongMediaSetup"]["text"], panels
    for node_type in stages:
        report = history[str(panels[node_type]["id"])]["longmedia_report"][0]
        run = report["segments"][0]["run"] if node_type == "LongMediaSampler" else report
        text, plan = panels[node_type]["text"], run["plan"]
        assert f"mode {plan['memory_mode']} (set by hand)" in text, (node_type, text)
        assert f"attention {run['attention_backend']} (exact" in text, (node_type, text)
        assert "predicted " in text and "usable" in text and "measured " in text, (node_type, text)
        assert "blocks 2 of 2 streamed" in text, (node_type, text)
        assert f"sequence {plan['geometry']['seq_len']} packed rows" in text, (node_type, text)
        assert f"why ({len(plan['reasons'])})" in text, (node_type, text)
    sampler = panels["LongMediaSampler"]["text"]
    assert "segments 2 passes" in sampler and "drift s/step" in sampler, sampler
    assert screenshot(page, shots / f"{page.renderer}_report.png", capsys).stat().st_size > 20_000
    assert unexpected(page.console(mark)) == [], page.console_text(mark)


def provide_pictures(workflow: dict, input_dir: Path) -> None:
    """Seeded random pictures for the workflow's LoadImage nodes (the user's own files in real use)."""
    from PIL import Image

    rng = random.Random(0)
    for node in workflow["nodes"]:
        name = (node.get("widgets_values") or [None])[0]
        if node.get("type") == "LoadImage" and isinstance(name, str) and not (input_dir / name).exists():
            pixels = bytes(rng.randrange(256) for _ in range(64 * 64 * 3))
            Image.frombytes("RGB", (64, 64), pixels).save(input_dir / name)


def _workflow_files() -> list[Path]:
    return sorted(p for p in (REPO_ROOT / "workflows").glob("*.json")
                  if "nodes" in json.loads(p.read_text(encoding="utf-8")))


@pytest.mark.parametrize("workflow", [p.name for p in _workflow_files()] or ["built-in"])
def test_workflow_renders(page, workflow, comfy_server, shots, capsys):
    """Each example UI workflow (or, until there are some, one built here) loads with our nodes and widgets."""
    mark = page.mark()
    if workflow == "built-in":
        data = page.eval("window.longmediaTest.buildTiny()")
    else:
        data = json.loads((REPO_ROOT / "workflows" / workflow).read_text(encoding="utf-8"))
        provide_pictures(data, comfy_server.base / "input")
    ours = sorted({n["type"] for n in data["nodes"] if str(n.get("type", "")).startswith("LongMedia")})
    assert ours, f"{workflow} has no LongMedia node"
    nodes = page.eval(f"window.longmediaTest.load({json.dumps(data)}, {json.dumps(workflow)})")
    assert sorted({n["type"] for n in nodes}) == ours, nodes
    for node in nodes:
        assert node["registered"], f"{node['type']} loaded as a missing node in {workflow}"
        assert node["widgets"] >= node["widget_inputs"], node
        if node["memory_mode"] is not None:
            assert node["manual_visible"] == (node["memory_mode"] != "auto"), node
            assert node["sol_visible"] == (node["attention_mode"] in ("sol", "scheduled_sol")), node
    page.eval("window.longmediaTest.fitView()")
    screenshot(page, shots / f"{page.renderer}_{Path(workflow).stem}.png", capsys)
    assert unexpected(page.console(mark)) == [], page.console_text(mark)
