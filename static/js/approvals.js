// The approval queue: decide through the API, check edits against the tool's
// schema before sending, and follow /ws/approvals/ live.
import { api } from "./taskstream.js";

const cards = document.getElementById("approval-cards");
const empty = document.getElementById("queue-empty");
const count = document.querySelector("[data-pending-count]");
const live = document.querySelector("[data-live]");
const recent = document.querySelector("#recent-decisions tbody");
const filters = new URLSearchParams(location.search);
const showTrace = cards && cards.dataset.showTrace === "yes";

function pendingCards() {
  return [...cards.querySelectorAll(".approval-card")].filter((c) => !c.classList.contains("leaving"));
}

function refreshEmpty() {
  const left = pendingCards().length;
  empty.classList.toggle("hidden", left > 0);
  if (count) count.textContent = String(left);
}

function say(card, selector, message) {
  const box = card.querySelector(selector);
  if (!box) return;
  box.textContent = message;
  box.classList.toggle("hidden", !message);
}

const showError = (card, message) => say(card, "[data-error]", message);
const showNotice = (card, message) => say(card, "[data-notice]", message);

// A JSON Schema check of the common keywords (type, required, properties,
// additionalProperties, enum, const, lengths, ranges, pattern, items) so a
// mistake is caught before sending; the server validates fully.
function typeOf(value) {
  if (value === null) return "null";
  if (Array.isArray(value)) return "array";
  if (typeof value === "number" && Number.isInteger(value)) return "integer";
  return typeof value;
}

function typeMatches(wanted, value) {
  const actual = typeOf(value);
  return wanted === actual || (wanted === "number" && actual === "integer");
}

export function schemaErrors(schema, value, path = "arguments") {
  if (!schema || typeof schema !== "object") return [];
  const errors = [];
  const types = [].concat(schema.type || []);
  if (types.length && !types.some((t) => typeMatches(t, value))) {
    return [`${path} must be ${types.join(" or ")}, not ${typeOf(value)}.`];
  }
  if (schema.enum && !schema.enum.some((v) => JSON.stringify(v) === JSON.stringify(value))) {
    errors.push(`${path} must be one of ${schema.enum.map((v) => JSON.stringify(v)).join(", ")}.`);
  }
  if ("const" in schema && JSON.stringify(schema.const) !== JSON.stringify(value)) {
    errors.push(`${path} must be ${JSON.stringify(schema.const)}.`);
  }
  if (typeof value === "string") {
    if (schema.minLength !== undefined && value.length < schema.minLength) errors.push(`${path} is too short.`);
    if (schema.maxLength !== undefined && value.length > schema.maxLength) errors.push(`${path} is too long.`);
    if (schema.pattern) {
      try {
        if (!new RegExp(schema.pattern, "u").test(value)) errors.push(`${path} does not match ${schema.pattern}.`);
      } catch (_) { /* the server checks patterns JavaScript cannot compile */ }
    }
  }
  if (typeof value === "number") {
    if (schema.minimum !== undefined && value < schema.minimum) errors.push(`${path} must be ≥ ${schema.minimum}.`);
    if (schema.maximum !== undefined && value > schema.maximum) errors.push(`${path} must be ≤ ${schema.maximum}.`);
  }
  if (typeOf(value) === "object") {
    for (const name of schema.required || []) {
      if (!(name in value)) errors.push(`"${name}" is required.`);
    }
    const props = schema.properties || {};
    for (const [name, item] of Object.entries(value)) {
      if (name in props) errors.push(...schemaErrors(props[name], item, `"${name}"`));
      else if (schema.additionalProperties === false) errors.push(`"${name}" is not a parameter of this tool.`);
    }
  }
  if (Array.isArray(value) && schema.items) {
    value.forEach((item, i) => errors.push(...schemaErrors(schema.items, item, `${path}[${i}]`)));
  }
  return errors;
}

function schemaOf(card) {
  const script = card.querySelector('script[type="application/json"]');
  try {
    return script ? JSON.parse(script.textContent) : null;
  } catch (_) {
    return null;
  }
}

function removeCard(card) {
  if (card.classList.contains("leaving")) return;
  card.classList.add("leaving");
  refreshEmpty();
  setTimeout(() => { card.remove(); refreshEmpty(); }, 400);
}

function setEditing(card, editing) {
  card.querySelector("[data-editor-box]").classList.toggle("hidden", !editing);
  card.querySelector("pre[data-args]").classList.toggle("hidden", editing);
  for (const [action, shown] of [["edit", !editing], ["approve", !editing],
    ["approve-edited", editing], ["cancel-edit", editing]]) {
    const button = card.querySelector(`[data-action="${action}"]`);
    if (button) button.classList.toggle("hidden", !shown);
  }
  card.classList.toggle("editing", editing);
  if (editing) card.querySelector("textarea.editor").focus();
  else showError(card, "");
}

