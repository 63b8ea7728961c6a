// LongMedia frontend extension: the resolved plan on Sampler / Hi-Res / Refiner nodes after a run, and
// the advanced memory controls shown only when they matter.
//
// Any node whose class name starts with "LongMedia" is handled:
// - an executed output carrying `longmedia_report` (a list of report dicts, see longmedia/run_report.py)
//   is drawn as a compact text panel under the node's widgets;
// - the ten manual VRAM controls (INT inputs whose default and minimum are -1 = auto) stay hidden until
//   memory_mode is not auto, and the Sol schedule inputs (sol_*) until attention_mode is sol or
//   scheduled_sol; the node's own "Show Advanced" toggle shows them all.
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
const MAX_PANEL_PX = 320;     // longer reports scroll
const PANEL_MARGIN_PX = 10;   // the frontend's margin around a DOM widget

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

function isLinked(node, name) {
  return node.inputs?.some((slot) => slot.widget?.name === name && slot.link != null) ?? false;
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

function watchModes(node, groups) {
  for (const name of ["memory_mode", "attention_mode"]) {
    const widget = widgetByName(node, name);
    if (!widget || widget.longmediaWatched) continue;
    const callback = widget.callback;
    widget.callback = function (...args) {
      const result = callback?.apply(this, args);
      applyVisibility(node, groups);
      return result;
    };
    widget.longmediaWatched = true;
  }
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
function planRows(plan, run, measured) {
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
  rows.push(["peak", `predicted ${gib(plan.predicted_peak_bytes)} of ${gib(plan.usable_bytes)} usable${fits}; ` +
                     `measured ${measured > 0 ? gib(measured) : "n/a (no CUDA)"}`]);

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

// A segmented Sampler run: entry.plan is the segment plan, each entry.segments[i].run a run report.
function formatSegmented(entry) {
  const segs = entry.segments;
  const runs = segs.map((s) => s.run ?? {});
  const first = runs[0].plan ?? {};
  const rows = planRows(first, runs[0], entry.measured_peak_bytes);
  const p = entry.plan ?? {};
  const length = typeof p.seconds === "number" ? `, ${p.seconds.toFixed(1)} s in all` : "";
  rows.push(["segments", `${plural(segs.length, "pass")}${length}`]);
  for (const s of segs) {
    const sps = typeof s.seconds_per_step === "number" ? `${s.seconds_per_step.toFixed(2)} s/step` : "";
    const peak = s.peak_bytes > 0 ? `peak ${gib(s.peak_bytes)}` : "";
    const mode = s.run?.plan?.memory_mode ?? "";
    const parts = [`${s.pass_frames} frames (${s.context_frames} context)`, mode, sps, peak].filter(Boolean);
    rows.push([`  #${s.index}`, parts.join(", ")]);
  }
  if (segs.length > 1) rows.push(["drift", `s/step ${ratio(entry.step_time_ratio)}, peak ${ratio(entry.peak_ratio)}`]);
  const warnings = [...new Set(runs.flatMap((r) => (r.plan?.warnings ?? []).map(String)))];
  const notes = [...new Set(runs.flatMap(notesOf)), ...(entry.notes ?? []).map(String)];
  return { rows, warnings, notes, reasons: (first.reasons ?? []).map(String) };
}

/** One report dict -> { rows: [[label, text]], warnings, notes, reasons, lines } (plain strings only). */
export function formatReport(entry) {
  if (Array.isArray(entry?.segments) && entry.segments.length && entry.segments[0]?.run) {
    return formatSegmented(entry);
  }
  const plan = entry?.plan;
  if (!plan || typeof plan !== "object") {
    return { rows: [], warnings: [], notes: [], reasons: [], lines: (entry?.summary ?? []).map(String) };
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

function renderReport(container, entries) {
  container.replaceChildren();
  entries.forEach((entry, index) => {
    const { rows, warnings = [], notes = [], reasons = [], lines = [] } = formatReport(entry);
    if (entries.length > 1) {
      container.append(element("div", `pass ${index + 1} of ${entries.length}`, "font-weight:bold;opacity:.8"));
    }
    for (const [label, text] of rows) {
      const line = element("div");
      line.append(element("span", `${label} `, "opacity:.65"), element("span", text));
      container.append(line);
    }
    for (const text of lines) container.append(element("div", text));
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

// Panel height from its visible lines (the reasons sit folded in <details>), wrapped at the node's width.
function reportHeight(container, width) {
  const perLine = Math.max(20, Math.floor((width - 40) / CHAR_PX));
  let lines = 0;
  for (const child of container.children) {
    const text = child.tagName === "DETAILS" ? "why" : child.textContent;
    lines += Math.max(1, Math.ceil(text.length / perLine));
  }
  return Math.min(MAX_PANEL_PX, 2 * PANEL_MARGIN_PX + 12 + LINE_PX * lines);
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
    widget = node.addDOMWidget(REPORT_WIDGET, "longmedia_report", container, {
      serialize: false, hideOnZoom: true, getMinHeight: () => height, getMaxHeight: () => height,
    });
    widget.serialize = false;
    widget.longmediaSetHeight = (h) => { height = h; };
  }
  renderReport(widget.element, list);
  widget.longmediaSetHeight(reportHeight(widget.element, Math.max(node.size?.[0] ?? 0, REPORT_WIDTH)));
  node.longmediaReport = list;
  const wanted = node.computeSize?.();
  if (wanted) node.setSize([Math.max(node.size[0], wanted[0], REPORT_WIDTH), Math.max(node.size[1], wanted[1])]);
  node.setDirtyCanvas?.(true, true);
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

  async beforeRegisterNodeDef(nodeType, nodeData) {
    if (typeof nodeData?.name !== "string" || !nodeData.name.startsWith(NODE_PREFIX)) return;
    const groups = classifyInputs(nodeData);
    const proto = nodeType.prototype;

    const onNodeCreated = proto.onNodeCreated;
    proto.onNodeCreated = function (...args) {
      const result = onNodeCreated?.apply(this, args);
      watchModes(this, groups);
      watchShowAdvanced(this, groups);
      applyVisibility(this, groups);
      return result;
    };

    const onConfigure = proto.onConfigure;
    proto.onConfigure = function (...args) {
      const result = onConfigure?.apply(this, args);
      applyVisibility(this, groups);
      return result;
    };

    const onConnectionsChange = proto.onConnectionsChange;
    proto.onConnectionsChange = function (...args) {
      const result = onConnectionsChange?.apply(this, args);
      applyVisibility(this, groups);
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
