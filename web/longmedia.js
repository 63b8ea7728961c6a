// LongMedia frontend extension: the resolved plan on Sampler / Hi-Res / Refiner nodes after a run, and
// the advanced memory controls shown only when they matter.
//
// Any node whose class name starts with "LongMedia" is handled:
// - an executed output carrying `longmedia_report` (a list of report dicts, see longmedia/run_report.py)
//   is drawn as a compact text panel under the node's widgets;
// - the ten manual VRAM controls (INT inputs whose default and minimum are -1 = auto) stay hidden until
//   memory_mode is not auto, and the Sol schedule inputs (sol_*) until attention_mode is sol or
//   scheduled_sol; the node's own "Show Advanced" toggle shows them all; a manual control at -1 reads "auto";
// - Setup shows only the sockets its family uses (frames for fl2va, reference slots for ref2va: the connected
//   ones and one free slot of each kind), and hides the prompt box while `positive` is connected;
// - a node loaded taller than its content shrinks to it; the plan panel follows its open "why" list, is
//   left out of the properties panel, and is marked stale when the node's inputs change after the run.
// Only our node types' prototypes and widgets are touched; nothing global is patched.

import { app } from "../../scripts/app.js";

const EXTENSION_NAME = "LongMedia.Nodes";
const NODE_PREFIX = "LongMedia";
const REPORT_KEY = "longmedia_report";
const JOB_KEY = "longmedia_job";
const REPORT_WIDGET = "longmedia_report_view";
const SOL_MODES = new Set(["sol", "scheduled_sol"]);
const GIB = 2 ** 30;
const MAX_REASONS = 24;
const REPORT_WIDTH = 420;     // px: wide enough for the peak line at 11 px monospace
const CHAR_PX = 6.7;          // width of one 11 px monospace character
const LINE_PX = 15;           // 11 px font at line-height 1.35
const MAX_PANEL_PX = 720;     // longer reports scroll
const PANEL_MARGIN_PX = 10;   // the frontend's margin around a DOM widget
const SLACK_PX = 8;           // a loaded node taller than its content by more than this shrinks
const STALE_CLASS = "longmedia-stale";
// Setup's sockets by family: frame inputs for fl2va, reference slots for ref2va (kind -> [prefixes of one slot]).
const FRAME_INPUTS = ["first_frame", "last_frame"];
const REFERENCE_KINDS = { picture: ["ref_image_"], video: ["ref_video_", "ref_video_audio_"], audio: ["ref_audio_"] };

/** Names of the manual VRAM controls and of the Sol schedule inputs in a V1 node definition. */
export function classifyInputs(nodeData) {
  const inputs = { ...(nodeData?.input?.required ?? {}), ...(nodeData?.input?.optional ?? {}) };
  const manual = [];
  const sol = [];
  for (const [name, spec] of Object.entries(inputs)) {
    const [type, opts] = Array.isArray(spec) ? spec : [spec, {}];
    if (type === "INT" && opts?.default === -1 && opts?.min === -1) manual.push(name);
    else if (name.startsWith("sol_")) sol.push(name);
  }
  return { manual, sol };
}

function widgetByName(node, name) {
  return node.widgets?.find((w) => w.name === name);
}

// The link into input slot `index`, or null. node.getInputLink reads it on every frontend: 1.53 keeps links in
// a topology store keyed by (node, slot index), where input.link is a deprecated view of that store.
function inputLinkAt(node, index) {
  return node.graph && typeof node.getInputLink === "function" ? node.getInputLink(index) ?? null : null;
}

function linkedNames(node) {
  return (node.inputs ?? []).filter((_, index) => inputLinkAt(node, index)).map((slot) => slot.name);
}

function isLinked(node, name) {
  return node.inputs?.some((slot, index) => slot.widget?.name === name && inputLinkAt(node, index)) ?? false;
}

