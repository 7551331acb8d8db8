"""``make bench``: the platform beside other agent loops, per step, in one run.

Runs the team's peer benchmark (``bench/peers/``, a copy of ``shared/bench/``) with
the product itself as the ``platform-ws`` peer: the product is started here exactly
as ``make up`` starts it (``manage.py migrate``, ``seed_demo``, ``manage.py up``)
with ``OPENAI_BASE_URL`` pointing at the peer benchmark's fake OpenAI server, in a
private scratch ``REACH_VAR_DIR`` (its own SQLite database, Redis, secret key: a
developer's ``var/`` is not touched), and stopped again afterwards.

1. **Sequential** (fake server latency 0, port ``--model-port``): interleaved rounds
   of ``raw``, ``openai-agents``, ``langgraph-sqlite`` and ``platform-ws``; ms/step.
2. **Concurrent** (latency ``--conc-latency-ms``, port ``--model-port`` + 1; the
   product is restarted pointing at it): ``--conc-n`` tasks at once, wall time
   against the ideal (model calls x latency).

Around every platform child the CPU time of the product's processes (worker, web,
redis, beat, launcher: utime + stime from ``/proc/<pid>/stat``) is read before and
after, and divided by the steps it ran. Writes ``var/bench/<stamp>/report.md`` (and
``var/bench/latest.md``) and prints it. Without ``.venv-peers`` (``make
bench-peers``) only ``raw`` and ``platform-ws`` run, on the product's venv.

``--profile`` also records the worker and the web process with py-spy (from
``.venv-peers``) during the sequential phase and summarises where their CPU goes
(``bench/profile_summary.py``); the raw stacks stay in ``<stamp>/*.pyspy.txt``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import IO, Any

from bench.peers import run_bench
from bench.profile_summary import summarise_profile
from infra.processes import spawn
from reach_site.launcher import is_ours, web_server

ROOT = Path(__file__).resolve().parent.parent
PEERS_DIR = ROOT / "bench" / "peers"
PEER_VENV_PY = ROOT / ".venv-peers" / "bin" / "python"
PASSWORD = "bench-Pa55word-reach"
FULL_PEERS = "raw,openai-agents,langgraph-sqlite,platform-ws"
FULL_CONC_PEERS = "raw,langgraph-sqlite,platform-ws"
BARE_PEERS = "raw,platform-ws"
LABELS = {
    "raw": "raw openai-SDK loop",
    "openai-agents": "OpenAI Agents SDK (in memory)",
    "pydantic-ai": "pydantic-ai (in memory)",
    "langgraph": "LangGraph (no checkpointer)",
    "langgraph-mem": "LangGraph + in-memory checkpointer",
    "langgraph-sqlite": "LangGraph + SQLite checkpointer (durable)",
    "platform": "Agent Reach over its API, polling",
    "platform-ws": "Agent Reach over its API + websocket",
}
#: The environment that must not leak from a developer's shell into the bench
#: instance: it would point it at their database or Redis.
SCRUBBED = ("DATABASE_URL", "REDIS_URL", "REACH_TEST_DB_NAME", "REACH_TEST_SQLITE")
START_TIMEOUT_S = 180.0
STOP_TIMEOUT_S = 60.0
PHASE_TIMEOUT_S = 40 * 60.0
PROFILE_RATE_HZ = 200
PROFILED = ("worker", "web")
#: Only the thread holding the GIL is sampled: py-spy's idle detection does not work
#: on this machine (threads waiting in epoll or on a condition were counted as busy,
#: 3-8 x the process's CPU), while GIL samples come close to /proc's CPU time.
PROFILE_ARGS = "--gil"


def log(message: str) -> None:
    print(f"[bench] {message}", flush=True)


# -- ports -----------------------------------------------------------------------


def port_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def pick_port(wanted: int, span: int, taken: Sequence[int] = ()) -> int:
    """``wanted`` if it and the ``span - 1`` ports after it are free, else the next
    such block (up to 200 tries)."""
    for port in range(wanted, wanted + 200 * span, span):
        block = range(port, port + span)
        if not set(block) & set(taken) and all(port_free(p) for p in block):
            return port
    raise RuntimeError(f"no free block of {span} port(s) from {wanted}")


# -- the product -----------------------------------------------------------------


class Product:
    """One ``manage.py up`` of the product in the scratch var dir."""

    def __init__(
        self, var_dir: Path, port: int, model_url: str, log_path: Path
    ) -> None:
        self.var_dir, self.port, self.model_url = var_dir, port, model_url
        self.url = f"http://127.0.0.1:{port}"
        self.log_path = log_path
        self.env = product_env(var_dir, port, model_url)
        self.process: subprocess.Popen[str] | None = None
        self.ready = threading.Event()
        self.log_file: IO[str] | None = None
        self.lines: list[str] = []

    @property
    def pidfile(self) -> Path:
        return self.var_dir / "up.pids"

    def start(self) -> None:
        log(f"starting the product on {self.url} (model {self.model_url})")
        self.log_file = self.log_path.open("a")
        self.process = spawn(
            [sys.executable, "manage.py", "up"],
            cwd=ROOT,
            env=self.env,
            on_line=self._line,
        )
        deadline = time.monotonic() + START_TIMEOUT_S
        while not self.ready.wait(0.2):
            if self.process.poll() is not None or time.monotonic() > deadline:
                self.stop()
                tail = "\n".join(self.lines[-30:])
                raise RuntimeError(f"the product did not come up:\n{tail}")
        log(f"the product is up: {self.pids()}")

    def _line(self, line: str) -> None:
        assert self.log_file is not None
        self.log_file.write(line + "\n")
        if len(self.lines) < 5000:
            self.lines.append(line)
        if "Agent Reach is up" in line:
            self.log_file.flush()
            self.ready.set()

    def pids(self) -> dict[str, int]:
        try:
            data = json.loads(self.pidfile.read_text())
        except (OSError, ValueError):
            return {}
        pids = dict(data.get("children") or {})
        pids["launcher"] = data.get("launcher")
        return {k: v for k, v in pids.items() if isinstance(v, int)}

    def stop(self) -> None:
        """SIGTERM to the launcher (it stops its children); SIGKILL what is left."""
        if self.process is None:
            return
        children = self.pids()
        children.pop("launcher", None)
        if self.process.poll() is None:
            log("stopping the product")
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait(10)
        for name, pid in children.items():
            if is_ours(pid, name):
                log(f"{name} (pid {pid}) outlived the launcher: killing it")
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(pid, signal.SIGKILL)
        if self.log_file is not None:
            time.sleep(0.2)
            self.log_file.close()
            self.log_file = None
        self.process = None


def children(pid: int) -> list[int]:
    """The pids whose parent is ``pid`` (a web server's worker process)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
            found.append(int(entry.name))
    return found


def serving_pid(pid: int) -> int:
    """The process that runs the app: ``pid``'s only child when it has one (granian's
    worker), else ``pid`` itself (daphne, uvicorn)."""
    kids = children(pid)
    return kids[0] if len(kids) == 1 else pid


def rss_mb(pid: int) -> float:
    """The resident set of ``pid`` and its children in MB (``VmRSS``), NaN when it
    is gone."""
    total = float("nan")
    for each in (pid, *children(pid)):
        try:
            for line in Path(f"/proc/{each}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    value = int(line.split()[1]) / 1024
                    total = value if total != total else total + value
        except (OSError, ValueError, IndexError):
            pass
    return total


#: The processes of the idle stack (the launcher supervises; it is not counted).
STACK = ("web", "worker", "beat", "redis")


class PeakRss:
    """Samples one process's RSS every 0.2 s on a thread: its peak."""

    def __init__(self, pid: int) -> None:
        self.pid, self.peak = pid, rss_mb(pid)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while not self._stop.wait(0.2):
            value = rss_mb(self.pid)
            if value == value:  # not NaN
                self.peak = max(self.peak, value)

    def stop(self) -> float:
        self._stop.set()
        self._thread.join(2)
        return self.peak


def process_cpu(pid: int) -> float:
    """utime + stime of ``pid`` (all its threads), in seconds."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def tree_cpu(pid: int) -> float:
    """:func:`process_cpu` of ``pid`` and its children (granian's worker), seconds."""
    total = process_cpu(pid)
    for child in children(pid):
        with contextlib.suppress(OSError, ValueError, IndexError):
            total += process_cpu(child)
    return total


def product_env(var_dir: Path, port: int, model_url: str) -> dict[str, str]:
    env = dict(os.environ)
    for name in SCRUBBED:
        env.pop(name, None)
    env.update(
        {
            "REACH_VAR_DIR": str(var_dir),
            "OPENAI_BASE_URL": model_url,
            "OPENAI_MODEL": "fake-model",
            "OPENAI_API_KEY": "sk-fake",
            "PORT": str(port),
            "REACH_DEMO_PASSWORD": PASSWORD,
            "PYTHONUNBUFFERED": "1",
            "DJANGO_SETTINGS_MODULE": "reach_site.settings",
        }
    )
    return env


def manage(env: dict[str, str], *args: str, timeout: float = 300) -> str:
    result = subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
    )
    if result.returncode:
        raise RuntimeError(
            f"manage.py {' '.join(args)} failed:\n{result.stdout}{result.stderr}"
        )
    return result.stdout


def prepare_database(var_dir: Path) -> str:
    """What ``make up`` does before ``manage.py up``; returns alice's API token."""
    env = product_env(var_dir, 0, "http://127.0.0.1:9/v1")
    log(f"scratch instance in {var_dir}: migrate, seed_demo")
    manage(env, "migrate", "--noinput")
    manage(env, "seed_demo", "--if-enabled")
    return (
        manage(env, "issue_token", "alice", "--name", "bench").strip().splitlines()[-1]
    )


@contextlib.contextmanager
def running(product: Product) -> Iterator[Product]:
    product.start()
    try:
        yield product
    finally:
        product.stop()


# -- the peer benchmark ----------------------------------------------------------


def run_phase(
    python: str, args: list[str], env: dict[str, str], out: Path
) -> list[dict[str, Any]]:
    """One ``run_bench.py`` invocation; its output streams through; returns its rows."""
    cmd = [python, str(PEERS_DIR / "run_bench.py"), *args, "--out", str(out)]
    log("$ " + " ".join(cmd[1:]))
    process = subprocess.Popen(
        cmd, cwd=ROOT, env=env, stdin=subprocess.DEVNULL, start_new_session=True
    )
    try:
        code = process.wait(PHASE_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGTERM)
        process.wait(30)
        raise RuntimeError("the peer benchmark did not finish in time") from None
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
    if code:
        raise RuntimeError(f"run_bench.py exited with {code}")
    jsonl = out.with_suffix(".jsonl")
    return [json.loads(line) for line in jsonl.read_text().splitlines() if line]


def peer_env(product: Product | None, token: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in SCRUBBED}
    env["PYTHONUNBUFFERED"] = "1"
    if product is not None:
        env.update(
            {
                "PLATFORM_URL": product.url,
                "PLATFORM_PASSWORD": PASSWORD,
                "PLATFORM_TOKEN": token,
                "BENCH_PLATFORM_PIDFILE": str(product.pidfile),
            }
        )
    return env


def peer_python(bare: bool) -> tuple[str, str | None]:
    """The interpreter for the peers, and why it is not the full set (or None)."""
    if not bare and PEER_VENV_PY.exists():
        check = subprocess.run(
            [str(PEER_VENV_PY), "-c", "import agents, langgraph, langchain_openai"],
            capture_output=True,
            timeout=120,
        )
        if check.returncode == 0:
            return str(PEER_VENV_PY), None
        return sys.executable, (
            f"{PEER_VENV_PY.parent.parent} lacks the peer packages "
            "(run `make bench-peers`)"
        )
    if bare:
        return sys.executable, "--bare: the product's venv only"
    return sys.executable, (
        f"no {PEER_VENV_PY.parent.parent} (run `make bench-peers` for openai-agents "
        "and LangGraph)"
    )


# -- profiling -------------------------------------------------------------------


class Profiler:
    """py-spy recording the worker (raw collapsed stacks) while it runs."""

    def __init__(self, out: Path, extra: Sequence[str] = ()) -> None:
        self.out = out
        self.extra = list(extra)
        self.process: subprocess.Popen[bytes] | None = None
        self.pid = 0
        self.cpu_s = 0.0  # the process's CPU while it was recorded

    def start(self, pid: int) -> None:
        self.pid = pid
        self.cpu_s = -process_cpu(pid)
        py_spy = PEER_VENV_PY.parent / "py-spy"
        if not py_spy.exists():
            raise RuntimeError(f"--profile needs {py_spy} (make bench-peers)")
        cmd = [str(py_spy), "record", "--pid", str(pid), "--format", "raw"]
        cmd += ["--rate", str(PROFILE_RATE_HZ), *self.extra, "-o", str(self.out)]
        log("$ " + " ".join(cmd))
        self.process = subprocess.Popen(
            cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
        )
        time.sleep(1.0)
        if self.process.poll() is not None:
            assert self.process.stderr is not None
            raise RuntimeError("py-spy did not start: " + self.process.stderr.read())

    def stop(self) -> None:
        if self.pid:
            self.cpu_s += process_cpu(self.pid)
            self.pid = 0
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGINT)  # py-spy writes its file on SIGINT
            try:
                self.process.wait(60)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(5)
        self.process = None


# -- the report ------------------------------------------------------------------


def med(values: Sequence[float]) -> float:
    return statistics.median(values) if values else float("nan")


def spread(values: Sequence[float]) -> str:
    return f"[{min(values):.1f}-{max(values):.1f}]" if values else ""


def summarise(
    seq: list[dict[str, Any]],
    conc: list[dict[str, Any]],
    peers: list[str],
    args: argparse.Namespace,
) -> dict[str, dict[str, Any]]:
    """Per peer: sync ms/step (pooled median, and per-round medians), client CPU,
    N-at-once ratio per mode, the platform processes' CPU per step."""
    calls = args.steps + 1
    ideal = calls * args.conc_latency_ms / 1000
    out: dict[str, dict[str, Any]] = {}
    for peer in peers:
        rows = [o for o in seq if o["peer"] == peer and o["api"] == "sync"]
        arows = [o for o in seq if o["peer"] == peer and o["api"] == "async"]
        crows = [o for o in conc if o["peer"] == peer]
        if not rows and not crows:
            continue
        item: dict[str, Any] = {}
        if rows:
            item["ms_step"] = 1000 * med([x for o in rows for x in o["wall_s"]]) / calls
            item["ms_step_async"] = (
                1000 * med([x for o in arows for x in o["wall_s"]]) / calls
            )
            item["rounds"] = [o["median_task_ms"] / calls for o in rows]
            item["cpu_step"] = 1000 * med([x for o in rows for x in o["cpu_s"]]) / calls
            item["calls"] = med([o["calls_per_task"] for o in rows + arows])
        item["conc"] = {}
        for mode in ("async", "threads"):
            ts = [o["total_s"] / ideal for o in crows if o["mode"] == mode]
            if ts:
                item["conc"][mode] = ts
        if peer.startswith("platform"):
            item["platform_seq"] = run_bench.platform_cpu(rows + arows, calls)
            item["platform_conc"] = run_bench.platform_cpu(crows, calls)
        out[peer] = item
    return out


def fmt(value: float | None, pattern: str = "{:.1f}") -> str:
    if value is None or value != value:  # NaN
        return "n/a"
    return pattern.format(value)


def git_state() -> str:
    """The commit measured, and whether the work tree had uncommitted changes."""

    def git(*args: str) -> str:
        return subprocess.run(
            ["git", *args], cwd=ROOT, capture_output=True, text=True, timeout=30
        ).stdout

    try:
        head = git("rev-parse", "--short", "HEAD").strip()
        dirty = git("status", "--porcelain", "--untracked-files=no").splitlines()
    except (OSError, subprocess.SubprocessError):
        return "git state unknown"
    if not head:
        return "git state unknown"
    return f"commit {head}" + (f" + {len(dirty)} modified files" if dirty else "")


def report(
    summary: dict[str, dict[str, Any]],
    args: argparse.Namespace,
    notes: list[str],
    details: list[Path],
    started: float,
    loads: tuple[float, float],
) -> str:
    calls = args.steps + 1
    raw = summary.get("raw", {})
    raw_rounds = raw.get("rounds", [])
    lines = [
        "# `make bench`: Agent Reach beside other agent loops, per step",
        "",
        f"{time.strftime('%Y-%m-%d %H:%M')}, {git_state()}, web server "
        f"{web_server(os.environ)} (`REACH_WEB_SERVER`), {os.cpu_count()} cores, "
        "load average "
        f"{loads[0]:.2f} before / {loads[1]:.2f} after, "
        f"{(time.time() - started) / 60:.1f} min. Task: one question, S={args.steps} "
        f"`calculate` calls, then an answer ({calls} model calls; a step = one model "
        "call + its tool call). Fake OpenAI server on loopback, latency 0 for the "
        f"sequential rounds ({args.rounds} interleaved rounds x {args.k} tasks per "
        f"peer and API), {args.conc_latency_ms:g} ms for {args.conc_n} tasks at once "
        f"({args.conc_rounds} rounds).",
        "",
    ]
    lines += [f"**Note:** {note}" for note in notes]
    if notes:
        lines.append("")
    header = (
        "| peer | ms/step (sync) [per-round range] | over raw ms/step | "
        f"{args.conc_n} at once @{args.conc_latency_ms:g} ms, x ideal "
        "(async / threads) "
        "| agent-process CPU ms/step |"
    )
    lines += [header, "|---|---|---|---|---|"]
    for peer, item in summary.items():
        label = LABELS.get(peer, peer)
        if "ms_step" in item:
            step = f"{fmt(item['ms_step'])} {spread(item['rounds'])}"
            if peer == "raw" or "ms_step" not in raw:
                over = "—"
            else:
                over = f"{item['ms_step'] - raw['ms_step']:+.1f}"
                ratios = [
                    a / b for a, b in zip(item["rounds"], raw_rounds, strict=False)
                ]
                if ratios:
                    over += (
                        f" (x{med(ratios):.2f} [{min(ratios):.2f}-{max(ratios):.2f}])"
                    )
        else:
            step = over = "—"
        conc = " / ".join(
            f"{med(item['conc'][m]):.1f}" if m in item["conc"] else "—"
            for m in ("async", "threads")
        )
        if not item["conc"]:
            conc = "—"
        if peer.startswith("platform"):
            cpu = item.get("platform_seq", {})
            total = cpu.get("worker", float("nan")) + cpu.get("web", float("nan"))
            proc_cpu = f"worker + web {fmt(total)}"
        else:
            proc_cpu = fmt(item.get("cpu_step"))
        lines.append(f"| {label} | {step} | {over} | {conc} | {proc_cpu} |")
    for peer, item in summary.items():
        if not peer.startswith("platform"):
            continue
        lines += [
            "",
            f"The platform's processes during `{peer}` (CPU ms per step):",
            "",
        ]
        lines += [
            "| phase | worker | web | redis | beat | launcher |",
            "|---|---|---|---|---|---|",
        ]
        for key, name in (("platform_seq", "sequential"), ("platform_conc", "at once")):
            cpu = item.get(key) or {}
            if cpu:
                lines.append(
                    f"| {name} | "
                    + " | ".join(
                        fmt(cpu.get(n), "{:.2f}")
                        for n in ("worker", "web", "redis", "beat", "launcher")
                    )
                    + " |"
                )
    lines += [
        "",
        "ms/step: median task time / model calls, sync API, all rounds pooled; "
        "[range] of the per-round medians. over raw: difference of the pooled medians "
        "(x ratio of same-round medians, median [min-max] over rounds). x ideal: wall "
        f"time of {args.conc_n} tasks at once / ({calls} x latency), median of rounds. "
        "Agent-process CPU: the peer process's own CPU per step; for the platform the "
        "worker's + the web process's (the driver is not counted).",
        "",
        "Details (every column, async API, RSS, versions) follow from the two phases.",
    ]
    for path in details:
        if path.exists():
            body = path.read_text().split("\n", 1)[1]  # drop its title
            lines += ["", f"<!-- {path.name} -->", body.replace("\n## ", "\n### ")]
    return "\n".join(lines) + "\n"


def _met(ok: bool) -> str:
    return "met" if ok else "not met"


def idle_total(memory: dict[str, Any]) -> float | None:
    """The idle stack's RSS (MB), or None when it was not measured."""
    idle = memory.get("idle") or {}
    return sum(idle.values()) if idle else None


def rss_growth(memory: dict[str, Any], conc_n: int) -> float | None:
    """The worker's RSS growth per concurrent run (MB), or None."""
    if "worker_peak" not in memory:
        return None
    return (memory["worker_peak"] - memory["worker_before"]) / conc_n


def memory_report(memory: dict[str, Any], conc_n: int) -> str:
    """The memory targets of "A lean, fast spine": the idle stack, and the
    worker's growth per concurrent run."""
    lines = ["", "## Memory", ""]
    idle = memory.get("idle") or {}
    total = idle_total(memory)
    if total is not None:
        lines += [
            "RSS after the sequential rounds (warm, idle; the launcher, which only "
            "supervises, not counted):",
            "",
            "| " + " | ".join(STACK) + " | total | target |",
            "|" + "---|" * (len(STACK) + 2),
            "| "
            + " | ".join(fmt(idle.get(n)) + " MB" for n in STACK)
            + f" | {total:.1f} MB | under 400 MB: {_met(total < 400)} |",
        ]
    growth = rss_growth(memory, conc_n)
    if growth is not None:
        before, peak = memory["worker_before"], memory["worker_peak"]
        lines += [
            "",
            f"Worker RSS during {conc_n} runs at once: {before:.1f} MB before, "
            f"{peak:.1f} MB at its peak: {growth:.2f} MB per concurrent run "
            f"(target at most 1 MB: {_met(growth <= 1)}).",
        ]
    return "\n".join(lines) + "\n" if len(lines) > 3 else ""


def targets_report(
    summary: dict[str, dict[str, Any]], memory: dict[str, Any], conc_n: int
) -> str:
    """The targets of "Every feature pays for its step", each met or not, from
    this run's figures (ratios and differences of one run: the machine's noise
    moves them all together)."""
    raw = summary.get("raw", {})
    lang = summary.get("langgraph-sqlite", {})
    ours = summary.get("platform-ws", {})
    rows: list[tuple[str, str, str]] = []

    def row(target: str, measured: str, ok: bool | None) -> None:
        rows.append((target, measured, "n/a" if ok is None else _met(ok)))

    if "ms_step" in ours and "ms_step" in raw and "ms_step" in lang:
        mine = ours["ms_step"] - raw["ms_step"]
        theirs = lang["ms_step"] - raw["ms_step"]
        row(
            "per step, over the bare loop: at most LangGraph + SQLite's + 2 ms",
            f"{mine:+.1f} ms (LangGraph + SQLite {theirs:+.1f} ms)",
            mine <= theirs + 2,
        )
    else:
        row("per step: at most LangGraph + SQLite's overhead + 2 ms", "not run", None)

    def at_once(item: dict[str, Any]) -> float | None:
        values = item.get("conc", {}).get("async") or item.get("conc", {}).get(
            "threads"
        )
        return med(values) if values else None

    mine_conc, theirs_conc = at_once(ours), at_once(lang)
    if mine_conc is not None and theirs_conc is not None:
        row(
            f"{conc_n} at once: at most LangGraph + SQLite's x ideal",
            f"{mine_conc:.1f} x (LangGraph + SQLite {theirs_conc:.1f} x)",
            mine_conc <= theirs_conc,
        )
    else:
        row(f"{conc_n} at once: at most LangGraph + SQLite's x ideal", "not run", None)
    cpu = ours.get("platform_seq") or {}
    if cpu and "cpu_step" in raw:
        worker = cpu.get("worker", float("nan"))
        row(
            "worker CPU: at most the bare loop's + 3 ms per step",
            f"{worker:.2f} ms (bare loop {raw['cpu_step']:.2f} ms)",
            worker <= raw["cpu_step"] + 3,
        )
    if cpu:
        web = cpu.get("web", float("nan"))
        row("web CPU: at most 3 ms per pushed step", f"{web:.2f} ms", web <= 3)
    row(
        "200 at once on PostgreSQL, 4 worker processes: at most 1.5 x the bare floor",
        "not part of this run: `python -m bench.run --only concurrent --workers 4 "
        "--concurrency 64 --database-url postgres://...`",
        None,
    )
    if (growth := rss_growth(memory, conc_n)) is not None:
        row(
            "worker RSS growth: at most 1 MB per concurrent run",
            f"{growth:.2f} MB",
            growth <= 1,
        )
    if (total := idle_total(memory)) is not None:
        row("idle stack: under 400 MB", f"{total:.1f} MB", total < 400)
    lines = ["", "## Targets", "", "| target | measured | |", "|---|---|---|"]
    lines += [
        f"| {target} | {measured} | {verdict} |" for target, measured, verdict in rows
    ]
    return "\n".join(lines) + "\n"


# -- main ------------------------------------------------------------------------


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--peers", help=f"sequential peers (default {FULL_PEERS})")
    parser.add_argument(
        "--conc-peers", help=f"concurrent peers (default {FULL_CONC_PEERS})"
    )
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--k", type=int, default=20, help="timed tasks per child")
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--conc-n", type=int, default=50)
    parser.add_argument("--conc-latency-ms", type=float, default=200)
    parser.add_argument("--conc-rounds", type=int, default=2)
    parser.add_argument("--port", type=int, default=8200, help="the product's port")
    parser.add_argument(
        "--model-port", type=int, default=8911, help="fake server; +1 the slow one"
    )
    parser.add_argument("--out-dir", default=str(ROOT / "var" / "bench"))
    parser.add_argument(
        "--bare", action="store_true", help="raw and platform-ws on the product venv"
    )
    parser.add_argument(
        "--profile", action="store_true", help="py-spy worker and web (sequential)"
    )
    parser.add_argument(
        "--profile-args",
        default=PROFILE_ARGS,
        help=f"extra py-spy record options (default {PROFILE_ARGS!r})",
    )
    parser.add_argument("--keep-scratch", action="store_true")
    args = parser.parse_args(argv)

    python, missing = peer_python(args.bare)
    notes: list[str] = []
    if missing:
        notes.append(
            f"{missing}: only the platform and the raw loop ran, on the product's venv."
        )
        default_seq = default_conc = BARE_PEERS
        log("NOTE: " + notes[-1])
    else:
        default_seq, default_conc = FULL_PEERS, FULL_CONC_PEERS
    seq_peers = (args.peers or default_seq).split(",")
    conc_peers = (args.conc_peers or default_conc).split(",")
    platform = next(
        (p for p in seq_peers + conc_peers if p.startswith("platform")), None
    )

    stamp = time.strftime("%Y%m%d-%H%M%S")
    out_dir = Path(args.out_dir) / stamp
    out_dir.mkdir(parents=True, exist_ok=True)
    args.port = pick_port(args.port, 1)
    args.model_port = pick_port(args.model_port, 2, taken=[args.port])
    fast_url = f"http://127.0.0.1:{args.model_port}/v1"
    slow_url = f"http://127.0.0.1:{args.model_port + 1}/v1"
    common = ["--steps", str(args.steps), "--port", str(args.model_port)]
    started, load0 = time.time(), os.getloadavg()[0]
    scratch = Path(tempfile.mkdtemp(prefix="reach-bench-"))
    seq: list[dict[str, Any]] = []
    conc: list[dict[str, Any]] = []
    details: list[Path] = []
    profilers: dict[str, Profiler] = {}
    memory: dict[str, Any] = {}
    completed = False
    try:
        token = prepare_database(scratch) if platform else ""
        if args.rounds and seq_peers:
            product = None
            if any(p.startswith("platform") for p in seq_peers):
                product = Product(scratch, args.port, fast_url, out_dir / "product.log")
            with running(product) if product else contextlib.nullcontext():
                if args.profile and product is not None:
                    for name in PROFILED:
                        path = out_dir / f"{name}.pyspy.txt"
                        profilers[name] = Profiler(path, args.profile_args.split())
                        profilers[name].start(serving_pid(product.pids()[name]))
                try:
                    seq = run_phase(
                        python,
                        [*common, "--peers", ",".join(seq_peers)]
                        + ["--rounds", str(args.rounds), "--k", str(args.k)]
                        + ["--warmup", str(args.warmup), "--conc-rounds", "0"],
                        peer_env(product, token),
                        out_dir / "seq.md",
                    )
                finally:
                    for profiler in profilers.values():
                        profiler.stop()
                if product is not None:
                    # Warm and idle: every process has served the rounds.
                    time.sleep(2)
                    pids = product.pids()
                    memory["idle"] = {n: rss_mb(pids[n]) for n in STACK if n in pids}
            details.append(out_dir / "seq.md")
        if args.conc_rounds and conc_peers:
            product = None
            if any(p.startswith("platform") for p in conc_peers):
                product = Product(scratch, args.port, slow_url, out_dir / "product.log")
            with running(product) if product else contextlib.nullcontext():
                peak = None
                if product is not None and "worker" in product.pids():
                    worker = product.pids()["worker"]
                    memory["worker_before"] = rss_mb(worker)
                    peak = PeakRss(worker)
                conc = run_phase(
                    python,
                    [*common, "--peers", ",".join(conc_peers), "--rounds", "0"]
                    + ["--conc-rounds", str(args.conc_rounds)]
                    + ["--conc-n", str(args.conc_n)]
                    + ["--conc-latency-ms", f"{args.conc_latency_ms:g}"],
                    peer_env(product, token),
                    out_dir / "conc.md",
                )
                if peak is not None:
                    memory["worker_peak"] = peak.stop()
            details.append(out_dir / "conc.md")
        completed = True
    finally:
        if args.keep_scratch:
            log(f"kept the scratch instance: {scratch}")
        else:
            shutil.rmtree(scratch, ignore_errors=True)
        if not completed:
            with contextlib.suppress(OSError):
                out_dir.rmdir()  # only when empty: logs of a failed run stay

    peers = list(dict.fromkeys(seq_peers + conc_peers))
    summary = summarise(seq, conc, peers, args)
    text = report(summary, args, notes, details, started, (load0, os.getloadavg()[0]))
    text += memory_report(memory, args.conc_n)
    text += targets_report(summary, memory, args.conc_n)
    summary["memory"] = memory
    if args.profile:
        timed = [o for o in seq if o["peer"].startswith("platform")]
        steps = sum(o["timed_tasks"] * (args.steps + 1) for o in timed)
        for name in PROFILED:
            path = out_dir / f"{name}.pyspy.txt"
            if path.exists():
                cpu_s = sum(o.get("platform_cpu_s", {}).get(name, 0.0) for o in timed)
                text += "\n" + summarise_profile(
                    path,
                    PROFILE_RATE_HZ,
                    steps,
                    cpu_s,
                    title=f"The {name} process",
                    recorded_cpu_s=profilers[name].cpu_s,
                    mode=args.profile_args,
                )
    (out_dir / "report.md").write_text(text)
    (out_dir / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")
    shutil.copyfile(out_dir / "report.md", out_dir.parent / "latest.md")
    print()
    print(text)
    log(f"wrote {out_dir / 'report.md'} (and {out_dir.parent / 'latest.md'})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
