// Thumbs up or down under each answer of the chat, with an optional comment.
//
// Kept apart from chat.js: it finds the answers on the page (server-rendered or
// appended live) and adds the controls, reading the user's earlier feedback of
// this conversation with one request (/api/feedback/?conversation=).
import { api } from "./taskstream.js";

const root = document.getElementById("conversation");
const turns = document.getElementById("turns");
const given = new Map(); // task id -> {rating, comment}

// Feather's thumbs-up and thumbs-down (MIT), drawn inline: no emoji font needed.
const ICONS = {
  up: "M14 9V5a3 3 0 0 0-3-3l-4 9v11h11.28a2 2 0 0 0 2-1.7l1.38-9a2 2 0 0 0-2-2.3zM7 22H4a2 2 0 0 1-2-2v-7a2 2 0 0 1 2-2h3",
  down: "M10 15v4a3 3 0 0 0 3 3l4-9V2H5.72a2 2 0 0 0-2 1.7l-1.38 9a2 2 0 0 0 2 2.3zm7-13h2.67A2.31 2.31 0 0 1 22 4v7a2.31 2.31 0 0 1-2.33 2H17",
};

function thumb(rating, label) {
  const button = el("button", "link thumb");
  button.type = "button";
  button.dataset.rating = rating;
  button.setAttribute("aria-label", label);
  button.title = label;
  const svg = document.createElementNS("http://www.w3.org/2000/svg", "svg");
  svg.setAttribute("viewBox", "0 0 24 24");
  svg.setAttribute("aria-hidden", "true");
  const path = document.createElementNS("http://www.w3.org/2000/svg", "path");
  path.setAttribute("d", ICONS[rating]);
  svg.append(path);
  button.append(svg);
  return button;
}

function el(tag, className, text) {
  const node = document.createElement(tag);
  if (className) node.className = className;
  if (text !== undefined) node.textContent = text;
  return node;
}

function paint(box, state) {
  for (const button of box.querySelectorAll("button[data-rating]")) {
    button.setAttribute("aria-pressed", String(Boolean(state) && state.rating === button.dataset.rating));
  }
  const form = box.querySelector("form");
  form.classList.toggle("hidden", !state);
  if (state && document.activeElement !== form.comment) form.comment.value = state.comment || "";
  box.querySelector("[data-feedback-status]").textContent = state
    ? state.rating === "up"
      ? "Thanks: marked helpful."
      : "Thanks: marked not helpful."
    : "";
}

async function send(box, taskId, rating, comment) {
  const status = box.querySelector("[data-feedback-status]");
  const result = await api("POST", `/api/tasks/${taskId}/feedback/`, { rating, comment });
  if (!result.ok) {
    status.textContent = (result.data && result.data.error) || `Could not save (error ${result.status}).`;
    return;
  }
  given.set(taskId, { rating: result.data.rating, comment: result.data.comment });
  paint(box, given.get(taskId));
}

async function withdraw(box, taskId) {
  const result = await api("DELETE", `/api/tasks/${taskId}/feedback/`);
  if (!result.ok && result.status !== 404) {
    box.querySelector("[data-feedback-status]").textContent =
      (result.data && result.data.error) || `Could not withdraw (error ${result.status}).`;
    return;
  }
  given.delete(taskId);
  paint(box, null);
}

function controls(article) {
  const taskId = article.dataset.task;
  const reply = article.querySelector("[data-reply]");
  if (!taskId || !reply || article.querySelector("[data-feedback]")) return;
  const box = el("div", "feedback small");
  box.dataset.feedback = taskId;
  const up = thumb("up", "Helpful");
  const down = thumb("down", "Not helpful");
  const status = el("span", "muted");
  status.dataset.feedbackStatus = "";
  status.setAttribute("role", "status");
  const form = el("form", "feedback-comment hidden");
  const comment = el("input");
  comment.name = "comment";
  comment.maxLength = 2000;
  comment.placeholder = "What was good or wrong? (optional)";
  comment.setAttribute("aria-label", "Comment on the answer");
  const save = el("button", "", "Save comment");
  save.type = "submit";
  form.append(comment, save);
  box.append(up, down, status, form);
  box.addEventListener("click", (event) => {
    const button = event.target.closest("button[data-rating]");
    if (!button) return;
    const state = given.get(taskId);
    if (state && state.rating === button.dataset.rating) withdraw(box, taskId);
    else send(box, taskId, button.dataset.rating, state ? state.comment : "");
  });
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    const state = given.get(taskId);
    if (state) send(box, taskId, state.rating, comment.value.trim());
  });
  reply.after(box);
  paint(box, given.get(taskId) || null);
}

function scan() {
  if (!turns) return;
  for (const article of turns.querySelectorAll("article.turn[data-task]")) controls(article);
}

async function start() {
  if (!turns) return;
  const conversation = root && root.dataset.conversation;
  if (conversation) {
    const result = await api("GET", `/api/feedback/?conversation=${conversation}`);
    if (result.ok && result.data) {
      for (const row of result.data.feedback) given.set(row.task, row);
    }
  }
  scan();
  // Answers that arrive live (chat.js appends a [data-reply] when a run ends).
  new MutationObserver(scan).observe(turns, { childList: true, subtree: true });
}

start();