/** Which control groups the node's current modes make relevant (a linked mode input counts as relevant). */
export function relevantGroups(node) {
  const memory = widgetByName(node, "memory_mode");
  const attention = widgetByName(node, "attention_mode");
  return {
    manual: !!memory && (isLinked(node, "memory_mode") || memory.value !== "auto"),
    sol: !!attention && (isLinked(node, "attention_mode") || SOL_MODES.has(attention.value)),
  };
}

function alwaysShowAdvanced() {
  try {
    return !!app.extensionManager?.setting?.get?.("Comfy.Node.AlwaysShowAdvancedWidgets");
  } catch (error) {
    // Settings not ready yet (node created while the app boots): the node's own toggle still applies.
    if (error instanceof TypeError || error instanceof ReferenceError) return false;
    throw error;
  }
}

// The classic canvas reads widget.hidden / widget.advanced, Nodes 2.0 reads widget.options.hidden / .advanced.
// A relevant control is neither; an irrelevant one is advanced (so the node offers its "Show Advanced"
// toggle, which the classic canvas only offers when a widget has widget.advanced) and hidden unless shown.
function setState(widget, hidden, advanced) {
  widget.hidden = hidden;
  widget.advanced = advanced;
  widget.options = widget.options ?? {};
  widget.options.hidden = hidden;
  widget.options.advanced = advanced;
}

/** Hides a group's widgets unless its mode makes them relevant or the node's "Show Advanced" toggle is on. */
export function applyVisibility(node, groups) {
  if (!node.widgets) return;
  const relevant = relevantGroups(node);
  const showAll = !!node.showAdvanced || alwaysShowAdvanced();
  let changed = false;
  for (const key of ["manual", "sol"]) {
    const advanced = !relevant[key];
    const hidden = advanced && !showAll;
    for (const name of groups[key]) {
      const widget = widgetByName(node, name);
      if (widget && (!!widget.hidden !== hidden || !!widget.advanced !== advanced)) {
        setState(widget, hidden, advanced);
        changed = true;
      }
    }
  }
  if (changed) fitHeight(node);
}

function fitHeight(node) {
  if (globalThis.LiteGraph?.vueNodesMode) return;  // Nodes 2.0 sizes nodes from the DOM
  const wanted = node.computeSize?.();
  if (!wanted || !node.size) return;
  node.setSize([Math.max(node.size[0], wanted[0]), wanted[1]]);
  node.setDirtyCanvas?.(true, true);
}

/** A node (loaded from a workflow) taller than its content shrinks to it; a shorter one is left alone. */
export function shrinkToContent(node) {
  if (globalThis.LiteGraph?.vueNodesMode) return;
  const wanted = node.computeSize?.();
  if (wanted && node.size && node.size[1] > wanted[1] + SLACK_PX) fitHeight(node);
}

// The manual controls keep -1 as their value (workflows and API prompts use it); the canvas shows "auto".
function showAuto(node, names) {
  for (const name of names) {
    const widget = widgetByName(node, name);
    if (!widget || Object.getOwnPropertyDescriptor(widget, "_displayValue")) continue;
    const proto = Object.getPrototypeOf(widget);
    const own = Object.getOwnPropertyDescriptor(proto, "_displayValue") ??
      Object.getOwnPropertyDescriptor(Object.getPrototypeOf(proto) ?? {}, "_displayValue");
    if (!own?.get) continue;   // not a canvas number widget of this frontend
    Object.defineProperty(widget, "_displayValue", {
      configurable: true,
      get() { return this.value === -1 && !this.computedDisabled ? "auto" : own.get.call(this); },
    });
  }
}

// The descriptor of `key` on `obj` or up its prototype chain (newer frontends, 1.53, keep showAdvanced as
// a class accessor over the node's tracked state: the Nodes 2.0 view reads that state, not a field).
function propertyDescriptor(obj, key) {
  for (let o = obj; o; o = Object.getPrototypeOf(o)) {
    const d = Object.getOwnPropertyDescriptor(o, key);
    if (d) return d;
  }
  return undefined;
}

