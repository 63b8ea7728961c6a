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
import os
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
    return names.filter((n) => lines.has(widget(node, n).label || n));
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
    extensionUrls: () => performance.getEntriesByType("resource").map((e) => e.name)
      .filter((n) => n.includes("/extensions/ComfyUI-LongMedia/")).map((n) => n.split("/ComfyUI-LongMedia/")[1]),
    ourExtensions: () => app.extensions.filter((e) => e.name.startsWith("LongMedia")).map((e) => e.name),
    fitView: async () => { await app.extensionManager.command.execute("Comfy.Canvas.FitView"); await sleep(800); },
    focus: async (id) => {
      const node = app.graph.getNodeById(id), ds = app.canvas.ds;
      ds.scale = 0.75; ds.offset[0] = 200 / 0.75 - node.pos[0]; ds.offset[1] = 120 / 0.75 - node.pos[1];
      await settle(); await sleep(500);
    },
    buildTiny: () => { buildTiny(1); return app.graph.serialize(); },
    // Zoom so that the nodes of `types` fill the view from its top-left; their screen rect (CSS px) for a clip.
    async frame(types, zoom) {
      const nodes = app.graph.nodes.filter((n) => types.includes(n.type));
      const boxes = nodes.map((n) => Array.from(n.getBounding()));
      const x0 = Math.min(...boxes.map((b) => b[0])), y0 = Math.min(...boxes.map((b) => b[1]));
      const x1 = Math.max(...boxes.map((b) => b[0] + b[2])), y1 = Math.max(...boxes.map((b) => b[1] + b[3]));
      // the "missing models" notice (no models in the test server) would cover the right-hand nodes
      for (const el of document.querySelectorAll("body *")) {
        if (el.children.length || !/errors? found/.test(el.textContent ?? "")) continue;
        let box = el;
        while (box.parentElement && !["fixed", "absolute"].includes(getComputedStyle(box).position)) box = box.parentElement;
        box.style.visibility = "hidden";
      }
      const ds = app.canvas.ds, left = 240, top = 110;   // clear of the canvas toolbar
      ds.scale = zoom; ds.offset[0] = left / zoom - x0; ds.offset[1] = top / zoom - y0;
      await settle(); await sleep(500);
      const rect = app.canvas.canvas.getBoundingClientRect();
      return { x: rect.left + left - 10, y: rect.top + top - 10,
               width: Math.min((x1 - x0) * zoom + 20, innerWidth - rect.left - left),
               height: Math.min((y1 - y0) * zoom + 20, innerHeight - rect.top - top) };
    },
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
      // a manual control at -1 reads "auto": the value on the canvas, the label in Nodes 2.0 (its DOM shows it)
      const manual = ext().classifyInputs(node.constructor.nodeData).manual;
      const text = () => document.querySelector(`[data-node-id="${node.id}"]`)?.innerText ?? "";
      // [label, plain label, the value as the canvas draws it, the Nodes 2.0 DOM shows "<label>: auto"]
      const labels = (n) => { const w = widget(node, n);
        return [w.label, w.longmediaLabel, w._displayValue ?? null, text().includes(`${w.longmediaLabel}: auto`)]; };
      seen.auto_labels = manual.map(labels);
      set(node, manual[0], 512); await settle();
      seen.set_512 = labels(manual[0]);
      seen.saved_with_512 = JSON.stringify(node.serialize());
      set(node, manual[0], -1); await settle();
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
    // Setup's sockets as the family changes and pictures connect; the prompt box with positive connected or not.
    // `type`: LongMediaSetup (a V3 DynamicCombo family where ComfyUI has one: the frontend adds the sockets) or
    // LongMediaTestFlatSetup (the flat schema of an older ComfyUI: the extension adds them).
    async setupWalk(type) {
      app.graph.clear();
      const setup = add(type, [400, 0]), clip = add("LongMediaTestTinyCLIP", [0, 0]);
      const enc = add("CLIPTextEncode", [0, 200]), image = add("EmptyImage", [0, 400]);
      const dynamic = ext().hasDynamicFamily(setup.constructor.nodeData);
      const nm = (n) => (dynamic ? ext().dynamicName(n) : n);
      const sockets = () => setup.inputs.filter((i) => !i.widget).map((i) => i.name);
      const promptShown = () => visible(setup).includes("prompt");
      const textareas = () => [...(document.querySelector(`[data-node-id="${setup.id}"]`)?.querySelectorAll("textarea")
                                   ?? [])].filter((t) => !t.disabled).length;
      const linkedAt = () => setup.inputs.flatMap((i, k) => (setup.getInputLink(k) ? [i.name] : []));
      const seen = { dynamic };
      await settle(); seen.t2va = sockets(); seen.prompt_free = promptShown(); seen.textareas_free = textareas();
      clip.connect(0, enc, enc.findInputSlot("clip")); enc.connect(0, setup, setup.findInputSlot("positive"));
      await settle(); seen.prompt_with_positive = promptShown(); seen.textareas_with_positive = textareas();
      seen.prompt_flagged_hidden = !!widget(setup, "prompt").options.hidden;
      seen.prompt_disabled = widget(setup, "prompt").disabled === true;
      set(setup, "family", "fl2va"); await settle(); seen.fl2va = sockets();
      set(setup, "family", "ref2va"); await settle(); seen.ref2va = sockets();
      image.connect(0, setup, setup.findInputSlot(nm("ref_image_1"))); await settle(); seen.ref2va_one = sockets();
      set(setup, "family", "t2va"); await settle(); seen.t2va_linked = sockets(); seen.linked_t2va = linkedAt();
      seen.links_to_setup = [...(app.graph.links.values?.() ?? Object.values(app.graph.links))]
        .filter((l) => l && l.target_id === setup.id).length;
      if (!dynamic) {
        const link = setup.getInputLink(setup.findInputSlot("ref_image_1"));
        seen.link_slot_ok = setup.inputs[link.target_slot].name === "ref_image_1";
      }
      // a socket removed before a connected one: the link moves with its socket
      set(setup, "family", "ref2va"); await settle();
      if (dynamic) { image.connect(0, setup, setup.findInputSlot(nm("ref_image_1"))); await settle(); }
      image.connect(0, setup, setup.findInputSlot(nm("ref_video_1"))); await settle();
      if (!dynamic) { set(setup, "family", "t2va"); await settle(); }
      setup.disconnectInput(setup.findInputSlot(nm("ref_image_1"))); await settle();
      seen.after_removal = sockets(); seen.linked_after_removal = linkedAt();
      setup.disconnectInput(setup.findInputSlot("positive")); await settle();
      seen.prompt_after_disconnect = promptShown(); seen.textareas_after_disconnect = textareas();
      seen.prompt_enabled_again = widget(setup, "prompt").disabled !== true;
      return seen;
    },
    // A workflow saved with Setup's flat socket names, loaded where `family` is dynamic: its sockets, their
    // links' origins and the prompt it queues.
    async loadFlat(data) {
      await app.loadGraphData(data, true, true, "longmedia-flat-names");
      await settle();
      const setup = app.graph.nodes.find((n) => n.type === "LongMediaSetup");
      const linked = Object.fromEntries(setup.inputs.flatMap((i, k) => {
        const link = setup.getInputLink(k);
        return link ? [[i.name, String(link.origin_id)]] : [];
      }));
      const prompt = (await app.graphToPrompt()).output[setup.id].inputs;
      return { sockets: setup.inputs.filter((i) => !i.widget).map((i) => i.name), linked,
               prompt_links: Object.keys(prompt).filter((k) => Array.isArray(prompt[k])) };
    },
    // After a run: the "why" list opening grows the panel and closing shrinks it; a changed input marks it stale.
    async panelBehaviour(id) {
      const node = app.graph.getNodeById(id), w = widget(node, REPORT), details = panel(node).querySelector("details");
      const height = () => w.computeLayoutSize?.(node)?.minHeight ?? w.options.getMinHeight();
      const out = { in_panel: !w.options.hideInPanel, serialize: w.serialize !== false && w.options.serialize !== false };
      out.closed = [height(), node.size[1]];
      details.open = true; await settle(); out.open = [height(), node.size[1]];
      details.open = false; await settle(); out.reclosed = [height(), node.size[1]];
      out.stale_before = panel(node).innerText.includes("stale");
      set(node, "memory_mode", "ultra_low_vram"); await settle();
      out.stale_after = panel(node).innerText.includes("stale");
      set(node, "memory_mode", "low_vram"); await settle();
      return out;
    },
    // Each node's box (title included), its height and the height its content needs; Setup's input sockets.
    layout() {
      return app.graph.nodes.map((n) => {
        const b = n.getBounding ? Array.from(n.getBounding()) : [n.pos[0], n.pos[1] - LiteGraph.NODE_TITLE_HEIGHT,
                                                                   n.size[0], n.size[1] + LiteGraph.NODE_TITLE_HEIGHT];
        return { id: n.id, type: n.type, title: n.title, box: b, size: Array.from(n.size),
                 content: LiteGraph.vueNodesMode ? null : Array.from(n.computeSize()),
                 inputs: (n.inputs ?? []).filter((i) => !i.widget).map((i) => i.name),
                 // input name -> the node its link comes from (read by slot index, as the frontend resolves it)
                 linked: Object.fromEntries((n.inputs ?? []).flatMap((i, k) => {
                   const link = n.getInputLink(k);
                   return link ? [[i.name, String(link.origin_id)]] : [];
                 })) };
      });
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


DOC_IMAGES = REPO_ROOT / "docs" / "img"
DOC_ENV = "LONGMEDIA_DOC_SCREENSHOTS"   # =1: also write the README's screenshots into docs/img/
SLACK_PX = 8                            # web/longmedia.js: a node this much taller than its content is oversized


def doc_screenshot(page: Browser, name: str, types: list[str], zoom: float, capsys) -> Path | None:
    """The README's screenshot `name`: the nodes of `types` at `zoom`, written to docs/img/ only when
    LONGMEDIA_DOC_SCREENSHOTS=1."""
    if os.environ.get(DOC_ENV) != "1":
        return None
    DOC_IMAGES.mkdir(parents=True, exist_ok=True)
    clip = page.eval(f"window.longmediaTest.frame({json.dumps(types)}, {zoom})")
    path = page.screenshot(DOC_IMAGES / name, clip=clip)
    with capsys.disabled():
        print(f"\n[web] doc screenshot: {path}")
    return path


def expected_setup_sockets(family: str, linked: set[str]) -> list[str]:
    """Setup's frame/reference sockets in the UI: the family's, reference slots up to one past the last connected."""
    if family == "fl2va":
        return ["first_frame", "last_frame"]
    if family != "ref2va":
        return []
    out = []
    for prefixes, count in ((("ref_image_",), 9), (("ref_video_", "ref_video_audio_"), 3), (("ref_audio_",), 3)):
        last = max((int(n[len(p):]) for n in linked for p in prefixes if n[len(p):].isdigit() and n.startswith(p)),
                   default=0)
        out += [f"{p}{i}" for i in range(1, min(count, last + 1) + 1) for p in prefixes]
    return out


UPDATE_ENV = "LONGMEDIA_UPDATE_WORKFLOWS"   # =1: save the sizes the canvas computes into workflows/*.json
KEEP_SIZE = ("LoadImage", "SaveVideo", "MarkdownNote", "CLIPTextEncode")   # previews and text boxes keep theirs


def save_computed_sizes(workflow: str, layout: list[dict]) -> None:
    """Each node's computed height (and at least its computed width) into the workflow file; then re-run
    tools/layout_workflows.py to place the nodes at their new sizes."""
    path = REPO_ROOT / "workflows" / workflow
    data = json.loads(path.read_text(encoding="utf-8"))
    by_id = {str(n["id"]): n for n in layout}
    for node in data["nodes"]:
        seen = by_id.get(str(node["id"]))
        if seen and seen["content"] and node["type"] not in KEEP_SIZE:
            node["size"] = [max(node["size"][0], round(seen["content"][0])), round(seen["content"][1])]
    path.write_text(json.dumps(data, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")


def overlaps(layout: list[dict]) -> list[tuple[str, str]]:
    """Pairs of nodes whose boxes (title bar included) intersect."""
    out = []
    for i, a in enumerate(layout):
        ax, ay, aw, ah = a["box"]
        for b in layout[i + 1:]:
            bx, by, bw, bh = b["box"]
            if ax < bx + bw and bx < ax + aw and ay < by + bh and by < ay + ah:
                out.append((f"{a['type']} {a['title']!r}", f"{b['type']} {b['title']!r}"))
    return out


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
    # the entry and its ES modules load from /extensions/<pack>/ (relative imports resolve there), and only the
    # entry registers an extension although ComfyUI serves every .js under web/
    urls = page.eval("window.longmediaTest.extensionUrls()")
    assert {"longmedia.js", "lib/controls.js", "lib/setup_sockets.js", "lib/report_panel.js"} <= set(urls), urls
    assert page.eval("window.longmediaTest.ourExtensions()") == [EXTENSION]
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
    # -1 reads "auto": the canvas draws the value so; Nodes 2.0 draws the number itself, so the label says it
    for name, (label, plain, shown, in_dom) in zip(MANUAL_FIELDS, seen["auto_labels"]):
        assert shown == "auto" and plain, (name, seen["auto_labels"])
        if page.renderer == "classic":
            assert label == plain, (name, label)
        else:
            assert label == f"{plain}: auto" and in_dom, (name, label, in_dom)
    label, plain, shown, in_dom = seen["set_512"]
    assert label == plain and shown == "512" and not in_dom, seen["set_512"]
    assert ": auto" not in seen["saved_with_512"]    # the label never reaches the workflow
    assert unexpected(page.console(mark)) == [], page.console_text(mark)


def dynamic_name(name: str) -> str:
    """Setup's V3 dynamic input name for a flat one (web/lib/setup_sockets.js dynamicName)."""
    if name.endswith("_frame"):
        return f"family.{name}"
    group = {"ref_image": "pictures", "ref_video": "videos", "ref_video_audio": "video_audios",
             "ref_audio": "audios"}[name.rsplit("_", 1)[0]]
    return f"family.{group}.{name}"


@pytest.mark.parametrize("node_type", ["LongMediaSetup", "LongMediaTestFlatSetup"])
def test_setup_shows_the_sockets_its_family_uses(page, node_type):
    """Setup where `family` is a V3 DynamicCombo (both test hosts: the frontend adds the family's sockets, named
    family.*), and the flat schema of an older ComfyUI (the extension adds them)."""
    mark = page.mark()
    seen = page.eval(f"window.longmediaTest.setupWalk({json.dumps(node_type)})")
    dynamic = node_type == "LongMediaSetup"
    assert seen["dynamic"] is dynamic, seen
    nm = dynamic_name if dynamic else (lambda n: n)
    common = ["positive", "negative", "clip", "vae", "audio_vae"]
    assert seen["t2va"] == common, seen            # no reference or frame socket in text-to-AV
    assert seen["fl2va"] == common + [nm("first_frame"), nm("last_frame")], seen
    assert seen["ref2va"] == common + [nm(n) for n in ("ref_image_1", "ref_video_1", "ref_video_audio_1",
                                                        "ref_audio_1")], seen
    assert seen["ref2va_one"] == common + [nm(n) for n in ("ref_image_1", "ref_image_2", "ref_video_1",
                                                            "ref_video_audio_1", "ref_audio_1")], seen
    if dynamic:
        # the stock DynamicCombo drops the sockets of the family left, with their links (none left dangling)
        assert seen["t2va_linked"] == common and seen["linked_t2va"] == ["positive"], seen
        assert seen["links_to_setup"] == 1, seen
        assert seen["after_removal"] == common + [nm(n) for n in ("ref_image_1", "ref_video_1", "ref_video_2",
                                                                   "ref_video_audio_1", "ref_audio_1")], seen
    else:
        assert seen["t2va_linked"] == common + ["ref_image_1"], seen   # a connected socket never disappears
        assert seen["link_slot_ok"], seen
        assert seen["after_removal"] == common + ["ref_video_1"], seen
    assert seen["linked_after_removal"] == ["positive", nm("ref_video_1")], seen
    # the prompt box is unused while positive is connected: hidden on the canvas, disabled (so not shown as an
    # editable box) in Nodes 2.0, and back when positive goes
    assert seen["prompt_free"] and seen["prompt_flagged_hidden"] and seen["prompt_disabled"], seen
    assert seen["prompt_after_disconnect"] and seen["prompt_enabled_again"], seen
    if page.renderer == "classic":
        assert not seen["prompt_with_positive"], seen
    else:
        assert seen["textareas_free"] >= 1 and seen["textareas_with_positive"] == 0, seen
        assert seen["textareas_after_disconnect"] >= 1, seen
    assert unexpected(page.console(mark)) == [], page.console_text(mark)


def test_a_workflow_saved_with_flat_setup_names_moves_its_links(page, comfy_server):
    """ref2va_hires_refiner.json with Setup's sockets under their old flat names (ref_image_1): where `family`
    is dynamic, each link moves onto its family.* socket, from the same node, and the prompt names those."""
    mark = page.mark()
    data = json.loads((REPO_ROOT / "workflows" / "ref2va_hires_refiner.json").read_text(encoding="utf-8"))
    provide_pictures(data, comfy_server.base / "input")
    setup = next(n for n in data["nodes"] if n["type"] == "LongMediaSetup")
    origin = {link[0]: str(link[1]) for link in data["links"]}
    saved = {i["name"]: origin[i["link"]] for i in setup["inputs"] if i.get("link") is not None}
    for slot in setup["inputs"]:
        if slot["name"].startswith("family."):
            slot["name"] = slot.pop("label")
    assert "ref_image_1" in {i["name"] for i in setup["inputs"]}
    seen = page.eval(f"window.longmediaTest.loadFlat({json.dumps(data)})")
    assert seen["linked"] == saved, seen
    assert not [n for n in seen["sockets"] if n.startswith("ref_")], seen
    assert sorted(k for k in seen["prompt_links"] if k.startswith("family.")) == \
        ["family.pictures.ref_image_1", "family.pictures.ref_image_2"], seen
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
        # a segmented Sampler shows its largest pass (the most packed rows), labelled
        run = (max((s["run"] for s in report["segments"]), key=lambda r: r["plan"]["geometry"]["seq_len"])
               if node_type == "LongMediaSampler" else report)
        text, plan = panels[node_type]["text"], run["plan"]
        assert f"mode {plan['memory_mode']} (set by hand)" in text, (node_type, text)
        assert f"attention {run['attention_backend']} (exact" in text, (node_type, text)
        assert "predicted " in text and "usable" in text and "measured " in text, (node_type, text)
        assert "blocks 2 of 2 streamed" in text, (node_type, text)
        assert f"sequence {plan['geometry']['seq_len']} packed rows" in text, (node_type, text)
        assert f"why ({len(plan['reasons'])})" in text, (node_type, text)
    sampler = panels["LongMediaSampler"]["text"]
    assert "segments 2 passes" in sampler and "drift s/step" in sampler, sampler
    assert "(largest pass, #" in sampler and "pass\tframes\tcontext\trows" in sampler, sampler
    setup = panels["LongMediaSetup"]["text"]
    assert "pass\tframes\tcontext\tnew -> result" in setup and "seed" not in setup and " | " not in setup, setup
    assert screenshot(page, shots / f"{page.renderer}_report.png", capsys).stat().st_size > 20_000
    if page.renderer == "classic":
        doc_screenshot(page, "plan_panel.png", ["LongMediaSampler", "LongMediaHiRes"], 0.8, capsys)
    seen = page.eval(f"window.longmediaTest.panelBehaviour({panels['LongMediaSampler']['id']})")
    assert not seen["in_panel"] and not seen["serialize"], seen
    assert seen["open"][0] > seen["closed"][0] and seen["reclosed"][0] == seen["closed"][0], seen
    if page.renderer == "classic":   # Nodes 2.0 sizes the node from the DOM
        assert seen["open"][1] > seen["closed"][1] and seen["reclosed"][1] < seen["open"][1], seen
    assert not seen["stale_before"] and seen["stale_after"], seen
    assert unexpected(page.console(mark)) == [], page.console_text(mark)


def provide_pictures(workflow: dict, input_dir: Path) -> None:
    """The workflow's LoadImage pictures, copied from workflows/input/ (every picture a workflow loads is shipped)."""
    import shutil

    for node in workflow["nodes"]:
        name = (node.get("widgets_values") or [None])[0]
        if node.get("type") == "LoadImage":
            shipped = REPO_ROOT / "workflows" / "input" / str(name)
            assert shipped.is_file(), f"{name} is loaded by a workflow but not shipped in workflows/input/"
            shutil.copyfile(shipped, input_dir / name)


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
    layout = page.eval("window.longmediaTest.layout()")
    if page.renderer == "classic" and os.environ.get(UPDATE_ENV) == "1":
        save_computed_sizes(workflow, layout)
    assert overlaps(layout) == [], overlaps(layout)
    if page.renderer == "classic":   # the canvas computes node sizes (Nodes 2.0 sizes nodes from the DOM)
        saved = {str(n["id"]): n["size"] for n in data["nodes"]}
        for node in layout:
            if str(node["type"]).startswith("LongMedia"):
                assert node["size"][1] <= node["content"][1] + SLACK_PX, f"{node} is taller than its content"
                assert abs(saved[str(node["id"])][1] - node["content"][1]) <= SLACK_PX, \
                    f"{workflow} saves {node['type']} at {saved[str(node['id'])]}, its content needs {node['content']}"
    setup = next(n for n in layout if n["type"] == "LongMediaSetup")
    family = next(n for n in data["nodes"] if n["type"] == "LongMediaSetup")["widgets_values"][3]
    short = [name.rsplit(".", 1)[-1] for name in setup["inputs"]]
    refs = [name for name in short if name.startswith("ref_") or name.endswith("_frame")]
    assert [dynamic_name(n) for n in refs] == [n for n in setup["inputs"] if n.startswith("family.")], setup["inputs"]
    linked = {i["name"].rsplit(".", 1)[-1] for n in data["nodes"] if n["type"] == "LongMediaSetup" for i in n["inputs"]
              if i.get("link") is not None}
    assert refs == expected_setup_sockets(family, linked), (family, setup["inputs"])
    assert setup["inputs"].index("positive") < setup["inputs"].index("negative"), setup["inputs"]
    # every link the file saves reaches the input it names, from the node it names (none lost or moved)
    origin = {link[0]: str(link[1]) for link in data["links"]}
    for saved_node in data["nodes"]:
        live = next(n for n in layout if str(n["id"]) == str(saved_node["id"]))
        saved_links = {i["name"]: origin[i["link"]] for i in saved_node.get("inputs", []) if i.get("link") is not None}
        assert {k: live["linked"].get(k) for k in saved_links} == saved_links, (saved_node["type"], live["linked"])
    page.eval("window.longmediaTest.fitView()")
    screenshot(page, shots / f"{page.renderer}_{Path(workflow).stem}.png", capsys)
    if page.renderer == "classic" and workflow == "ref2va_hires_refiner.json":
        doc_screenshot(page, "nodes.png", ["LongMediaSetup", "CFGGuider", "LongMediaSampler", "LongMediaHiRes",
                                           "LongMediaRefiner"], 0.55, capsys)
    assert unexpected(page.console(mark)) == [], page.console_text(mark)
