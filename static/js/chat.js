// The chat page: send messages, watch runs live, cancel them.
import { api, isFinal, TaskStream, upsertStep } from "./taskstream.js";

const root = document.getElementById("conversation");
const turns = document.getElementById("turns");
const form = document.getElementById("composer");
const input = document.getElementById("message");
const sendButton = document.getElementById("send");
const errorBox = document.getElementById("composer-error");
const streams = new Map();

function el(tag, className, text) {
  const node = document.createElement(tag);
  if (className) node.className = className;
  if (text !== undefined) node.textContent = text;
  return node;
}

function setBusy(busy) {
  if (!input) return;
  input.disabled = busy;
  sendButton.disabled = busy;
  if (!busy) input.focus();
}

function showError(message) {
  errorBox.textContent = message;
  errorBox.classList.toggle("hidden", !message);
}

function bubble(role, text, extra) {
  const div = el("div", `bubble ${role}${extra ? " " + extra : ""}`);
  const body = el("div", "text", text);
  div.append(body);
  return div;
}

// A structured answer as a table, as runs/step_html.py answer_table draws it:
// an object's fields as rows, a list of objects as rows under their keys.
function answerTable(value) {
  const isObject = (v) => v !== null && typeof v === "object" && !Array.isArray(v);
  if (isObject(value)) {
    const table = el("table", "answer-json");
    for (const [key, item] of Object.entries(value)) {
      const row = el("tr");
      row.append(el("th", "", key));
      const cell = el("td");
      cell.append(answerTable(item));
      row.append(cell);
      table.append(row);
    }
    return table;
  }
  if (Array.isArray(value) && value.length && value.every(isObject)) {
    const columns = [...new Set(value.flatMap((item) => Object.keys(item)))];
    const table = el("table", "answer-json");
    const head = el("tr");
    for (const column of columns) head.append(el("th", "", column));
    const thead = el("thead");
    thead.append(head);
    const tbody = el("tbody");
    for (const item of value) {
      const row = el("tr");
      for (const column of columns) {
        const cell = el("td");
        cell.append(answerTable(column in item ? item[column] : ""));
        row.append(cell);
      }
      tbody.append(row);
    }
    table.append(thead, tbody);
    return table;
  }
  if (Array.isArray(value)) {
    const span = el("span");
    value.forEach((item, index) => {
      if (index) span.append(", ");
      span.append(answerTable(item));
    });
    return span;
  }
  return document.createTextNode(value === null ? "" : String(value));
}

// A cost as the pages show it (engine.pricing.format_usd): never $0 for unknown.
function formatUsd(value) {
  if (value === null || value === undefined) return "cost unknown";
  if (value === 0) return "$0.00";
  if (Math.abs(value) >= 1) return `$${value.toFixed(2)}`;
  if (Math.abs(value) >= 0.01) return `$${value.toFixed(4)}`;
  if (Math.abs(value) < 0.0000005) return "< $0.000001";
  return `$${value.toFixed(6)}`;
}

function taskBlock(task) {
  const block = el("div", "task");
  block.id = `task-${task.id}`;
  const head = el("div", "task-head");
  const badge = el("span", `badge status-${task.status}`, task.status);
  badge.dataset.taskStatus = "";
  const reason = el("span", "stop-reason muted small");
  reason.dataset.stopReason = "";
  const meta = el("span", "muted small");
  const model = el("span", "", task.model || "");
  model.dataset.model = "";
  meta.append(model, document.createTextNode(" · "));
  const tokens = el("span", "", String(task.usage ? task.usage.total_tokens : 0));
  tokens.dataset.tokens = "";
  meta.append(tokens, document.createTextNode(" tokens · "));
  const cost = el("span", "", "cost_usd" in task ? formatUsd(task.cost_usd) : "");
  cost.dataset.cost = "";
  const intent = el("span", "");
  intent.dataset.intent = "";
  meta.append(cost, intent);
  const trace = el("a", "small", "trace");
  trace.href = `/traces/${task.id}/`;
  const cancel = el("button", "link small cancel", "Cancel");
  cancel.type = "button";
  cancel.dataset.cancel = task.id;
  head.append(badge, reason, meta, trace, cancel);
  const steps = el("ol", "steps");
  steps.dataset.steps = "";
  block.append(head, steps);
  return block;
}