// The node's own "Show Advanced" toggle (context menu on the canvas, footer button in Nodes 2.0) sets
// node.showAdvanced; re-apply visibility after it, keeping the frontend's own accessor in the chain.
function watchShowAdvanced(node, groups) {
  const own = propertyDescriptor(node, "showAdvanced");
  if (own && Object.hasOwn(node, "showAdvanced") && !own.configurable) return;
  let stored = node.showAdvanced;
  const get = own?.get ? () => own.get.call(node) : () => stored;
  const set = own?.set ? (v) => own.set.call(node, v) : (v) => { stored = v; };
  Object.defineProperty(node, "showAdvanced", {
    configurable: true,
    enumerable: own?.enumerable ?? true,
    get,
    set(value) {
      set(value);
      applyVisibility(node, groups);
    },
  });
}

// Every control's callback: the mode controls re-apply visibility, Setup's family its sockets, and any change
// after a run marks the plan panel stale.
function watchWidgets(node, groups) {
  for (const widget of node.widgets ?? []) {
    if (widget.name === REPORT_WIDGET || widget.longmediaWatched) continue;
    const callback = widget.callback;
    widget.callback = function (...args) {
      const result = callback?.apply(this, args);
      if (widget.name === "memory_mode" || widget.name === "attention_mode") applyVisibility(node, groups);
      if (widget.name === "family") applySetupSockets(node);
      if (node.longmediaReport) markStale(node);
      return result;
    };
    widget.longmediaWatched = true;
  }
}

/** The Setup sockets `family` uses: frame inputs, or the reference slots up to one past the last connected. */
export function setupSockets(family, linkedNames, slotCounts) {
  const wanted = new Set();
  if (family === "fl2va") FRAME_INPUTS.forEach((n) => wanted.add(n));
  if (family === "ref2va") {
    for (const [kind, prefixes] of Object.entries(REFERENCE_KINDS)) {
      let last = 0;
      for (const name of linkedNames) {
        const prefix = prefixes.find((p) => name.startsWith(p) && /^\d+$/.test(name.slice(p.length)));
        if (prefix) last = Math.max(last, Number(name.slice(prefix.length)));
      }
      const shown = Math.min(slotCounts[kind] ?? 0, last + 1);
      for (let i = 1; i <= shown; i++) prefixes.forEach((p) => wanted.add(`${p}${i}`));
    }
  }
  return wanted;
}

// Setup's frame and reference sockets, in schema order, with their types: name -> type.
function managedSockets(nodeData) {
  const optional = nodeData?.input?.optional ?? {};
  const order = nodeData?.input_order?.optional ?? Object.keys(optional);
  const prefixes = Object.values(REFERENCE_KINDS).flat();
  const out = new Map();
  for (const name of order) {
    const isRef = prefixes.some((p) => name.startsWith(p) && /^\d+$/.test(name.slice(p.length)));
    if (FRAME_INPUTS.includes(name) || isRef) out.set(name, optional[name][0]);
  }
  return out;
}

function slotCounts(managed) {
  const counts = {};
  for (const [kind, prefixes] of Object.entries(REFERENCE_KINDS)) {
    counts[kind] = [...managed.keys()].filter((n) => n.startsWith(prefixes[0]) &&
      /^\d+$/.test(n.slice(prefixes[0].length))).length;
  }
  return counts;
}

// Puts `slots` (node.inputs' slot objects in a new order, unlinked ones dropped or added) in place of node.inputs
// and moves every link to its slot's new index. Setting link.target_slot is what moves a link on every frontend
// (1.53 re-keys its topology store; older ones read the index from it). Links keep their relative order, so
// moving those that go down lowest first, then those that go up highest first, never lands one on an occupied slot.
function relayoutInputs(node, slots) {
  const moves = [];
  node.inputs.forEach((slot, from) => {
    const link = inputLinkAt(node, from);
    if (!link) return;
    const to = slots.indexOf(slot);
    if (to === -1) throw new Error(`LongMedia: input ${slot.name} of node ${node.id} is connected and must stay`);
    if (to !== from) moves.push({ link, from, to });
  });
  node.inputs.splice(0, node.inputs.length, ...slots);
  const down = moves.filter((m) => m.to < m.from).sort((a, b) => a.from - b.from);
  const up = moves.filter((m) => m.to > m.from).sort((a, b) => b.from - a.from);
  for (const { link, to } of [...down, ...up]) link.target_slot = to;
}

