// The plan panel under Sampler / Hi-Res / Refiner (and Setup's job summary) after a run: a DOM widget sized
// to its content, following its open "why" list, left out of the properties panel, and marked stale when the
// node's inputs change after the run.

import { widgetByName } from "./nodes.js";
import { formatReport } from "./report_format.js";

export const REPORT_WIDGET = "longmedia_report_view";
const REPORT_KEY = "longmedia_report";
const JOB_KEY = "longmedia_job";
const MAX_REASONS = 24;
const REPORT_WIDTH = 420;     // px: wide enough for the peak line at 11 px monospace
const CHAR_PX = 6.7;          // width of one 11 px monospace character
const LINE_PX = 15;           // 11 px font at line-height 1.35
const MAX_PANEL_PX = 720;     // longer reports scroll
const PANEL_MARGIN_PX = 10;   // the frontend's margin around a DOM widget
const STALE_CLASS = "longmedia-stale";

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
export function reportOf(output) {
  if (!output || typeof output !== "object") return undefined;
  if (output[REPORT_KEY]) return output[REPORT_KEY];
  if (output[JOB_KEY] && Array.isArray(output.text)) {
    return [{ summary: output.text.flatMap((t) => String(t).split("\n")) }];
  }
  return undefined;
}