function updateTask(article, task) {
  article.dataset.status = task.status;
  const badge = article.querySelector("[data-task-status]");
  if (badge) {
    badge.textContent = task.status;
    badge.className = `badge status-${task.status}`;
  }
  const tokens = article.querySelector("[data-tokens]");
  if (tokens && task.usage) {
    tokens.textContent = `${task.usage_estimated ? "≈" : ""}${task.usage.total_tokens}`;
  }
  const cost = article.querySelector("[data-cost]");
  if (cost && "cost_usd" in task) {
    cost.textContent = formatUsd(task.cost_usd);
    cost.classList.toggle("cost-unknown", task.cost_usd === null);
  }
  const intent = article.querySelector("[data-intent]");
  if (intent) intent.textContent = task.intent ? ` · route: ${task.intent}` : "";
  const model = article.querySelector("[data-model]");
  if (model && task.model) model.textContent = task.model;
  const reason = article.querySelector("[data-stop-reason]");
  if (reason) {
    reason.textContent =
      task.stop_reason && task.stop_reason !== "final_answer"
        ? `stop reason: ${task.stop_reason}`
        : "";
  }
  if (isFinal(task.status)) {
    const cancel = article.querySelector("[data-cancel]");
    if (cancel) cancel.remove();
    if (!article.querySelector("[data-reply]")) {
      const text =
        task.final_answer !== null && task.final_answer !== undefined
          ? task.final_answer
          : task.error ||
            (task.stop_reason === "cancelled" ? "Cancelled." : `Stopped (${task.stop_reason}).`);
      const reply = bubble("assistant", text, task.status === "succeeded" ? "" : "stopped");
      if (task.answer_json !== null && task.answer_json !== undefined) {
        const body = reply.querySelector(".text");
        body.textContent = "";
        body.classList.add("answer-json");
        body.dataset.answerJson = "";
        body.append(answerTable(task.answer_json));
      }
      reply.dataset.reply = "";
      article.append(reply);
    }
    streams.delete(task.id);
    setBusy(false);
    scrollDown();
    startQueued();
  }
}

// A message sent while a run went on, shown as queued until it starts.
function queuedBlock(queued) {
  const article = el("article", "turn queued");
  article.dataset.queued = queued.id;
  article.setAttribute("data-testid", "queued-message");
  article.append(bubble("user", queued.content));
  const note = el("p", "muted small");
  const badge = el(
    "span",
    "badge status-queued",
    queued.mode === "interrupt" ? "queued (interrupting)" : "queued",
  );
  badge.dataset.queuedState = "";
  note.append(badge, document.createTextNode(" starts when the run before it ends"));
  article.append(note);
  return article;
}

// When a run ends, the messages queued behind it start (server side): follow
// each until it has its run, then show that run live as any other turn.
let polling = false;
async function startQueued() {
  const waiting = () => turns.querySelectorAll("article.turn[data-queued]:not([data-task])");
  if (polling || !waiting().length || !root.dataset.conversation) return;
  polling = true;
  const deadline = Date.now() + 60000;
  try {
    while (waiting().length && Date.now() < deadline) {
      const listed = await api("GET", `/api/conversations/${root.dataset.conversation}/queue/`);
      const byId = new Map((listed.ok ? listed.data : []).map((q) => [q.id, q]));
      for (const article of waiting()) {
        const queued = byId.get(article.dataset.queued);
        if (!queued || queued.state === "queued") continue;
        const note = article.querySelector("[data-queued-state]");
        if (queued.state === "failed") {
          article.removeAttribute("data-queued");
          if (note) {
            note.textContent = "not started";
            note.className = "badge status-failed";
            note.parentElement.append(document.createTextNode(`: ${queued.error || ""}`));
          }
          continue;
        }
        if (note) note.parentElement.remove();
        article.classList.remove("queued");
        article.dataset.task = queued.task;
        article.dataset.rev = "0";
        article.dataset.status = "queued";
        article.append(taskBlock({ id: queued.task, status: "queued", model: "" }));
        watch(article);
      }
      if (waiting().length) await new Promise((done) => setTimeout(done, 500));
    }
  } finally {
    polling = false;
  }
}

// The conversation pane scrolls on its own (the page does not): show its end.
function scrollDown() {
  const pane = root || (turns && turns.closest(".conversation"));
  if (pane) pane.scrollTop = pane.scrollHeight;
}

// The reply being written (delta events): a provisional bubble, replaced by the
// recorded step when it arrives. Text only, never HTML; a tool call shows its
// name until the reply is complete, never its arguments.
function showDelta(article, delta) {
  let live = article.querySelector("[data-live-reply]");
  if (!live) {
    live = bubble("assistant", "", "live");
    live.dataset.liveReply = "";
    live.setAttribute("data-testid", "live-reply");
    live.append(el("div", "muted small preparing"));
    article.append(live);
  }
  live.dataset.rev = String(delta.rev);
  const body = live.querySelector(".text");
  const shown = delta.reset ? "" : body.textContent.slice(0, delta.offset);
  body.textContent = shown + delta.text;
  live.querySelector(".preparing").textContent = delta.tools
    .map((name) => `preparing \`${name}\`…`)
    .join(" ");
  scrollDown();
}