/** Setup: add and remove its frame/reference sockets to match the family (a connected socket always stays).
 *  `savedLinked`: the input names a workflow being loaded connects. While a graph configures, a newer frontend
 *  (1.53) holds each link at the slot index the file saved and moves it to its input by name only after every
 *  node is configured: until then the file, not the slots, says which sockets are connected. */
export function applySetupSockets(node, savedLinked = []) {
  const managed = managedSockets(node.constructor?.nodeData);
  if (!managed.size || !node.inputs) return;
  const family = widgetByName(node, "family")?.value;
  const linked = [...new Set([...linkedNames(node), ...savedLinked])];
  const wanted = setupSockets(family, linked, slotCounts(managed));
  linked.filter((n) => managed.has(n)).forEach((n) => wanted.add(n));
  const present = new Set(node.inputs.filter((s) => managed.has(s.name)).map((s) => s.name));
  const same = present.size === wanted.size && [...wanted].every((n) => present.has(n));
  if (!same) {
    const hollow = globalThis.LiteGraph?.SlotShape?.HollowCircle ?? 7;
    // new sockets through the frontend's own addInput (its slot class, its hooks), then all put in schema order
    for (const name of [...managed.keys()].filter((n) => wanted.has(n) && !present.has(n))) {
      node.addInput(name, managed.get(name), { localized_name: name, label: name, shape: hollow });
    }
    const byName = new Map(node.inputs.filter((s) => managed.has(s.name)).map((s) => [s.name, s]));
    const keep = node.inputs.filter((s) => !managed.has(s.name));
    relayoutInputs(node, [...keep, ...[...managed.keys()].filter((n) => wanted.has(n)).map((n) => byName.get(n))]);
  }
  // the prompt box is not used while positive conditioning is connected
  const prompt = widgetByName(node, "prompt");
  const positive = linked.includes("positive");
  const promptChanged = !!prompt && !!prompt.hidden !== positive;
  if (promptChanged) setState(prompt, positive, false);
  if (!same || promptChanged) fitHeight(node);
}

function gib(bytes) {
  return typeof bytes === "number" && Number.isFinite(bytes) ? `${(bytes / GIB).toFixed(2)} GiB` : "n/a";
}

function plural(count, word) {
  return `${count} ${word}${count === 1 ? "" : word.endsWith("s") ? "es" : "s"}`;
}

function ratio(value) {
  return typeof value === "number" && Number.isFinite(value) ? `x${value.toFixed(3)}` : "n/a";
}

