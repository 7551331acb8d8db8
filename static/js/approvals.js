// The approval queue: decide with the API, validate edits, live updates.
import { api } from "./taskstream.js";

const cards = document.getElementById("approval-cards");
const empty = document.getElementById("queue-empty");
const filters = new URLSearchParams(location.search);

function refreshEmpty() {
  empty.classList.toggle("hidden", cards.querySelector(".approval-card") !== null);
}

function showError(card, message) {
  const box = card.querySelector("[data-error]");
  if (!box) return;
  box.textContent = message;
  box.classList.toggle("hidden", !message);
}

// A small JSON Schema check (types, required, additionalProperties) before sending;
// the server validates fully.
function schemaErrors(schema, value) {
  if (!schema) return [];
  const errors = [];
  if (typeof value !== "object" || value === null || Array.isArray(value)) {
    return ["The arguments must be a JSON object."];
  }
  for (const name of schema.required || []) {
    if (!(name in value)) errors.push(`"${name}" is required.`);
  }
  const props = schema.properties || {};
  for (const [name, item] of Object.entries(value)) {
    const spec = props[name];
    if (!spec) {
      if (schema.additionalProperties === false) errors.push(`"${name}" is not a parameter.`);
      continue;
    }
    const types = [].concat(spec.type || []);
    const actual = Array.isArray(item) ? "array" : item === null ? "null" : typeof item;
    const ok = types.length === 0 || types.some((t) =>
      t === actual || (t === "integer" && Number.isInteger(item)) || (t === "number" && actual === "number"));
    if (!ok) errors.push(`"${name}" must be ${types.join(" or ")}.`);
  }
  return errors;
}

function removeCard(card) {
  card.classList.add("leaving");
  setTimeout(() => { card.remove(); refreshEmpty(); }, 300);
}

async function decide(card, body) {
  showError(card, "");
  for (const b of card.querySelectorAll("button")) b.disabled = true;
  const result = await api("POST", `/api/approvals/${card.dataset.approval}/decision/`, body);
  for (const b of card.querySelectorAll("button")) b.disabled = false;
  if (!result.ok) {
    showError(card, (result.data && (result.data.error || result.data.detail)) || `Error ${result.status}`);
    return;
  }
  if (result.data.status !== "pending") removeCard(card);
  else showError(card, "Your approval is recorded; a second approver is needed.");
}

cards.addEventListener("click", (event) => {
  const button = event.target.closest("button[data-action]");
  if (!button) return;
  const card = button.closest(".approval-card");
  const action = button.dataset.action;
  const editor = card.querySelector("textarea.editor");
  if (action === "approve") decide(card, { decision: "approve" });
  else if (action === "mark_done") decide(card, { decision: "mark_done" });
  else if (action === "edit") {
    editor.classList.remove("hidden");
    card.querySelector("pre.args").classList.add("hidden");
    card.querySelector("[data-action=approve-edited]").classList.remove("hidden");
    button.classList.add("hidden");
    editor.focus();
  } else if (action === "approve-edited") {
    let value;
    try {
      value = JSON.parse(editor.value);
    } catch (error) {
      showError(card, `Not valid JSON: ${error.message}`);
      return;
    }
    const script = card.querySelector('script[type="application/json"]');
    const schema = script ? JSON.parse(script.textContent) : null;
    const errors = schemaErrors(schema, value);
    if (errors.length) {
      showError(card, errors.join(" "));
      return;
    }
    decide(card, { decision: "approve", arguments: value });
  } else if (action === "reject") {
    const reason = card.querySelector("input.reason").value.trim();
    if (!reason) {
      showError(card, "Give a reason: it goes back to the model.");
      card.querySelector("input.reason").focus();
      return;
    }
    decide(card, { decision: "reject", reason });
  }
});

function matchesFilters(card) {
  for (const key of ["tool", "risk", "agent", "user", "tainted"]) {
    const wanted = filters.get(key);
    if (wanted && card.dataset[key] !== wanted) return false;
  }
  return true;
}

function connect(attempt = 0) {
  const scheme = location.protocol === "https:" ? "wss" : "ws";
  const socket = new WebSocket(`${scheme}://${location.host}/ws/approvals/`);
  socket.addEventListener("open", () => { attempt = 0; });
  socket.addEventListener("message", (event) => {
    const message = JSON.parse(event.data);
    if (message.type !== "approval") return;
    const existing = document.getElementById(`approval-${message.approval.id}`);
    if (message.approval.status !== "pending") {
      if (existing) removeCard(existing);
      return;
    }
    const template = document.createElement("template");
    template.innerHTML = message.html.trim();
    const card = template.content.firstElementChild;
    if (!matchesFilters(card)) return;
    if (existing) {
      // Keep an open editor as it is; refresh only idle cards.
      const editor = existing.querySelector("textarea.editor");
      if (!editor || editor.classList.contains("hidden")) existing.replaceWith(card);
    } else cards.append(card);
    refreshEmpty();
  });
  socket.addEventListener("close", (event) => {
    if (event.code === 4403 || event.code === 4401) return;
    setTimeout(() => connect(attempt + 1), Math.min(10000, 500 * 2 ** attempt));
  });
}

refreshEmpty();
connect();
