// The run console refreshes its board without a reload: it fetches the same
// partial the page rendered (/console/board/) and swaps it in, keeping what the
// operator was doing: the runs ticked for a bulk cancel and the steps chosen to
// retry from. It pauses while a step list in the board has focus, and while the
// tab is hidden.
const board = document.getElementById("console-board");
const live = document.querySelector("[data-live]");

function remember() {
  const ticked = new Set(
    [...board.querySelectorAll('input[type="checkbox"][name="task"]:checked')].map((box) => box.value),
  );
  const chosen = new Map(
    [...board.querySelectorAll("select[data-keep]")].map((select) => [select.dataset.keep, select.value]),
  );
  return { ticked, chosen };
}

function restore({ ticked, chosen }) {
  for (const box of board.querySelectorAll('input[type="checkbox"][name="task"]')) {
    box.checked = ticked.has(box.value);
  }
  for (const select of board.querySelectorAll("select[data-keep]")) {
    const value = chosen.get(select.dataset.keep);
    if (value !== undefined && [...select.options].some((o) => o.value === value)) select.value = value;
  }
}

function busyWithAControl() {
  const active = document.activeElement;
  return Boolean(active && board.contains(active) && active.matches("select"));
}

function setLive(ok, title) {
  if (!live) return;
  live.classList.toggle("offline", !ok);
  live.textContent = ok ? "● live" : "● offline";
  if (title) live.title = title;
}

let inFlight = false;
let stopped = false;

async function refresh() {
  if (stopped || inFlight || document.hidden || busyWithAControl()) return;
  inFlight = true;
  try {
    const response = await fetch(board.dataset.refresh, {
      credentials: "same-origin",
      cache: "no-store",
      headers: { Accept: "text/html" },
    });
    if (response.redirected || response.status === 403 || response.status === 401) {
      // Logged out, or the permission was withdrawn: stop asking.
      stopped = true;
      setLive(false, "Log in again to follow the console.");
      return;
    }
    if (!response.ok) throw new Error(`board answered ${response.status}`);
    const html = await response.text();
    if (busyWithAControl()) return;
    const kept = remember();
    const fresh = document.createElement("template");
    fresh.innerHTML = html;
    board.replaceChildren(fresh.content);
    restore(kept);
    setLive(true, "This board refreshes itself every few seconds");
  } catch (error) {
    setLive(false, `Not refreshed: ${error.message}`);
  } finally {
    inFlight = false;
  }
}

if (board) {
  const every = Math.max(1000, Number(board.dataset.interval) || 3000);
  setInterval(refresh, every);
  document.addEventListener("visibilitychange", () => {
    if (!document.hidden) refresh();
  });
  // The board is replaced as it refreshes: listen on the document.
  document.addEventListener("submit", (event) => {
    const form = event.target;
    if (!(form instanceof HTMLFormElement) || !board.contains(form)) return;
    if (form.id === "bulk-cancel" && !document.querySelector('input[name="task"][form="bulk-cancel"]:checked')) {
      event.preventDefault();
      window.alert("Tick the runs to cancel first.");
      return;
    }
    if (form.dataset.confirm && !window.confirm(form.dataset.confirm)) event.preventDefault();
  });
  document.addEventListener("change", (event) => {
    const all = event.target;
    if (!(all instanceof HTMLInputElement) || !all.dataset.selectAll) return;
    for (const box of board.querySelectorAll(`input[name="task"][data-state="${all.dataset.selectAll}"]`)) {
      box.checked = all.checked;
    }
  });
}