function checkEditor(card) {
  const editor = card.querySelector("textarea.editor");
  let value;
  try {
    value = JSON.parse(editor.value);
  } catch (error) {
    return { errors: [`Not valid JSON: ${error.message}`] };
  }
  return { value, errors: schemaErrors(schemaOf(card), value) };
}

async function decide(card, body) {
  showError(card, "");
  const buttons = [...card.querySelectorAll("button")];
  for (const b of buttons) b.disabled = true;
  let result;
  try {
    result = await api("POST", `/api/approvals/${card.dataset.approval}/decision/`, body);
  } catch (error) {
    result = { ok: false, status: 0, data: { error: `Network error: ${error.message}` } };
  }
  for (const b of buttons) b.disabled = false;
  if (!result.ok) {
    const data = result.data || {};
    showError(card, data.error || data.detail || `Error ${result.status}`);
    if (result.status === 409) for (const b of buttons) b.disabled = true;
    return;
  }
  if (result.data.status !== "pending") {
    addRecent(result.data);
    removeCard(card);
    return;
  }
  // Two-person rule: this vote counts; another approver decides.
  const votes = card.querySelector("[data-votes]");
  const by = result.data.approved_by;
  if (votes) votes.textContent = `${by.length} of ${result.data.approvals_required} approvers: ${by.join(", ")}`;
  if (card.classList.contains("editing")) setEditing(card, false);
  card.querySelector("pre[data-args]").textContent = JSON.stringify(result.data.arguments, null, 2);
  showNotice(card, "Your approval is recorded; a second approver must approve too.");
  for (const action of ["approve", "edit"]) {
    const button = card.querySelector(`[data-action="${action}"]`);
    if (button) button.disabled = true;
  }
}

cards.addEventListener("click", (event) => {
  const button = event.target.closest("button[data-action]");
  if (!button) return;
  const card = button.closest(".approval-card");
  const action = button.dataset.action;
  if (action === "approve") decide(card, { decision: "approve" });
  else if (action === "mark_done") decide(card, { decision: "mark_done" });
  else if (action === "edit") setEditing(card, true);
  else if (action === "cancel-edit") setEditing(card, false);
  else if (action === "approve-edited") {
    const { value, errors } = checkEditor(card);
    if (errors.length) {
      showError(card, errors.join(" "));
      card.querySelector("textarea.editor").focus();
      return;
    }
    decide(card, { decision: "approve", arguments: value });
  } else if (action === "reject") {
    const input = card.querySelector("input.reason");
    const reason = input.value.trim();
    if (!reason) {
      showError(card, "Give a reason to reject: it goes back to the agent.");
      input.focus();
      return;
    }
    decide(card, { decision: "reject", reason });
  }
});

// Check the editor as the approver types.
cards.addEventListener("input", (event) => {
  const editor = event.target.closest("textarea.editor");
  if (!editor) return;
  const card = editor.closest(".approval-card");
  const { errors } = checkEditor(card);
  editor.classList.toggle("invalid", errors.length > 0);
  showError(card, errors.join(" "));
});

cards.addEventListener("keydown", (event) => {
  if (event.key === "Enter" && event.target.matches("input.reason")) {
    event.preventDefault();
    event.target.closest(".approval-card").querySelector('[data-action="reject"]').click();
  }
});

function matchesFilters(approval) {
  const values = {
    tool: approval.tool,
    risk: approval.risk,
    agent: approval.agent,
    user: approval.requested_by,
    tainted: approval.tainted_by && approval.tainted_by.length ? "yes" : "no",
  };
  for (const [key, value] of Object.entries(values)) {
    const wanted = (filters.get(key) || "").trim();
    if (wanted && wanted !== value) return false;
  }
  return true;
}

function cardFrom(html) {
  const template = document.createElement("template");
  template.innerHTML = html.trim();
  const card = template.content.firstElementChild;
  if (card && showTrace) {
    const link = card.querySelector("[data-trace-link]");
    if (link) link.classList.remove("hidden");
  }
  return card;
}

// How a decision reads (the labels of ApprovalDecision, approvals/models.py): mark
// done and retry are both "approved", so the row shows what was decided.
const OUTCOMES = { approve: "approved", reject: "rejected", mark_done: "marked done", retry: "retried" };

