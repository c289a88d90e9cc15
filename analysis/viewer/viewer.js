// The results viewer (python -m analysis.view): opens from disk, no server. data/cells.js lists the
// cells; each cell's examples are in data/<name>.js, loaded by a <script> tag when the cell is picked
// (browsers block fetch() of file://). State lives in the URL hash: #cell=<name>&ex=<example id>.
"use strict";

const $ = (id) => document.getElementById(id);
const PAGE = 50;
let index = null, cell = null, rows = [], page = 0, loading = null;
const waiting = {};

function showMessage(text) { $("message").textContent = text || ""; }
function el(tag, text, cls) { const e = document.createElement(tag); if (text !== undefined) e.textContent = text; if (cls) e.className = cls; return e; }
function cellTd(row, value, cls) { const td = el("td", value === null || value === undefined ? "—" : String(value), cls); row.appendChild(td); return td; }
function num(v, digits) { return v === null || v === undefined ? "—" : Number(v).toFixed(digits); }

window.streamgenViewerCells = (payload) => { index = payload; };
window.streamgenViewerCell = (payload) => {
  const done = waiting[payload.name]; delete waiting[payload.name];
  if (done) done(payload);
};

function loadCell(name) {
  return new Promise((resolve, reject) => {
    waiting[name] = resolve;
    document.querySelectorAll("script[data-cell]").forEach((s) => s.remove());  // one cell in memory
    const s = document.createElement("script");
    s.src = `data/${name}.js`; s.dataset.cell = name;
    s.onerror = () => { delete waiting[name]; reject(new Error(`cannot read data/${name}.js next to index.html`)); };
    document.head.appendChild(s);
  });
}