function dropLiveReply(article, rev) {
  const live = article.querySelector("[data-live-reply]");
  if (live && (rev === undefined || rev > Number(live.dataset.rev))) live.remove();
}

function watch(article) {
  const taskId = article.dataset.task;
  if (!taskId || streams.has(taskId)) return;
  const list = article.querySelector("[data-steps]");
  const stream = new TaskStream(taskId, {
    afterRev: Number(article.dataset.rev || 0),
    onStep: (message) => {
      dropLiveReply(article, message.step.rev);
      upsertStep(list, message.html);
      article.dataset.rev = String(Math.max(Number(article.dataset.rev || 0), message.step.rev));
      scrollDown();
    },
    onTask: (task) => {
      if (isFinal(task.status)) dropLiveReply(article);
      updateTask(article, task);
    },
    onDelta: (delta) => showDelta(article, delta),
    onClose: () => showError("Live updates stopped: your session ended. Reload the page."),
  });
  streams.set(taskId, stream);
}

// Show a conversation started on this page in the sidebar, as a reload would.
function listConversation(id, title) {
  const list = document.querySelector(".conversations");
  if (!list) return;
  for (const item of list.querySelectorAll("li.muted")) item.remove();
  for (const item of list.querySelectorAll("li.current")) item.classList.remove("current");
  const item = el("li", "current");
  const link = el("a", "", title.length > 48 ? `${title.slice(0, 47)}…` : title);
  link.href = `/c/${id}/`;
  item.append(link, el("span", "muted small", `${root.dataset.agent} · just now`));
  list.prepend(item);
}

async function ensureConversation() {
  if (root.dataset.conversation) return root.dataset.conversation;
  const created = await api("POST", "/api/conversations/", { agent: root.dataset.agent });
  if (!created.ok) throw new Error((created.data && created.data.error) || "Could not start a conversation.");
  root.dataset.conversation = created.data.id;
  root.dataset.onBusy = created.data.on_busy || "";
  history.replaceState(null, "", `/c/${created.data.id}/`);
  listConversation(created.data.id, input.value.trim());
  return created.data.id;
}

async function send() {
  const content = input.value.trim();
  if (!content) {
    showError("Type a message first.");
    return;
  }
  // Counted as the server counts (characters, not UTF-16 units); the text stays
  // in the box to be shortened, never cut off unseen.
  const limit = Number(input.dataset.maxChars || 0);
  const length = [...content].length;
  if (limit && length > limit) {
    showError(`The message is ${length} characters long; at most ${limit} go in one message.`);
    return;
  }
  showError("");
  setBusy(true);
  try {
    const conversationId = await ensureConversation();
    const posted = await api("POST", `/api/conversations/${conversationId}/messages/`, { content });
    if (posted.status === 409) {
      throw new Error("The agent is still working on the previous message.");
    }
    if (!posted.ok) {
      const data = posted.data || {};
      throw new Error(data.content || data.error || data.detail || `Error ${posted.status}`);
    }
    const empty = document.getElementById("empty-state");
    if (empty) empty.remove();
    const current = document.querySelector(".conversations li.current a");
    if (current && current.dataset.untitled !== undefined) {
      current.textContent = content.length > 48 ? `${content.slice(0, 47)}…` : content;
      delete current.dataset.untitled;
    }
    input.value = "";
    if (posted.data.queued) {
      turns.append(queuedBlock(posted.data.queued));
      setBusy(false);
      scrollDown();
      return;
    }
    const article = el("article", "turn");
    article.dataset.task = posted.data.task;
    article.dataset.rev = "0";
    article.dataset.status = "queued";
    article.append(bubble("user", content));
    article.append(taskBlock({ id: posted.data.task, status: "queued", model: "" }));
    turns.append(article);
    scrollDown();
    watch(article);
    // A conversation that queues takes the next message while this one runs.
    if (root.dataset.onBusy && root.dataset.onBusy !== "refuse") setBusy(false);
  } catch (error) {
    showError(error.message);
    setBusy(false);
  }
}

if (form) {
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    send();
  });
  input.addEventListener("keydown", (event) => {
    if (event.key === "Enter" && !event.shiftKey && !event.isComposing) {
      event.preventDefault();
      send();
    }
  });
}

document.addEventListener("click", async (event) => {
  const button = event.target.closest("[data-cancel]");
  if (!button) return;
  button.disabled = true;
  const result = await api("POST", `/api/tasks/${button.dataset.cancel}/cancel/`);
  if (!result.ok && result.status !== 409) {
    showError((result.data && result.data.error) || "Could not cancel.");
    button.disabled = false;
  }
});

if (turns) {
  for (const article of turns.querySelectorAll("article.turn[data-task]")) {
    if (!isFinal(article.dataset.status)) watch(article);
  }
  // Queued behind a run that ended before the page was read.
  if (!streams.size) startQueued();
  scrollDown();
}
