"""Run all peers side by side (interleaved rounds) and write a markdown report.

  python run_bench.py                       # full run, defaults below
  python run_bench.py --rounds 1 --k 5 --conc-rounds 1 --out smoke.md   # smoke test

Starts two fake servers on 127.0.0.1 (latency 0 for the sequential runs, --conc-latency-ms
for the concurrency runs), runs each measurement in a fresh child process
(`peers.py seq|conc ...`), rotating the peer order every round, and checks through
the server's /stats that every task made exactly S+1 model calls.
"""
import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
import urllib.request
from importlib import metadata

HERE = os.path.dirname(os.path.abspath(__file__))
PY = sys.executable
ALL = ["raw", "openai-agents", "pydantic-ai", "langgraph", "langgraph-mem", "langgraph-sqlite",
       "langchain-agent", "langchain-agent-sqlite"]
PACKAGES = ["openai", "openai-agents", "pydantic-ai-slim", "langgraph", "langgraph-prebuilt", "langgraph-checkpoint",
            "langgraph-checkpoint-sqlite", "langchain", "langchain-core", "langchain-openai", "httpx", "pydantic",
            "aiosqlite", "uvicorn", "uvloop", "httptools"]


def start_server(port, steps, latency_ms):
    proc = subprocess.Popen([PY, os.path.join(HERE, "fake_openai_server.py"), "--port", str(port),
                             "--steps", str(steps), "--latency-ms", str(latency_ms)])
    for _ in range(100):
        try:
            stats(port)
            return proc
        except OSError:
            time.sleep(0.1)
    proc.kill()
    raise RuntimeError(f"server on port {port} did not start")


def stats(port):
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/stats", timeout=5) as r:
        return json.load(r)


def child(port, args, expected_tasks, steps):
    """Run one `peers.py` measurement; return its JSON plus model calls per task seen by the server."""
    before = stats(port)["chat"]
    cmd = [PY, os.path.join(HERE, "peers.py"), *args, "--steps", str(steps),
           "--base-url", f"http://127.0.0.1:{port}/v1"]
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    if res.returncode:
        raise RuntimeError(f"{' '.join(cmd)} failed:\n{res.stderr[-2000:]}")
    out = json.loads(res.stdout.strip().splitlines()[-1])
    out["calls_per_task"] = (stats(port)["chat"] - before) / expected_tasks
    return out


def med(xs):
    return statistics.median(xs) if xs else float("nan")


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--peers", default=",".join(ALL))
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--k", type=int, default=25, help="timed tasks per child")
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--rounds", type=int, default=4)
    p.add_argument("--conc-n", type=int, default=50)
    p.add_argument("--conc-latency-ms", type=float, default=200)
    p.add_argument("--conc-rounds", type=int, default=3)
    p.add_argument("--port", type=int, default=8911, help="latency-0 server; port+1 gets the slow one")
    p.add_argument("--out", default="var/bench/peers.md")
    p.add_argument("--from-jsonl", help="only re-render the report from a previous run's .jsonl (same options)")
    a = p.parse_args()
    if a.from_jsonl:
        rows = [json.loads(x) for x in open(a.from_jsonl)]
        peers = list(dict.fromkeys(o["peer"] for o in rows))
        write_report(a, peers, [o for o in rows if o["what"] == "seq"], [o for o in rows if o["what"] == "conc"],
                     (float("nan"),) * 3, (float("nan"),) * 3, float("nan"))
        return print("wrote", a.out)
    peers, S = a.peers.split(","), a.steps
    thread_peers = [x for x in peers if x in ("raw",) or x.startswith(("langgraph", "langchain", "platform"))]
    os.makedirs(os.path.dirname(a.out), exist_ok=True)
    log = open(os.path.splitext(a.out)[0] + ".jsonl", "w")
    load0, t_start = os.getloadavg(), time.time()
    fast = start_server(a.port, S, 0)
    slow = start_server(a.port + 1, S, a.conc_latency_ms)
    seq, conc = [], []
    try:
        for r in range(a.rounds):
            order = peers[r % len(peers):] + peers[:r % len(peers)]
            for i, peer in enumerate(order):
                for api in (("sync", "async") if (r + i) % 2 == 0 else ("async", "sync")):
                    out = child(a.port, ["seq", "--peer", peer, "--api", api, "--k", str(a.k), "--warmup", str(a.warmup)],
                                1 + a.warmup + a.k, S)
                    out["round"] = r
                    seq.append(out)
                    log.write(json.dumps(out) + "\n")
                    print(f"seq r{r} {peer:24s} {api:5s} {out['median_task_ms']:7.1f} ms/task", flush=True)
        for r in range(a.conc_rounds):
            order = peers[r % len(peers):] + peers[:r % len(peers)]
            for peer in order:
                for mode in ("async", "threads") if peer in thread_peers else ("async",):
                    out = child(a.port + 1, ["conc", "--peer", peer, "--mode", mode, "--n", str(a.conc_n)],
                                3 + a.conc_n, S)
                    out["round"] = r
                    conc.append(out)
                    log.write(json.dumps(out) + "\n")
                    print(f"conc r{r} {peer:24s} {mode:7s} {out['total_s']:6.2f} s", flush=True)
    finally:
        fast.terminate()
        slow.terminate()
        fast.wait()
        slow.wait()
    log.close()
    write_report(a, peers, seq, conc, load0, os.getloadavg(), time.time() - t_start)
    print("wrote", a.out)