function addRecent(approval) {
  if (!recent || recent.querySelector(`tr[data-approval="${approval.id}"]`)) return;
  const none = recent.querySelector("tr.none");
  if (none) none.remove();
  const row = document.createElement("tr");
  row.dataset.approval = approval.id;
  row.dataset.decision = approval.decision || "";
  const by = approval.status === "approved" && approval.approved_by.length
    ? approval.approved_by.join(", ") : approval.decided_by || "—";
  const badge = document.createElement("span");
  badge.className = `badge status-${approval.status}`;
  badge.title = `status: ${approval.status}`;
  badge.textContent = OUTCOMES[approval.decision] || approval.status;
  for (const content of [approval.preview, badge, by, "just now", approval.reason || ""]) {
    const cell = document.createElement("td");
    if (typeof content === "string") cell.textContent = content;
    else cell.append(content);
    row.append(cell);
  }
  recent.prepend(row);
  while (recent.children.length > 10) recent.lastElementChild.remove();
}

function isIdle(card) {
  return !card.classList.contains("editing") && !card.querySelector("input.reason")?.value;
}

function onApproval(message) {
  const approval = message.approval;
  const existing = document.getElementById(`approval-${approval.id}`);
  if (approval.status !== "pending") {
    if (existing) removeCard(existing);
    addRecent(approval);
    return;
  }
  if (!matchesFilters(approval) || !message.html) return;
  const card = cardFrom(message.html);
  if (!card) return;
  if (existing) {
    // Keep what the approver is typing; refresh only idle cards.
    if (isIdle(existing)) existing.replaceWith(card);
  } else {
    card.classList.add("arriving");
    cards.append(card);
  }
  refreshEmpty();
  tick();
}

// After a dropped connection, fetch the page again: the socket sends no snapshot.
async function resync() {
  try {
    const response = await fetch(location.href, { credentials: "same-origin" });
    if (!response.ok) return;
    const doc = new DOMParser().parseFromString(await response.text(), "text/html");
    const fresh = doc.getElementById("approval-cards");
    if (!fresh) return;
    const ids = new Set();
    for (const node of fresh.querySelectorAll(".approval-card")) {
      ids.add(node.id);
      const existing = document.getElementById(node.id);
      if (!existing) cards.append(cardFrom(node.outerHTML));
      else if (isIdle(existing)) existing.replaceWith(cardFrom(node.outerHTML));
    }
    for (const card of pendingCards()) if (!ids.has(card.id)) removeCard(card);
    refreshEmpty();
  } catch (_) { /* the next reconnect tries again */ }
}

function connect(attempt = 0, dropped = false) {
  const scheme = location.protocol === "https:" ? "wss" : "ws";
  const socket = new WebSocket(`${scheme}://${location.host}/ws/approvals/`);
  socket.addEventListener("open", () => {
    attempt = 0;
    if (live) live.classList.remove("offline");
    if (dropped) resync();
  });
  socket.addEventListener("message", (event) => {
    const message = JSON.parse(event.data);
    if (message.type === "approval") onApproval(message);
  });
  socket.addEventListener("close", (event) => {
    if (live) live.classList.add("offline");
    if (event.code === 4403 || event.code === 4401) return;
    setTimeout(() => connect(attempt + 1, true), Math.min(10000, 500 * 2 ** attempt));
  });
}

// Ages and deadlines, kept current without a reload.
function relative(ms) {
  const s = Math.max(0, Math.round(ms / 1000));
  if (s < 60) return `${s} s`;
  const m = Math.floor(s / 60);
  if (m < 60) return `${m} min`;
  const h = Math.floor(m / 60);
  if (h < 48) return `${h} h ${m % 60} min`;
  return `${Math.floor(h / 24)} days`;
}

function tick() {
  const now = Date.now();
  for (const card of pendingCards()) {
    const age = card.querySelector("time[data-age]");
    if (age) {
      const ms = now - Date.parse(age.getAttribute("datetime"));
      if (!Number.isNaN(ms)) age.textContent = ms < 5000 ? "just now" : `${relative(ms)} ago`;
    }
    const expiry = card.querySelector("[data-expiry]");
    const left = Date.parse(card.dataset.expires) - now;
    if (expiry && !Number.isNaN(left)) {
      if (left > 0) {
        expiry.textContent = `expires in ${relative(left)}`;
        expiry.classList.toggle("soon", left < 5 * 60 * 1000);
      } else if (!card.classList.contains("expired")) {
        card.classList.add("expired");
        expiry.textContent = "expired: a decision is no longer accepted";
        for (const b of card.querySelectorAll(".actions button")) b.disabled = true;
      }
    }
  }
}

if (cards) {
  refreshEmpty();
  tick();
  setInterval(tick, 10000);
  connect();
}
