// The replay player: the recorded steps again, at their original relative times.
//
// The page embeds every frame (the shared step partial as the chat showed it at
// that moment, and its time in ms after the user's message) in a json_script
// block; the player reveals them in order. Nothing here runs the task.

const MAX_WAIT_MS = 3000;

class Player {
  constructor(root, data) {
    this.root = root;
    this.frames = data.frames || [];
    this.duration = data.duration_ms || 0;
    this.stage = root.querySelector("[data-stage]");
    this.replySlot = root.querySelector("[data-reply-slot]");
    this.clock = root.querySelector("[data-clock]");
    this.position = root.querySelector("[data-position]");
    this.buttons = {
      play: root.querySelector("[data-action=play]"),
      pause: root.querySelector("[data-action=pause]"),
      step: root.querySelector("[data-action=step]"),
      reset: root.querySelector("[data-action=reset]"),
    };
    this.speedInput = root.querySelector("[data-action=speed]");
    this.skipInput = root.querySelector("[data-action=skip-waits]");
    this.speed = Number(this.speedInput.value) || 1;
    this.index = 0; // the next frame to show
    this.recordTime = 0; // ms of the recording shown so far
    this.timer = null;
    this.ticker = null;
    this.buttons.play.addEventListener("click", () => this.play());
    this.buttons.pause.addEventListener("click", () => this.pause());
    this.buttons.step.addEventListener("click", () => this.step());
    this.buttons.reset.addEventListener("click", () => this.reset());
    this.speedInput.addEventListener("change", () => {
      this.speed = Number(this.speedInput.value) || 1;
      if (this.playing) this.schedule();
    });
    this.render();
  }

  get playing() {
    return this.timer !== null;
  }

  gapTo(frame) {
    let gap = Math.max(0, frame.t - this.recordTime);
    if (this.skipInput.checked) gap = Math.min(gap, MAX_WAIT_MS);
    return gap;
  }

  play() {
    if (this.index >= this.frames.length) this.reset();
    this.root.dataset.state = "playing";
    this.schedule();
    this.startTicker();
    this.render();
  }

  schedule() {
    clearTimeout(this.timer);
    if (this.index >= this.frames.length) {
      this.finish();
      return;
    }
    const frame = this.frames[this.index];
    this.scheduledAt = performance.now();
    this.scheduledFrom = this.recordTime;
    this.timer = setTimeout(() => {
      this.show(this.frames[this.index]);
      this.index += 1;
      this.render();
      this.schedule();
    }, this.gapTo(frame) / this.speed);
  }

  startTicker() {
    clearInterval(this.ticker);
    this.ticker = setInterval(() => {
      if (!this.playing || this.index >= this.frames.length) return;
      const next = this.frames[this.index].t;
      const elapsed = (performance.now() - this.scheduledAt) * this.speed;
      const now = Math.min(next, this.scheduledFrom + elapsed);
      this.updateClock(now);
    }, 100);
  }

  pause() {
    clearTimeout(this.timer);
    clearInterval(this.ticker);
    this.timer = null;
    this.ticker = null;
    if (this.index < this.frames.length) this.root.dataset.state = "paused";
    this.render();
  }

  finish() {
    clearTimeout(this.timer);
    clearInterval(this.ticker);
    this.timer = null;
    this.ticker = null;
    this.root.dataset.state = "ended";
    this.render();
  }

  step() {
    this.pause();
    if (this.index >= this.frames.length) return;
    this.show(this.frames[this.index]);
    this.index += 1;
    if (this.index >= this.frames.length) this.root.dataset.state = "ended";
    this.render();
  }

  reset() {
    this.pause();
    this.stage.replaceChildren();
    this.replySlot.replaceChildren();
    this.index = 0;
    this.recordTime = 0;
    this.root.dataset.state = "ready";
    this.render();
  }

  show(frame) {
    this.recordTime = frame.t;
    const template = document.createElement("template");
    template.innerHTML = frame.html.trim();
    const node = template.content.firstElementChild;
    if (!node) return;
    // The timeline below holds the same step ids: the stage keeps none.
    node.removeAttribute("id");
    if (frame.kind === "reply") {
      this.replySlot.replaceChildren(node);
      return;
    }
    node.classList.add("just-changed");
    setTimeout(() => node.classList.remove("just-changed"), 700);
    const seq = Number(frame.seq);
    const existing = [...this.stage.children].find((li) => Number(li.dataset.seq) === seq);
    if (existing) {
      existing.replaceWith(node);
      return;
    }
    const after = [...this.stage.children].find((li) => Number(li.dataset.seq) > seq);
    this.stage.insertBefore(node, after || null);
  }

  updateClock(ms) {
    this.clock.textContent = `${(ms / 1000).toFixed(1)} s / ${(this.duration / 1000).toFixed(1)} s`;
  }

  render() {
    this.root.dataset.position = String(this.index);
    this.position.textContent = `${this.index} / ${this.frames.length}`;
    this.updateClock(this.recordTime);
    this.buttons.play.disabled = this.playing;
    this.buttons.pause.disabled = !this.playing;
    this.buttons.step.disabled = this.index >= this.frames.length;
  }
}

const root = document.getElementById("replay");
const source = document.getElementById("replay-data");
if (root && source) {
  root.dataset.state = "ready";
  window.reachReplay = new Player(root, JSON.parse(source.textContent));
}