# --- the platform's own CPU (added for the product's `make bench`) ---------------------------
# With BENCH_PLATFORM_PIDFILE set, peers.py reads the CPU time of the product's processes
# (worker, web, redis, beat, launcher) around its timed tasks: `platform_cpu_s`, `timed_tasks`,
# `window_s` in its JSON.
PLATFORM_PROCS = ("worker", "web", "redis", "beat", "launcher")


def platform_cpu(rows, calls):
    """{process: CPU ms per step} pooled over `rows` (children of one platform peer and API/mode)."""
    rows = [o for o in rows if "platform_cpu_s" in o]
    out = {}
    for name in PLATFORM_PROCS:
        have = [o for o in rows if name in o["platform_cpu_s"]]
        steps = sum(o["timed_tasks"] * calls for o in have)
        if steps:
            out[name] = 1000 * sum(o["platform_cpu_s"][name] for o in have) / steps
    return out


def platform_idle(rows):
    """{process: CPU ms per second} while the children of the other peers ran (the platform idle)."""
    rows = [o for o in rows if "platform_cpu_s" in o and not o["peer"].startswith("platform")]
    out = {}
    for name in PLATFORM_PROCS:
        have = [o for o in rows if name in o["platform_cpu_s"]]
        wall = sum(o["window_s"] for o in have)
        if wall:
            out[name] = 1000 * sum(o["platform_cpu_s"][name] for o in have) / wall
    return out


def platform_cpu_section(seq, conc, calls):
    groups = []
    for what, rows, key in (("sequential", seq, "api"), ("concurrent", conc, "mode")):
        for peer in dict.fromkeys(o["peer"] for o in rows if "platform_cpu_s" in o):
            if not peer.startswith("platform"):
                continue
            for kind in dict.fromkeys(o[key] for o in rows if o["peer"] == peer):
                groups.append((f"{peer} {what} ({kind})",
                               platform_cpu([o for o in rows if o["peer"] == peer and o[key] == kind], calls)))
    if not groups:
        return []
    L = ["", "## The platform's own CPU per step\n",
         "CPU time (utime + stime from /proc, all threads) of each platform process around the "
         "timed tasks of each platform child (after its login and warm-up), divided by the steps "
         "they ran (timed tasks x model calls). The driver (peers.py) is not in these figures.\n",
         "| run | " + " | ".join(f"{n} ms/step" for n in PLATFORM_PROCS) + " | worker + web ms/step |",
         "|---|" + "---|" * (len(PLATFORM_PROCS) + 1)]
    for label, cpu in groups:
        L.append(f"| {label} | " + " | ".join(f"{cpu[n]:.2f}" if n in cpu else "n/a" for n in PLATFORM_PROCS)
                 + f" | {cpu.get('worker', float('nan')) + cpu.get('web', float('nan')):.2f} |")
    idle = platform_idle(seq + conc)
    if idle:
        L.append("\nWhile the other peers ran (the platform idle), CPU ms per second: "
                 + ", ".join(f"{n} {v:.2f}" for n, v in idle.items()) + ".")
    return L


