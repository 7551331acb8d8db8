// Trace detail: timing bars (the CSP forbids inline styles), re-run and fork;
// a run still going is followed live (the page is drawn again as it changes).
import { api, TaskStream } from "./taskstream.js";

const live = document.getElementById("live");
if (live) {
  // The timeline, its lanes and the fork forms are drawn by the server: draw
  // the whole page again (at most once a second) when the run changes.
  let redraw = null;
  const changed = () => {
    if (redraw === null) redraw = setTimeout(() => window.location.reload(), 1000);
  };
  new TaskStream(live.dataset.task, {
    afterRev: Number(live.dataset.rev || 0),
    onStep: changed,
    onTask: (task) => {
      if (task.status !== live.dataset.status) changed();
    },
    onClose: () => {
      live.textContent = "live updates stopped: your session ended; reload the page";
    },
  });
}

const LANE_HEIGHT = 18;

for (const bar of document.querySelectorAll(".timeline .bar span")) {
  bar.style.left = `${bar.dataset.left}%`;
  bar.style.width = `${bar.dataset.width}%`;
}

// The overview: calls that ran at the same time sit side by side in lanes.
const lanes = document.querySelector(".overview .lanes");
if (lanes) {
  lanes.style.height = `${Number(lanes.dataset.lanes || 1) * LANE_HEIGHT}px`;
  for (const bar of lanes.querySelectorAll(".lane-bar")) {
    bar.style.left = `${bar.dataset.left}%`;
    bar.style.width = `${bar.dataset.width}%`;
    bar.style.top = `${Number(bar.dataset.lane || 0) * LANE_HEIGHT}px`;
  }
}

function describe(value) {
  return value === null || value === undefined ? "nothing" : JSON.stringify(value);
}

const rerun = document.getElementById("rerun");
const rerunResult = document.getElementById("rerun-result");
if (rerun && rerunResult) {
  rerun.addEventListener("click", async () => {
    rerun.disabled = true;
    rerunResult.className = "rerun-result";
    rerunResult.textContent = "re-running…";
    const answer = await api("POST", `/api/tasks/${rerun.dataset.task}/rerun/`);
    rerun.disabled = false;
    if (!answer.ok) {
      rerunResult.textContent = (answer.data && answer.data.error) || `Error ${answer.status}`;
      return;
    }
    const { matches, divergence } = answer.data;
    rerunResult.dataset.matches = String(matches);
    if (matches) {
      rerunResult.classList.add("ok");
      rerunResult.textContent = "The current engine reproduces every step.";
    } else {
      rerunResult.classList.add("diverged");
      const where = divergence.seq === null ? "at the end" : `at step ${divergence.seq}`;
      rerunResult.textContent =
        `Diverged ${where}:\n  expected ${describe(divergence.expected)}\n` +
        `  got      ${describe(divergence.got)}`;
    }
  });
}

for (const form of document.querySelectorAll(".fork-form")) {
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    const error = form.querySelector(".fork-error");
    error.textContent = "";
    const body = { from_seq: Number(form.dataset.seq) };
    const editor = form.elements.namedItem("arguments");
    if (editor && editor.value.trim() && editor.value !== editor.defaultValue) {
      try {
        body.arguments = JSON.parse(editor.value);
      } catch (_) {
        error.textContent = "The arguments are not valid JSON.";
        return;
      }
    }
    const model = form.elements.namedItem("model").value.trim();
    if (model) body.model = model;
    const button = form.querySelector("button[type=submit]");
    button.disabled = true;
    const answer = await api("POST", `/api/tasks/${form.dataset.task}/fork/`, body);
    button.disabled = false;
    if (answer.status === 202) {
      window.location.assign(`/traces/${answer.data.task}/`);
      return;
    }
    error.textContent = (answer.data && (answer.data.error || answer.data.detail)) ||
      `Error ${answer.status}`;
  });
}
