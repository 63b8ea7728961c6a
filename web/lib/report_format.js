// The plan panel's text: one report dict (a run's plan and measurements, a segmented Sampler run, or Setup's
// job summary) -> rows, a table, warnings, notes and reasons, as plain strings (see longmedia/report/).

const GIB = 2 ** 30;

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
// Normal mode runs stock's block math but not stock's runtime: say what differs (as the plan's reasons do).
export function normalModeDifferences(plan) {
  const guard = plan.guards?.step_boundary_cleanup_mb;
  const parts = ["stock block math"];
  if (plan.prefetch === false) parts.push("block prefetch off (stock: on)");
  parts.push(guard ? `a step guard after each model call (cleans up below ${guard} MiB free)`
                   : "free memory read after each model call");
  return parts.join("; ");
}

function planRows(plan, run, measured, measuredDevice = run.measured_device_bytes) {
  const rows = [];
  const requested = plan.requested_memory_mode;
  const how = requested === "auto" ? "auto picked it" : requested ? "set by hand" : "";
  rows.push(["mode", `${plan.memory_mode ?? "?"}${how ? ` (${how})` : ""}`]);
  if (plan.memory_mode === "normal") rows.push(["vs stock", normalModeDifferences(plan)]);

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
    // like for like: torch's allocated bytes against the plan's torch bytes (no VBAR weights, no cast buffers);
    // the device in use against the whole plan plus what was in use when the plan read the device
    rows.push(["peak", `predicted ${gib(plan.predicted_peak_bytes)} of ${gib(plan.usable_bytes)} usable${fits}`]);
    const what = pred.weights_outside_torch ? "activations; weights in VBAR" : "activations + resident weights";
    rows.push(["torch peak", `predicted ${gib(pred.torch_bytes)} (${what}); measured ${seen(measured)}`]);
    const before = pred.in_use_at_plan_bytes ?? 0;
    rows.push(["device", `predicted ${gib(before + pred.device_bytes)} (${gib(before)} in use at planning + the ` +
                         `pass, weights included); measured ${seen(measuredDevice)}`]);
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

// The run's own warning (a latent with NaN or inf: report.output_warning), then the plan's warnings.
function warningsOf(run) {
  return [...(run.output_warning ? [String(run.output_warning)] : []), ...(run.plan?.warnings ?? []).map(String)];
}

// What the run did beside the plan: guard clean-ups and the stage's notes (resize, audio kept ...).
function notesOf(run) {
  return [...(run.guard_events ?? []), ...(run.notes ?? [])].map(String);
}

function isReused(segment) {
  return segment?.source === "reused";
}

// A segmented Sampler run (kind "segmented_run"): entry.segment_plan is the segment plan, each entry.segments[i].run
// a run report (kind "run"). The rows
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
  const p = entry.segment_plan ?? {};
  const length = typeof p.seconds === "number" ? `, ${p.seconds.toFixed(1)} s in all` : "";
  rows.push(["segments", `${plural(segs.length, "pass")}${length}`]);
  // the mode column only when passes differ (the rows above name it); "run" (sampled / reused) with a retake cache
  const modes = new Set(segs.map((s) => s.run?.plan?.memory_mode ?? ""));
  const columns = [["pass", (s) => `#${s.index}`], ["frames", (s) => String(s.pass_frames)],
                   ["context", (s) => String(s.context_frames)], ["rows", (s) => String(rowsOf(s) || "?")],
                   ...(modes.size > 1 ? [["mode", (s) => s.run?.plan?.memory_mode ?? ""]] : []),
                   ["s/step", (s) => (typeof s.seconds_per_step === "number" && !isReused(s)
                     ? s.seconds_per_step.toFixed(2) : "")],
                   ["peak", (s) => (s.peak_bytes > 0 ? gib(s.peak_bytes) : "n/a")],
                   ...(entry.retakes ? [["run", (s) => s.source ?? "sampled"]] : [])];
  const table = {
    head: columns.map(([name]) => name),
    rows: segs.map((s) => columns.map(([, cell]) => cell(s))),
    titles: segs.map((s) => [`seed: ${s.seed}`, `run: ${s.source ?? "sampled"}`,
                             ...(entry.prompts ? [`prompt: ${entry.prompts[s.index] ?? ""}`] : [])].join("\n")),
  };
  const tail = [];
  if (segs.length > 1) tail.push(["drift", `s/step ${ratio(entry.step_time_ratio)}, peak ${ratio(entry.peak_ratio)}`]);
  if (entry.retakes?.line) tail.push(["retakes", String(entry.retakes.line).replace(/^retakes: /, "")]);
  const runs = segs.map((s) => s.run ?? {});
  const warnings = [...new Set(runs.flatMap(warningsOf))];
  const notes = [...new Set(runs.flatMap(notesOf)), ...(entry.notes ?? []).map(String)];
  return { rows, table, tail, warnings, notes, reasons: (run.plan?.reasons ?? []).map(String) };
}