def write_report(a, peers, seq, conc, load0, load1, elapsed):
    S, calls = a.steps, a.steps + 1
    run_info = (f"re-rendered from `{a.from_jsonl}`" if a.from_jsonl else
                f"{elapsed / 60:.1f} min; load avg before {load0[0]:.2f}, after {load1[0]:.2f}")
    L = ["# Agent framework overhead per step: side-by-side anchor numbers\n",
         f"Generated by `bench/run_bench.py` on {time.strftime('%Y-%m-%d %H:%M')} ({run_info}).",
         f"Machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}; "
         f"fake server and client share these cores (noisy shared machine: compare ratios, not absolutes).\n",
         f"Task: one question, S={S} tool calls to `calculate`, then a final answer = {calls} model calls "
         f"(a 'step' below = one model call + the tool it asks for). Sequential: {a.rounds} interleaved rounds x "
         f"{a.k} timed tasks (after {a.warmup} warm-up) per peer and API, server latency 0, so time = framework + "
         f"openai/httpx client + local HTTP + fake server. Ratios: median over rounds of (peer median / raw median, same "
         f"round, same API); [min-max] across rounds. Client CPU = process CPU time of the client child (all its "
         f"threads) per task, pooled median: less sensitive than wall time to other tenants on the machine.\n",
         "## Sequential, server latency 0\n",
         "| peer | sync ms/task | sync ms/step | overhead vs raw ms/step | ratio to raw (sync) | client CPU ms/step "
         "(sync) | CPU ratio to raw | async ms/step | ratio to raw (async) | peak RSS MB | import+build s | "
         "model calls/task |",
         "|---|---|---|---|---|---|---|---|---|---|---|---|"]

    def rows(peer, api):
        return [o for o in seq if o["peer"] == peer and o["api"] == api]

    def pooled(peer, api, key="wall_s"):
        return med([x for o in rows(peer, api) for x in o[key]])

    def ratio(peer, api):
        rs = []
        for o in rows(peer, api):
            base = [b for b in rows("raw", api) if b["round"] == o["round"]]
            if base:
                rs.append(o["median_task_ms"] / base[0]["median_task_ms"])
        return f"{med(rs):.2f} [{min(rs):.2f}-{max(rs):.2f}]" if rs else "n/a"

    raw_sync, raw_cpu = pooled("raw", "sync"), pooled("raw", "sync", "cpu_s")
    for peer in peers:
        if not rows(peer, "sync"):
            continue
        w, aw = pooled(peer, "sync"), pooled(peer, "async")
        L.append(f"| {peer} | {1000 * w:.1f} | {1000 * w / calls:.2f} | {1000 * (w - raw_sync) / calls:+.2f} | "
                 f"{ratio(peer, 'sync')} | {1000 * pooled(peer, 'sync', 'cpu_s') / calls:.2f} | "
                 f"{pooled(peer, 'sync', 'cpu_s') / raw_cpu:.2f} | "
                 f"{1000 * aw / calls:.2f} | {ratio(peer, 'async')} | "
                 f"{max(o['peak_rss_mb'] for o in rows(peer, 'sync')):.0f} | "
                 f"{med([o['import_s'] for o in rows(peer, 'sync')]):.2f} | "
                 f"{med([o['calls_per_task'] for o in rows(peer, 'sync') + rows(peer, 'async')]):.2f} |")
    ideal = calls * a.conc_latency_ms / 1000
    L += [] if not conc else ["", f"## Concurrency: N={a.conc_n} tasks at once, server latency {a.conc_latency_ms:.0f} ms\n",
          f"Ideal wall time = (S+1) x latency = {ideal:.2f} s. Ratio = measured / ideal (median of {a.conc_rounds} "
          "interleaved rounds, [min-max]). `async` = asyncio.gather of the async entry point; `threads` = "
          f"{a.conc_n}-thread pool calling the sync entry point (Celery-threads style; only where the sync API is "
          "thread-safe). Peak RSS is the whole child process with all tasks in flight.\n",
          "| peer | mode | wall s | ratio to ideal | peak RSS MB | model calls/task |", "|---|---|---|---|---|---|"]
    for peer in peers:
        for mode in ("async", "threads"):
            rs = [o for o in conc if o["peer"] == peer and o["mode"] == mode]
            if rs:
                ts = [o["total_s"] for o in rs]
                L.append(f"| {peer} | {mode} | {med(ts):.2f} | {med(ts) / ideal:.2f} [{min(ts) / ideal:.2f}-"
                         f"{max(ts) / ideal:.2f}] | {max(o['peak_rss_mb'] for o in rs):.0f} | "
                         f"{med([o['calls_per_task'] for o in rs]):.2f} |")
    L += platform_cpu_section(seq, conc, calls)
    L += ["", "## Versions\n", "| package | version |", "|---|---|"]
    for pkg in PACKAGES:
        try:
            L.append(f"| {pkg} | {metadata.version(pkg)} |")
        except metadata.PackageNotFoundError:
            pass
    L += ["", "## Reproduce\n", "```sh",
          "python3.11 -m venv VENV",
          "VENV/bin/pip install -r bench/peers/requirements.txt",
          f"VENV/bin/python bench/peers/run_bench.py --steps {a.steps} --k {a.k} "
          f"--warmup {a.warmup} --rounds {a.rounds} --conc-n {a.conc_n} --conc-latency-ms {a.conc_latency_ms:g} "
          f"--conc-rounds {a.conc_rounds} --out {a.out}" + ("" if a.peers == ",".join(ALL) else f" --peers {a.peers}"),
          "```", f"Raw per-child results: `{os.path.splitext(a.out)[0]}.jsonl`."]
    with open(a.out, "w") as f:
        f.write("\n".join(L) + "\n")


if __name__ == "__main__":
    main()
