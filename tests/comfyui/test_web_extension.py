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
PAGE_JS = (Path(__file__).with_name("web_page_helpers.js")).read_text(encoding="utf-8")


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


def test_a_latent_with_nan_is_the_panel_s_first_warning(page):
    """report.output_warning (RunReport: the sampled latent holds NaN or inf) leads the plan panel's warnings."""
    from longmedia.report.run_report import NON_FINITE, STREAMED_NAN_ADVICE

    warning = NON_FINITE + STREAMED_NAN_ADVICE
    run = {"kind": "run", "plan": {"memory_mode": "low_vram", "warnings": ["plan warning"], "geometry": {"seq_len": 290}},
           "streamed_blocks": [0, 1], "output_warning": warning}
    clean = {**run, "output_warning": ""}
    segmented = {"kind": "segmented_run", "segment_plan": {"seconds": 3.0}, "segments": [{"index": 1, "run": clean}, {"index": 2, "run": run}]}
    js = ("(async () => { const m = await import('/extensions/ComfyUI-LongMedia/lib/report_format.js'); "
          f"return [{json.dumps(run)}, {json.dumps(clean)}, {json.dumps(segmented)}]"
          ".map((r) => m.formatReport(r).warnings); })()")
    single, none, passes = page.eval(js)
    assert single == [warning, "plan warning"] and none == ["plan warning"], (single, none)
    assert passes == ["plan warning", warning], passes  # one pass's NaN shows on the segmented panel


def test_controls_follow_the_modes(page):
    mark = page.mark()
    seen = page.eval("window.longmediaTest.modeWalk()")
    # `devices` (sequence parallelism) is an advanced input the extension leaves alone: each renderer shows it by its
    # own advanced-input rule, so it is left out of the walk's lists here; the serialized values below still hold it
    seen = {k: [n for n in v if n != "devices"] if k not in ("serialized", "auto_labels", "set_512", "options")
            and isinstance(v, list) else v for k, v in seen.items()}
    base, seeds = ["memory_mode", "attention_mode"], ["segment_seeds"]   # the per-segment seeds always show
    assert seen["auto"] == base + seeds, seen
    assert seen["low_vram"] == base + list(MANUAL_FIELDS) + seeds, seen
    assert seen["scheduled_sol"] == base + list(SOL_INPUTS) + seeds, seen
    assert seen["sol+ultra"] == base + list(SOL_INPUTS) + list(MANUAL_FIELDS) + seeds, seen
    assert seen["show_advanced"] == base + list(SOL_INPUTS) + list(MANUAL_FIELDS) + seeds, seen
    assert seen["hide_advanced"] == base + seeds, seen
    assert seen["reloaded_low_vram"] == base + list(MANUAL_FIELDS) + seeds, seen
    # hiding never changes what is saved or sent: every control keeps its value in the workflow and the prompt
    assert seen["serialized"] == ["auto", "auto", 1.3, 0.8, "cosine", 16384, 0.2, "exact_kv"] + [-1] * 10 + ["", ""]
    assert seen["prompt_inputs"] == base + list(SOL_INPUTS) + list(MANUAL_FIELDS) + seeds
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
    # Setup's segment table, with each segment's seed and "sampled" / "reused" from the Sampler's run of its job
    assert "pass\tstart\tduration\trun\tseed" in setup and " | " not in setup, setup
    assert "\tsampled\t" in setup and "prompt" not in setup, setup
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