// Rows of one run's plan (an ExecutionPlan dict) and what the run measured.
function planRows(plan, run, measured, measuredDevice = run.measured_device_bytes) {
  const rows = [];
  const requested = plan.requested_memory_mode;
  const how = requested === "auto" ? "auto picked it" : requested ? "set by hand" : "";
  rows.push(["mode", `${plan.memory_mode ?? "?"}${how ? ` (${how})` : ""}`]);

  const att = plan.attention ?? {};
  const backend = run.attention_backend || att.backend || "?";
  const requestedAtt = att.mode && att.mode !== backend ? `requested ${att.mode}` : "";
  const notes = [att.exact === false ? "approximate" : att.exact ? "exact" : "",
                 att.query_chunk_tokens ? `${att.query_chunk_tokens}-row query chunks` : "",
                 att.mode === "auto" ? "auto picked it" : requestedAtt];
  const attNotes = notes.filter(Boolean).join(", ");
  rows.push(["attention", attNotes ? `${backend} (${attNotes})` : backend]);

  const fits = plan.fits === false ? " (does NOT fit)" : "";
  const seen = (bytes) => (bytes > 0 ? gib(bytes) : "n/a (no CUDA)");
  const pred = run.predicted;
  if (pred && typeof pred === "object") {
    // like for like: torch's allocator against the plan without VBAR weights; the device against the whole plan
    rows.push(["peak", `predicted ${gib(plan.predicted_peak_bytes)} of ${gib(plan.usable_bytes)} usable${fits}`]);
    const what = pred.weights_outside_torch ? "activations; weights in VBAR" : "activations + resident weights";
    rows.push(["torch peak", `predicted ${gib(pred.torch_bytes)} (${what}); measured ${seen(measured)}`]);
    rows.push(["device", `predicted ${gib(pred.device_bytes)} (weights included); measured ${seen(measuredDevice)}`]);
  } else {
    rows.push(["peak", `predicted ${gib(plan.predicted_peak_bytes)} of ${gib(plan.usable_bytes)} usable${fits}; ` +
                       `measured ${seen(measured)}`]);
  }

  const blocks = plan.model?.dims?.num_blocks;
  const streamed = Array.isArray(run.streamed_blocks) ? run.streamed_blocks.length : 0;
  rows.push(["blocks", blocks ? `${streamed} of ${blocks} streamed` : `${streamed} streamed`]);
  const g = plan.geometry ?? {};
  if (g.seq_len) rows.push(["sequence", `${g.seq_len} packed rows`]);
  return rows;
}

// What the run did beside the plan: guard clean-ups and the stage's notes (resize, audio kept ...).
function notesOf(run) {
  return [...(run.guard_events ?? []), ...(run.notes ?? [])].map(String);
}

// A segmented Sampler run: entry.plan is the segment plan, each entry.segments[i].run a run report. The rows
// describe the largest pass (the most packed rows: the one that sets the memory), labelled; a table lists all.
function formatSegmented(entry) {
  const segs = entry.segments;
  const rowsOf = (s) => s.run?.plan?.geometry?.seq_len ?? 0;
  const largest = segs.reduce((best, s) => (rowsOf(s) > rowsOf(best) ? s : best), segs[0]);
  const run = largest.run ?? {};
  const device = Math.max(0, ...segs.map((s) => s.run?.measured_device_bytes ?? 0));
  const rows = planRows(run.plan ?? {}, run, entry.measured_peak_bytes, device);
  const label = `largest pass, #${largest.index} of ${segs.length}`;
  for (const row of rows) if (row[0] === "sequence") row[1] += ` (${label})`;
  const p = entry.plan ?? {};
  const length = typeof p.seconds === "number" ? `, ${p.seconds.toFixed(1)} s in all` : "";
  rows.push(["segments", `${plural(segs.length, "pass")}${length}`]);
  const table = {
    head: ["pass", "frames", "context", "rows", "mode", "s/step", "peak"],
    rows: segs.map((s) => [`#${s.index}`, String(s.pass_frames), String(s.context_frames), String(rowsOf(s) || "?"),
                           s.run?.plan?.memory_mode ?? "", typeof s.seconds_per_step === "number"
                             ? s.seconds_per_step.toFixed(2) : "", s.peak_bytes > 0 ? gib(s.peak_bytes) : "n/a"]),
  };
  const tail = [];
  if (segs.length > 1) tail.push(["drift", `s/step ${ratio(entry.step_time_ratio)}, peak ${ratio(entry.peak_ratio)}`]);
  const runs = segs.map((s) => s.run ?? {});
  const warnings = [...new Set(runs.flatMap((r) => (r.plan?.warnings ?? []).map(String)))];
  const notes = [...new Set(runs.flatMap(notesOf)), ...(entry.notes ?? []).map(String)];
  return { rows, table, tail, warnings, notes, reasons: (run.plan?.reasons ?? []).map(String) };
}