// Setup's summary: text lines, with its segment table ("a | b | c" lines, the first one the header) as a table
// of the columns a reader needs: where each segment starts, how long it is, its prompt (frames, context and the
// latent and audio ranges go to each row's tooltip); after a Sampler run, its seed and "sampled" / "reused".
const SETUP_COLUMNS = { "seg": "pass", "start": "start", "duration": "duration", "prompt": "prompt" };
const PANEL_PROMPT_CHARS = 28;

function shortened(text) {
  return text.length > PANEL_PROMPT_CHARS ? `${text.slice(0, PANEL_PROMPT_CHARS - 1)}\u2026` : text;
}

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
    rows.push(keep.map((i) => (head[i] === "prompt" ? shortened(cells[i] ?? "") : cells[i] ?? "")));
    titles.push(head.map((h, i) => `${h}: ${cells[i] ?? ""}`).join("\n"));
  }
  if (!head) return { lines: text };
  const table = { head: head.filter((h) => h in SETUP_COLUMNS).map((h) => SETUP_COLUMNS[h]), rows, titles };
  return { lines: text, table };
}

// Setup's segment table after a Sampler run: each segment's seed and whether it was sampled or reused.
// ("run" and "seed" go before the prompt, which is the widest column and the one a narrow panel may cut.)
function withRuns(table, runs) {
  const byIndex = new Map(runs.map((r) => [String(r.index), r]));
  const at = table.head.includes("prompt") ? table.head.indexOf("prompt") : table.head.length;
  table.head.splice(at, 0, "run", "seed");
  table.rows.forEach((cells, i) => {
    const run = byIndex.get(String(cells[0]));
    cells.splice(at, 0, run ? run.source ?? "sampled" : "", run ? String(run.seed) : "");
    if (run && table.titles) table.titles[i] += `\nseed: ${run.seed}\nrun: ${run.source ?? "sampled"}`;
  });
}

/** A segmented Sampler report's per-segment runs, for the Setup whose job it ran (its segment table). */
export function segmentRuns(entry) {
  if (entry?.kind !== "segmented_run" || !Array.isArray(entry.segments)) return undefined;
  return entry.segments.map((s) => ({ index: s.index, seed: s.seed, source: s.source ?? "sampled" }));
}

/** One report dict -> { rows: [[label, text]], warnings, notes, reasons, lines } (plain strings only). Its `kind`
 * says what it is: "segmented_run" (a segmented Sampler run), "run" (one pass: its `plan` is the ExecutionPlan),
 * anything else a summary of text lines. */
export function formatReport(entry) {
  if (entry?.kind === "segmented_run" && Array.isArray(entry.segments) && entry.segments.length) {
    return formatSegmented(entry);
  }
  const plan = entry?.plan;
  if (entry?.kind !== "run" || !plan || typeof plan !== "object") {
    const { lines, table } = splitSummary((entry?.summary ?? []).map(String));
    if (table && Array.isArray(entry?.segment_runs)) withRuns(table, entry.segment_runs);
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
  return { rows, warnings: warningsOf(entry), notes: notesOf(entry),
           reasons: (plan.reasons ?? []).map(String) };
}
