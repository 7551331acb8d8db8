// A live view of one task: websocket, resume by rev, reconnect with backoff.
//
// Server-rendered steps come with data-rev; the stream asks for every change
// after the highest rev it has (?after= on the socket's URL), so a reconnect
// never misses a step.

const FINAL = new Set(["succeeded", "stopped", "failed", "cancelled"]);

export function isFinal(status) {
  return FINAL.has(status);
}

export function csrfToken() {
  const input = document.querySelector("input[name=csrfmiddlewaretoken]");
  return input ? input.value : "";
}

export async function api(method, url, body) {
  const response = await fetch(url, {
    method,
    credentials: "same-origin",
    headers: {
      "Content-Type": "application/json",
      "Accept": "application/json",
      "X-CSRFToken": csrfToken(),
    },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  let data = null;
  try {
    data = await response.json();
  } catch (_) {
    data = null;
  }
  return { ok: response.ok, status: response.status, data };
}

// Insert or replace a rendered step <li> in order of seq, keeping the newest rev.
export function upsertStep(list, html) {
  const template = document.createElement("template");
  template.innerHTML = html.trim();
  const node = template.content.firstElementChild;
  if (!node) return null;
  const existing = document.getElementById(node.id);
  if (existing) {
    if (Number(existing.dataset.rev) >= Number(node.dataset.rev)) return existing;
    existing.replaceWith(node);
    return node;
  }
  const seq = Number(node.dataset.seq);
  const after = [...list.children].find((li) => Number(li.dataset.seq) > seq);
  list.insertBefore(node, after || null);
  return node;
}

export class TaskStream {
  constructor(taskId, { afterRev = 0, onStep, onTask, onClose, onDelta } = {}) {
    this.taskId = taskId;
    this.lastRev = afterRev;
    this.onStep = onStep;
    this.onTask = onTask;
    this.onDelta = onDelta;
    this.onClose = onClose;
    this.closed = false;
    this.attempt = 0;
    this.connect();
  }

  connect() {
    const scheme = location.protocol === "https:" ? "wss" : "ws";
    // The resume point rides on the URL: the server sends every change after it
    // on connect, then live, all in rev order (a resume message sent after the
    // socket opens could only come after live frames newer than it).
    const url = `${scheme}://${location.host}/ws/tasks/${this.taskId}/?after=${this.lastRev}`;
    const socket = new WebSocket(url);
    this.socket = socket;
    socket.addEventListener("open", () => {
      this.attempt = 0;
    });
    socket.addEventListener("message", (event) => {
      const message = JSON.parse(event.data);
      if (message.type === "step") {
        this.lastRev = Math.max(this.lastRev, message.step.rev);
        if (this.onStep) this.onStep(message);
      } else if (message.type === "task") {
        if (this.onTask) this.onTask(message.task);
        if (isFinal(message.task.status)) this.close();
      } else if (message.type === "delta") {
        // A piece of the reply being written; one older than a step we have
        // belongs to a reply already recorded.
        if (message.rev >= this.lastRev && this.onDelta) this.onDelta(message);
      }
    });
    socket.addEventListener("close", (event) => {
      if (this.closed) return;
      if (event.code === 4403 || event.code === 4401) {
        this.closed = true;
        if (this.onClose) this.onClose(event.code);
        return;
      }
      this.attempt += 1;
      const delay = Math.min(10000, 250 * 2 ** this.attempt) * (0.5 + Math.random() / 2);
      setTimeout(() => this.connect(), delay);
    });
  }

  close() {
    this.closed = true;
    if (this.socket) this.socket.close();
  }
}