// Setup's summary: text lines, with its segment table ("a | b | c" lines, the first one the header) as a table
// of the columns a reader needs (the latent and audio ranges go to each row's tooltip).
const SETUP_COLUMNS = { "seg": "pass", "pass frames": "frames", "context": "context",
                        "new frames -> result frames": "new -> result" };

export function splitSummary(lines) {
  const text = [];
  let head = null;
  const rows = [];
  const titles = [];
  for (const line of lines) {
    const cells = line.split(" | ").map((c) => c.trim());
    if (cells.length < 3) { text.push(line); continue; }
    if (!head) { head = cells; continue; }
    const keep = head.map((h, i) => (h in SETUP_COLUMNS ? i : -1)).filter((i) => i >= 0);
    rows.push(keep.map((i) => cells[i] ?? ""));
    titles.push(head.map((h, i) => `${h}: ${cells[i] ?? ""}`).join("\n"));
  }
  if (!head) return { lines: text };
  const table = { head: head.filter((h) => h in SETUP_COLUMNS).map((h) => SETUP_COLUMNS[h]), rows, titles };
  return { lines: text, table };
}

/** One report dict -> { rows: [[label, text]], warnings, notes, reasons, lines } (plain strings only). */
export function formatReport(entry) {
  if (Array.isArray(entry?.segments) && entry.segments.length && entry.segments[0]?.run) {
    return formatSegmented(entry);
  }
  const plan = entry?.plan;
  if (!plan || typeof plan !== "object") {
    const { lines, table } = splitSummary((entry?.summary ?? []).map(String));
    return { rows: [], warnings: [], notes: [], reasons: [], lines, table };
  }
  const rows = planRows(plan, entry, entry.measured_peak_bytes);
  const g = plan.geometry ?? {};
  if (typeof g.seconds === "number") rows.push(["length", `${g.seconds.toFixed(1)} s in one pass`]);
  const tip = plan.segment_suggestion;
  if (tip && typeof tip.seconds === "number" && tip.seconds > 0) {
    rows.push(["suggested", `segment_seconds ${tip.seconds}`]);
  }
  const manual = entry.manual_fields?.length ? entry.manual_fields : plan.manual_fields ?? [];
  if (manual.length) rows.push(["manual", manual.join(", ")]);
  return { rows, warnings: (plan.warnings ?? []).map(String), notes: notesOf(entry),
           reasons: (plan.reasons ?? []).map(String) };
}

function element(tag, text, style) {
  const el = document.createElement(tag);
  if (text !== undefined) el.textContent = text;
  if (style) el.style.cssText = style;
  return el;
}

function renderTable(table) {
  const el = element("table", undefined, "border-collapse:collapse;margin:3px 0;font:inherit");
  const head = element("tr");
  for (const h of table.head) head.append(element("th", h, "text-align:left;padding:0 8px 0 0;opacity:.65;font-weight:normal"));
  el.append(head);
  table.rows.forEach((cells, i) => {
    const tr = element("tr");
    if (table.titles?.[i]) tr.title = table.titles[i];
    for (const c of cells) tr.append(element("td", c, "padding:0 8px 0 0;white-space:nowrap"));
    el.append(tr);
  });
  return el;
}

