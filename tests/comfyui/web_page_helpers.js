// Helpers installed in the page as window.longmediaTest, the browser tests' only way into the graph
// (tests/comfyui/test_web_extension.py evaluates this file in the page).
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