function readHash() {
  const out = {};
  for (const part of location.hash.replace(/^#/, "").split("&")) {
    const i = part.indexOf("=");
    if (i > 0) out[part.slice(0, i)] = decodeURIComponent(part.slice(i + 1));
  }
  return out;
}

function writeHash(ex) {
  const h = `#cell=${encodeURIComponent(cell.name)}` + (ex ? `&ex=${encodeURIComponent(ex)}` : "");
  if (location.hash !== h) history.replaceState(null, "", h);
}

const FILTERS = {
  all: (e) => e.kept === "all", none: (e) => e.kept === "none", part: (e) => e.kept === "part",
  changed: (e) => e.answer_changed === true, error: (e) => e.error_type !== null,
  excluded: (e) => e.error_type === null && e.excluded_reason !== null,
};
const LAST = (v) => (v === null || v === undefined ? -Infinity : v);
const SORTS = {
  slowest: (a, b) => LAST(b.residual_wall_s) - LAST(a.residual_wall_s),
  forwards: (a, b) => LAST(b.residual_forwards) - LAST(a.residual_forwards),
  speedup: (a, b) => (a.s_fwd ?? Number.MAX_VALUE) - (b.s_fwd ?? Number.MAX_VALUE),
};

function status(e) {
  if (e.error_type) return `error: ${e.error_type}`;
  if (e.excluded_reason) return `excluded: ${e.excluded_reason}`;
  return e.answer_changed ? "stream ≠ base" : "stream = base";
}

function applyFilter() {
  const f = FILTERS[$("filter").value], s = SORTS[$("sort").value];
  rows = cell.examples.filter((e) => !f || f(e));
  if (s) rows = rows.slice().sort(s);
  page = 0; renderList();
}

function renderList() {
  const pages = Math.max(1, Math.ceil(rows.length / PAGE));
  page = Math.min(Math.max(0, page), pages - 1);
  $("page").textContent = ` page ${page + 1} of ${pages} `;
  $("shown").textContent = `(${rows.length} of ${cell.examples.length})`;
  $("examples").dataset.count = rows.length;
  const body = $("examples").tBodies[0]; body.textContent = "";
  for (const e of rows.slice(page * PAGE, (page + 1) * PAGE)) {
    const r = body.insertRow(); r.dataset.example = e.example_id;
    cellTd(r, e.example_id, "text"); cellTd(r, e.n_segments); cellTd(r, e.kept, "text");
    cellTd(r, e.base_forwards); cellTd(r, e.residual_forwards); cellTd(r, num(e.s_fwd, 2));
    cellTd(r, num(e.residual_wall_s, 3)); cellTd(r, status(e), "text");
    r.addEventListener("click", () => showExample(e));
  }
}

function renderCell(meta) {
  const c = meta.counts;
  $("cell-counts").textContent = `${c.n} examples · kept whole ${c.all} · nothing ${c.none} · part ${c.part}` +
    ` · no draft ${c.no_draft} · stream ≠ base ${c.changed} · errors ${c.error} · excluded ${c.excluded}`;
  const body = $("settings").tBodies[0]; body.textContent = "";
  const settings = { family: meta.family, cell_fingerprint: meta.cell_fingerprint, ...(meta.settings || {}) };
  for (const [k, v] of Object.entries(settings)) {
    const r = body.insertRow(); cellTd(r, k, "text");
    cellTd(r, typeof v === "string" ? v : JSON.stringify(v), "text");
  }
}

async function pickCell(name, ex) {
  const meta = index.cells.find((c) => c.name === name) || index.cells[0];
  $("cell").value = meta.name;
  loading = meta.name;
  const data = await loadCell(meta.name);
  if (loading !== meta.name) return;  // a later pick won
  cell = { ...meta, examples: data.examples };
  document.body.dataset.cell = meta.name;
  renderCell(meta); applyFilter();
  const found = ex && cell.examples.find((e) => e.example_id === ex);
  if (found) showExample(found); else { $("example").hidden = true; writeHash(null); }
}

function showExample(e) {
  writeHash(e.example_id);
  document.body.dataset.example = e.example_id;
  for (const r of $("examples").tBodies[0].rows) r.classList.toggle("current", r.dataset.example === e.example_id);
  $("example").hidden = false;
  $("example-title").textContent = `${e.example_id} — ${e.n_segments} segment(s), ${status(e)}`;
  $("costs").textContent = e.base_forwards === null ? "no costs (the example did not run)" :
    `base ${e.base_forwards} forwards, ${num(e.base_wall_s, 3)} s · residual ${e.residual_forwards} forwards ` +
    `(floor ${e.min_residual_forwards}), ${num(e.residual_wall_s, 3)} s · speculative ${e.speculative_forwards}` +
    ` forwards · speedup ${num(e.s_fwd, 2)}× forwards, ${num(e.s_wall, 2)}× wall · final step kept ` +
    `${e.accepted_tokens_final} of ${e.draft_tokens_final} draft tokens`;
  $("error").textContent = e.error_traceback || "";
  renderSteps(e.steps.map((s) => Object.fromEntries(index.step_columns.map((c, i) => [c, s[i]]))));
  renderAnswers(e);
}

function renderSteps(steps) {
  const req = $("request"); req.textContent = "";
  if (!steps.length) req.textContent = "no steps recorded (the example did not run)";
  else if (steps.every((s) => s.arrived_text === null)) req.textContent = "request text not recorded (rows written before the viewer's columns)";
  for (const s of steps) {
    if (s.arrived_text === null) continue;
    if (s.chars_deleted) {  // corrections: this step rewrote earlier text (docs/typists.md, "Corrections")
      const mark = el("span", `⌫${s.chars_deleted}`, "edit");
      mark.title = `step ${s.step} deleted ${s.chars_deleted} characters from character ${s.first_change_char}, then sent what follows`;
      req.appendChild(mark);
    }
    const span = el("span", s.arrived_text, "seg"); span.dataset.step = s.step;
    span.appendChild(el("sup", ` ${s.step}`)); req.appendChild(span);
  }
  const body = $("steps").tBodies[0]; body.textContent = "";
  const drafts = $("drafts"); drafts.textContent = "";
  for (const s of steps) {
    const r = body.insertRow();
    Object.assign(r.dataset, { step: s.step, draftIn: s.draft_tokens_in, accepted: s.accepted_tokens, forwards: s.forwards });
    [s.step + (s.is_final ? " final" : ""), s.prefix_chars, s.draft_tokens_in, s.accepted_tokens,
     s.draft_tokens_in - s.accepted_tokens, s.generated_tokens, s.forwards, s.tokens_fed, num(s.wall_s, 3),
     num(s.verify_median_prob, 3)].forEach((v) => cellTd(r, v));
    const box = el("div"); box.dataset.step = s.step;
    box.appendChild(el("div", `step ${s.step}${s.is_final ? " (final)" : ""}: incoming draft ${s.draft_tokens_in} tokens, ` +
      `kept ${s.accepted_tokens}, thrown away ${s.draft_tokens_in - s.accepted_tokens}`, "draft-label"));
    const pre = el("pre", undefined, "draft");
    if (s.draft_kept_text === null) pre.textContent = s.draft_tokens_in ? "(draft text not recorded)" : "(no incoming draft)";
    else if (!s.draft_tokens_in) pre.textContent = "(no incoming draft: decoded from scratch)";
    else pre.append(el("span", s.draft_kept_text, "kept"), el("del", s.draft_thrown_text, "thrown"));
    box.appendChild(pre); drafts.appendChild(box);
  }
}

function renderAnswers(e) {
  const score = (side) => `${side}: ${e[side + "_answer_tokens"] ?? "—"} tokens · score ${e[side + "_score_status"] ?? "—"}` +
    ` · quality ${num(e[side + "_quality"], 3)}`;
  $("base-score").textContent = score("base"); $("stream-score").textContent = score("stream");
  $("base-answer").textContent = e.base_answer ?? ""; $("stream-answer").textContent = e.stream_answer ?? "";
  const diff = $("diff"); diff.textContent = "";
  if (e.base_answer === null || e.stream_answer === null) return;
  if (e.base_answer === e.stream_answer) { diff.textContent = "identical"; return; }
  for (const [op, text] of wordDiff(e.base_answer, e.stream_answer)) diff.appendChild(op === "=" ? document.createTextNode(text) : el(op === "-" ? "del" : "ins", text));
}

// Word-level diff: common prefix and suffix, then an LCS table over the middle (capped; past the cap
// the middle is shown as one deletion and one insertion).
function wordDiff(a, b) {
  const A = a.match(/\s+|[^\s]+/g) || [], B = b.match(/\s+|[^\s]+/g) || [];
  let p = 0; while (p < A.length && p < B.length && A[p] === B[p]) p++;
  let q = 0; while (q < A.length - p && q < B.length - p && A[A.length - 1 - q] === B[B.length - 1 - q]) q++;
  const x = A.slice(p, A.length - q), y = B.slice(p, B.length - q), out = [];
  const push = (op, t) => { if (!t) return; if (out.length && out[out.length - 1][0] === op) out[out.length - 1][1] += t; else out.push([op, t]); };
  push("=", A.slice(0, p).join(""));
  if (x.length * y.length > 4e6) { push("-", x.join("")); push("+", y.join("")); }
  else {
    const L = Array.from({ length: x.length + 1 }, () => new Uint32Array(y.length + 1));
    for (let i = x.length - 1; i >= 0; i--) for (let j = y.length - 1; j >= 0; j--)
      L[i][j] = x[i] === y[j] ? L[i + 1][j + 1] + 1 : Math.max(L[i + 1][j], L[i][j + 1]);
    let i = 0, j = 0;
    while (i < x.length && j < y.length) {
      if (x[i] === y[j]) { push("=", x[i]); i++; j++; }
      else if (L[i + 1][j] >= L[i][j + 1]) push("-", x[i++]); else push("+", y[j++]);
    }
    push("-", x.slice(i).join("")); push("+", y.slice(j).join(""));
  }
  push("=", A.slice(A.length - q).join(""));
  return out;
}

function start() {
  if (!index) { showMessage("data/cells.js is missing next to index.html: run python -m analysis.view RESULTS_DIR again"); return; }
  $("setup").textContent = `${index.results_dir} · ${index.cells.length} cell(s) · ` +
    `${index.cells.reduce((n, c) => n + c.counts.n, 0)} example(s)`;
  for (const c of index.cells) { const o = el("option", `${c.label} (${c.counts.n})`); o.value = c.name; $("cell").appendChild(o); }
  $("cell").addEventListener("change", () => pickCell($("cell").value).catch((e) => showMessage(e.message)));
  $("filter").addEventListener("change", applyFilter);
  $("sort").addEventListener("change", applyFilter);
  $("prev").addEventListener("click", () => { page--; renderList(); });
  $("next").addEventListener("click", () => { page++; renderList(); });
  if (!index.cells.length) { showMessage("no examples in this results directory"); return; }
  const h = readHash();
  pickCell(h.cell || index.cells[0].name, h.ex).catch((e) => showMessage(e.message));
}

window.addEventListener("DOMContentLoaded", start);