function renderReport(container, entries) {
  container.replaceChildren();
  const banner = element("div", "stale: inputs changed since this run (queue again to update)",
                         "display:none;color:#e8b04b;font-weight:bold");
  banner.className = STALE_CLASS;
  container.append(banner);
  entries.forEach((entry, index) => {
    const { rows, table, tail = [], warnings = [], notes = [], reasons = [], lines = [] } = formatReport(entry);
    if (entries.length > 1) {
      container.append(element("div", `pass ${index + 1} of ${entries.length}`, "font-weight:bold;opacity:.8"));
    }
    for (const [label, text] of [...rows, ...(table ? [] : tail)]) {
      const line = element("div");
      line.append(element("span", `${label} `, "opacity:.65"), element("span", text));
      container.append(line);
    }
    for (const text of lines) container.append(element("div", text));
    if (table) container.append(renderTable(table));
    for (const [label, text] of table ? tail : []) {
      const line = element("div");
      line.append(element("span", `${label} `, "opacity:.65"), element("span", text));
      container.append(line);
    }
    for (const text of warnings) container.append(element("div", `! ${text}`, "color:#e8b04b"));
    for (const text of notes) container.append(element("div", `- ${text}`, "opacity:.8"));
    if (reasons.length) {
      const details = element("details");
      details.append(element("summary", `why (${reasons.length})`, "cursor:pointer;opacity:.8"));
      for (const text of reasons.slice(0, MAX_REASONS)) {
        details.append(element("div", `- ${text}`, "padding-left:.8em"));
      }
      if (reasons.length > MAX_REASONS) details.append(element("div", `... ${reasons.length - MAX_REASONS} more`));
      container.append(details);
    }
  });
  container.title = entries.flatMap((e) => e?.summary ?? []).join("\n");
}

// Panel height from its visible lines (an open "why" list counts its reasons), wrapped at the node's width.
function reportHeight(container, width) {
  const perLine = Math.max(20, Math.floor((width - 40) / CHAR_PX));
  const count = (text) => Math.max(1, Math.ceil(text.length / perLine));
  let lines = 0;
  for (const child of container.children) {
    if (child.classList?.contains(STALE_CLASS)) lines += child.style.display === "none" ? 0 : count(child.textContent);
    else if (child.tagName === "DETAILS") {
      lines += 1;
      if (child.open) for (const item of [...child.children].slice(1)) lines += count(item.textContent);
    } else if (child.tagName === "TABLE") lines += child.rows.length;
    else lines += count(child.textContent);
  }
  return Math.min(MAX_PANEL_PX, 2 * PANEL_MARGIN_PX + 12 + LINE_PX * lines);
}

// Sizes the panel to its content and the node to its widgets; `grow` keeps a node the user made larger.
function fitPanel(node, widget, grow = true) {
  widget.longmediaSetHeight(reportHeight(widget.element, Math.max(node.size?.[0] ?? 0, REPORT_WIDTH)));
  const wanted = node.computeSize?.();
  if (wanted && node.size) {
    const height = grow ? Math.max(node.size[1], wanted[1]) : wanted[1];
    node.setSize([Math.max(node.size[0], wanted[0], REPORT_WIDTH), height]);
  }
  node.setDirtyCanvas?.(true, true);
}

/** Marks the node's plan panel stale (inputs changed after the run) or fresh. */
export function markStale(node, stale = true) {
  const widget = widgetByName(node, REPORT_WIDGET);
  const banner = widget?.element?.querySelector?.(`.${STALE_CLASS}`);
  if (!banner || (banner.style.display !== "none") === stale) return;
  banner.style.display = stale ? "" : "none";
  widget.element.classList.toggle(STALE_CLASS, stale);
  widget.element.style.opacity = stale ? "0.6" : "";
  fitPanel(node, widget);
}

/** Draws (or redraws) the plan panel of `node` from a `longmedia_report` list. */
export function showReport(node, entries) {
  const list = (Array.isArray(entries) ? entries : [entries]).filter((e) => e && typeof e === "object");
  if (!list.length) return;
  let widget = widgetByName(node, REPORT_WIDGET);
  if (!widget) {
    const container = element("div", undefined,
      "font:11px/1.35 monospace;white-space:pre-wrap;overflow:auto;padding:4px 6px;box-sizing:border-box;" +
      "border-radius:6px;background:rgba(0,0,0,.25);color:var(--input-text,#ddd);user-select:text");
    container.className = "longmedia-report";
    let height = 4 * LINE_PX;
    // hideInPanel: the properties panel lists the node's inputs, not this read-only view
    widget = node.addDOMWidget(REPORT_WIDGET, "longmedia_report", container, {
      serialize: false, hideOnZoom: true, hideInPanel: true, getMinHeight: () => height,
      getMaxHeight: () => height,
    });
    widget.serialize = false;
    widget.options = widget.options ?? {};
    widget.options.hideInPanel = true;
    widget.longmediaSetHeight = (h) => { height = h; };
    // opening or closing "why" resizes the panel and the node (closing gives the space back)
    container.addEventListener("toggle", () => fitPanel(node, widget, false), true);
  }
  renderReport(widget.element, list);
  node.longmediaReport = list;
  fitPanel(node, widget);
}

