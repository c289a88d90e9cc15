// The page: sends the request as it grows (at most one update in flight), shows the session's state
// as the server pushes it (server-sent events), and submits. No build step, no dependencies.
"use strict";

const $ = (id) => document.getElementById(id);
const MIN_GAP_MS = 80;  // at most ~12 updates a second, whatever the typing rate
let sid = null, events = null, inflight = false, sentText = null, lastSend = 0, retryTimer = null;
let submitted = false, opening = null;

function showMessage(text) { $("message").textContent = text || ""; }

async function api(path, body) {
  const res = await fetch(path, body === undefined ? { method: "POST" } :
    { method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify(body) });
  let data = {};
  try { data = await res.json(); } catch (e) { data = { error: `the server answered ${res.status}` }; }
  return { status: res.status, data };
}

async function openSession() {
  if (opening) return opening;
  opening = (async () => {
    if (events) events.close();
    const { status, data } = await api("/api/sessions");
    if (status !== 200) { showMessage(data.error); sid = null; return; }
    sid = data.id; sentText = null;
    document.body.dataset.session = sid;
    events = new EventSource(`/api/sessions/${sid}/events`);
    events.onmessage = (ev) => render(JSON.parse(ev.data));
  })();
  try { await opening; } finally { opening = null; }
}

function scheduleSend() {
  if (submitted || inflight || retryTimer) return;
  const wait = MIN_GAP_MS - (Date.now() - lastSend);
  if (wait > 0) { retryTimer = setTimeout(() => { retryTimer = null; scheduleSend(); }, wait); return; }
  sendText();
}

async function sendText() {
  const text = $("request").value;
  if (text === sentText || submitted) return;
  inflight = true; lastSend = Date.now();
  try {
    if (!sid) await openSession();
    if (!sid) return;
    const { status, data } = await api(`/api/sessions/${sid}/text`, { text });
    if (status === 200) { sentText = text; if (document.body.dataset.refused) { delete document.body.dataset.refused; showMessage(""); } }
    else if (status === 404) { sid = null; showMessage(data.error); }
    else { showMessage(data.error); document.body.dataset.refused = String(status); if (status === 429) sentText = null; }
  } catch (e) {
    showMessage(`cannot reach the server: ${e}`);
  } finally {
    inflight = false;
  }
  if ($("request").value !== sentText && !submitted) scheduleSend();
}

async function submit() {
  const text = $("request").value;
  while (inflight) await new Promise((r) => setTimeout(r, 20));
  if (!sid) await openSession();
  if (!sid) return;
  submitted = true;  // from now on no update may overtake the submit
  const { status, data } = await api(`/api/sessions/${sid}/submit`, { text });
  if (status !== 200) { submitted = false; showMessage(data.error); if (status === 404) sid = null; return; }
  $("request").readOnly = true; showMessage("");
}

function newRequest() {
  if (sid) navigator.sendBeacon(`/api/sessions/${sid}/release`);
  sid = null; submitted = false; sentText = null;
  $("request").readOnly = false; $("request").value = "";
  render({ steps: [], segments: 0, steps_run: 0, speculative_forwards: 0, speculative_wall_s: 0,
           status: "typing", finished: null, message: null });
  openSession();
}

function cell(row, value) { const td = document.createElement("td"); td.textContent = value; row.appendChild(td); }

function render(s) {
  document.body.dataset.status = s.status;
  $("status").textContent = `segments ${s.segments} · steps ${s.steps_run} · ${s.status}`;
  $("status").dataset.steps = s.steps_run;
  if (s.message) showMessage(s.message);
  if (s.status === "released" && events) { events.close(); events = null; sid = null; }
  const last = s.steps.length ? s.steps[s.steps.length - 1] : null;
  const draft = $("draft"); draft.textContent = "";
  if (last) {
    const kept = document.createElement("span"); kept.className = "kept"; kept.textContent = last.kept_text;
    const fresh = document.createElement("span"); fresh.className = "new"; fresh.textContent = last.new_text;
    draft.append(kept, fresh);
    $("last-step").textContent = `step ${last.step}${last.final ? " (final)" : ""}: kept ${last.accepted_tokens} ` +
      `of ${last.draft_tokens_in} draft tokens, threw away ${last.draft_tokens_in - last.accepted_tokens}, ` +
      `generated ${last.generated_tokens} — ${last.forwards} forwards, ${last.wall_s.toFixed(3)} s`;
    $("thrown").textContent = "";
    if (last.thrown_text) { const d = document.createElement("del"); d.textContent = last.thrown_text; $("thrown").append("thrown away: ", d); }
  } else { $("last-step").textContent = "no step yet"; $("thrown").textContent = ""; }
  $("speculative").textContent = `${s.speculative_forwards} forwards, ${s.speculative_wall_s.toFixed(3)} s`;
  const body = $("steps").tBodies[0]; body.textContent = "";
  for (const st of s.steps) {
    const row = body.insertRow();
    row.dataset.draftIn = st.draft_in_id; row.dataset.answer = st.answer_id;
    [st.step + (st.final ? " final" : ""), st.segments, st.draft_tokens_in, st.accepted_tokens,
     st.generated_tokens, st.forwards, st.wall_s.toFixed(3)].forEach((v) => cell(row, v));
  }
  renderFinished(s.finished);
}

function renderFinished(f) {
  $("result").hidden = !f;
  if (!f) return;
  $("answer").textContent = f.answer;
  $("answer").dataset.tokens = f.answer_tokens.join(",");
  $("residual").textContent = `residual: ${f.residual_forwards} forwards, ${f.residual_wall_s.toFixed(3)} s`;
  $("residual").dataset.forwards = f.residual_forwards;
  $("wait").textContent = `submit → complete answer: ${f.wait_s.toFixed(3)} s`;
  $("base").textContent = `plain submit-then-decode (measured): ${f.base_forwards} forwards, ` +
    `${f.base_wall_s.toFixed(3)} s — speedup ${(f.base_forwards / f.residual_forwards).toFixed(2)}× forwards, ` +
    `${(f.base_wall_s / Math.max(f.residual_wall_s, 1e-9)).toFixed(2)}× wall clock`;
  $("base").dataset.tokens = f.base_answer_tokens.join(",");
  const same = f.answer_tokens.join(",") === f.base_answer_tokens.join(",");
  $("same").textContent = `stream answer == base answer token for token: ${same ? "yes" : "no"}`;
}

async function start() {
  const cfg = await (await fetch("/api/config")).json();
  $("setup").textContent = `${cfg.model} (${cfg.family}) · acceptance ${cfg.acceptance}` +
    `${cfg.tau !== null ? " τ=" + cfg.tau : ""} · policy ${cfg.policy} · segments by ${cfg.granularity}` +
    ` · up to ${cfg.max_new_tokens} answer tokens`;
  await openSession();
  $("request").addEventListener("input", scheduleSend);
  $("submit").addEventListener("click", submit);
  $("new").addEventListener("click", newRequest);
  window.addEventListener("pagehide", () => { if (sid) navigator.sendBeacon(`/api/sessions/${sid}/release`); });
  setInterval(() => { if (!submitted && $("request").value !== sentText) scheduleSend(); }, 1000);
}

start();