// The plan report of Sampler / Hi-Res / Refiner, or Setup's job summary (its `text` beside `longmedia_job`).
function reportOf(output) {
  if (!output || typeof output !== "object") return undefined;
  if (output[REPORT_KEY]) return output[REPORT_KEY];
  if (output[JOB_KEY] && Array.isArray(output.text)) {
    return [{ summary: output.text.flatMap((t) => String(t).split("\n")) }];
  }
  return undefined;
}

app.registerExtension({
  name: EXTENSION_NAME,
  classifyInputs,
  formatReport,
  setupSockets,
  splitSummary,

  async beforeRegisterNodeDef(nodeType, nodeData) {
    if (typeof nodeData?.name !== "string" || !nodeData.name.startsWith(NODE_PREFIX)) return;
    const groups = classifyInputs(nodeData);
    const proto = nodeType.prototype;

    const onNodeCreated = proto.onNodeCreated;
    proto.onNodeCreated = function (...args) {
      const result = onNodeCreated?.apply(this, args);
      watchWidgets(this, groups);
      watchShowAdvanced(this, groups);
      applyVisibility(this, groups);
      showAuto(this, groups.manual);
      applySetupSockets(this);
      return result;
    };

    const onConfigure = proto.onConfigure;
    proto.onConfigure = function (info, ...rest) {
      const result = onConfigure?.apply(this, [info, ...rest]);
      applyVisibility(this, groups);
      applySetupSockets(this, (info?.inputs ?? []).filter((s) => s?.link != null).map((s) => s.name));
      shrinkToContent(this);
      return result;
    };

    const onConnectionsChange = proto.onConnectionsChange;
    proto.onConnectionsChange = function (...args) {
      const result = onConnectionsChange?.apply(this, args);
      applyVisibility(this, groups);
      if (!app.configuringGraph) {
        // after the connection settles: a new reference slot appears, an emptied one goes
        requestAnimationFrame(() => applySetupSockets(this));
        if (this.longmediaReport) markStale(this);
      }
      return result;
    };

    const onWidgetChanged = proto.onWidgetChanged;
    proto.onWidgetChanged = function (...args) {
      const result = onWidgetChanged?.apply(this, args);
      if (this.longmediaReport && args[0] !== REPORT_WIDGET) markStale(this);
      return result;
    };

    const onExecuted = proto.onExecuted;
    proto.onExecuted = function (output, ...rest) {
      const result = onExecuted?.apply(this, [output, ...rest]);
      const report = reportOf(output);
      if (report) showReport(this, report);
      return result;
    };
  },

  // After the whole graph is configured (links settled at their inputs): Setup's sockets from its real links.
  loadedGraphNode(node) {
    if (!String(node?.type).startsWith(NODE_PREFIX)) return;
    applySetupSockets(node);
    shrinkToContent(node);
  },

  // Outputs restored from the queue/history (not a live run) arrive here instead of onExecuted.
  onNodeOutputsUpdated(nodeOutputs) {
    const graph = app.rootGraph ?? app.graph;
    for (const [locator, output] of Object.entries(nodeOutputs ?? {})) {
      const report = reportOf(output);
      if (!report || locator.includes(":")) continue;
      const node = graph?.getNodeById?.(Number(locator)) ?? graph?.getNodeById?.(locator);
      if (node?.type?.startsWith(NODE_PREFIX)) showReport(node, report);
    }
  },
});
