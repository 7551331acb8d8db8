"""``make bench-watch``: browsers watching runs. Does every step arrive, in order,
and how long after it was written?

Starts a scratch product as ``make bench`` does (``bench.compare.Product``: its
own SQLite, Redis and var dir, the benchmark's model server at ``--latency``
per call), then twice: 1 run watched by 1 websocket client (``--rounds`` times,
one after another), and ``--many`` runs started at once, each watched by its own
client. A client connects as a program does (bearer subprotocol, ``?after=0``
on the URL: every change on connect, then live), and records every frame until
the task's final event. Then it reads the task's steps over the API and checks:

* every step arrived in its final state (the frame with the stored rev);
* frames came in rev order (strictly rising), no rev twice.

Push latency is the frame's arrival minus the step's recorded time (its
``finished_at``, or ``started_at`` while it runs): the write, its commit, the
push through Redis, the web process and the socket. The recorded time comes a
little before the commit, so the figure is a bound from above.

Around each phase the web process's CPU (utime + stime from ``/proc``, its
children's too: granian runs the app in a worker process) is read: per watched run
(one conversation, one message, one socket and its frames) and per frame. Then two
phases one at a time, nobody else on the product: ``--connects`` socket connects
to a finished task (connect, one ``resume`` answered, close), and ``--messages``
conversations + messages posted over the API with nobody watching: the web CPU per
socket connect and per accepted message. ``REACH_WEB_SERVER`` picks the web
server, as for ``make up``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from websockets.asyncio.client import connect

from bench.compare import (
    Product,
    log,
    pick_port,
    prepare_database,
    running,
    tree_cpu,
)
from bench.run import start_model
from reach_site.launcher import web_server

FINAL = {"succeeded", "stopped", "failed", "cancelled"}


@dataclass
class Watched:
    task: str
    #: (seq, rev, status, arrival epoch seconds, recorded epoch seconds or None)
    frames: list[tuple[int, int, str, float, float | None]] = field(
        default_factory=list
    )
    final: dict[str, Any] | None = None


def api(base: str, token: str, method: str, path: str, body: Any = None) -> Any:
    """One call of the product's JSON API on loopback (``base`` is http://)."""
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(  # noqa: S310 - our own http:// base
        base + path,
        data=data,
        method=method,
        headers={
            "Authorization": f"Bearer {token}",
            "Content-Type": "application/json",
        },
    )
    with urllib.request.urlopen(request, timeout=60) as response:  # noqa: S310
        return json.loads(response.read() or b"null")


def _epoch(value: str | None) -> float | None:
    return datetime.fromisoformat(value).timestamp() if value else None


async def watch_one(base: str, token: str, question: str) -> Watched:
    conversation = await asyncio.to_thread(
        api, base, token, "POST", "/api/conversations/", {}
    )
    answer = await asyncio.to_thread(
        api,
        base,
        token,
        "POST",
        f"/api/conversations/{conversation['id']}/messages/",
        {"content": question},
    )
    watched = Watched(task=answer["task"])
    url = base.replace("http", "ws", 1) + f"/ws/tasks/{watched.task}/?after=0"
    async with connect(url, subprotocols=["bearer", token]) as socket:  # type: ignore[list-item]
        while watched.final is None:
            message = json.loads(await asyncio.wait_for(socket.recv(), 120))
            now = time.time()
            if message.get("type") == "step":
                step = message["step"]
                recorded = _epoch(step.get("finished_at") or step.get("started_at"))
                watched.frames.append(
                    (step["seq"], step["rev"], step["status"], now, recorded)
                )
            elif message.get("type") == "task" and message["task"]["status"] in FINAL:
                watched.final = message["task"]
    return watched


def check(base: str, token: str, runs: list[Watched]) -> dict[str, Any]:
    missing = out_of_order = twice = steps = 0
    latencies: list[float] = []
    for run in runs:
        stored = api(base, token, "GET", f"/api/tasks/{run.task}/steps/?after=0")[
            "steps"
        ]
        steps += len(stored)
        seen = {(seq, rev) for seq, rev, *_ in run.frames}
        missing += sum(1 for s in stored if (s["seq"], s["rev"]) not in seen)
        revs = [rev for _, rev, *_ in run.frames]
        twice += len(revs) - len(set(revs))
        out_of_order += sum(1 for a, b in zip(revs, revs[1:], strict=False) if b <= a)
        latencies += [
            (arrived - recorded) * 1000
            for *_, arrived, recorded in run.frames
            if recorded is not None
        ]
    latencies.sort()
    return {
        "runs": len(runs),
        "steps": steps,
        "frames": sum(len(r.frames) for r in runs),
        "missing": missing,
        "out_of_order": out_of_order,
        "twice": twice,
        "unfinished": sum(1 for r in runs if r.final is None),
        "p50_ms": statistics.median(latencies) if latencies else float("nan"),
        "p95_ms": latencies[int(0.95 * (len(latencies) - 1))]
        if latencies
        else float("nan"),
        "max_ms": latencies[-1] if latencies else float("nan"),
    }


async def phase(
    base: str, token: str, runs: int, at_once: bool, question: str
) -> list[Watched]:
    if at_once:
        return list(
            await asyncio.gather(
                *(watch_one(base, token, question) for _ in range(runs))
            )
        )
    return [await watch_one(base, token, question) for _ in range(runs)]


async def connect_many(base: str, token: str, task: str, times: int) -> None:
    """Socket connects one after another to a finished ``task``: connect, ask
    for what came after its last rev (the task event comes back), close."""
    url = base.replace("http", "ws", 1) + f"/ws/tasks/{task}/"
    head = await asyncio.to_thread(api, base, token, "GET", f"/api/tasks/{task}/")
    for _ in range(times):
        async with connect(url, subprotocols=["bearer", token]) as socket:  # type: ignore[list-item]
            await socket.send(json.dumps({"type": "resume", "after": head["rev"]}))
            while json.loads(await asyncio.wait_for(socket.recv(), 60))["type"] != (
                "task"
            ):
                pass


def post_many(base: str, token: str, times: int) -> list[str]:
    """Messages accepted one after another, nobody watching; their tasks' ids."""
    tasks = []
    for _ in range(times):
        conversation = api(base, token, "POST", "/api/conversations/", {})
        answer = api(
            base,
            token,
            "POST",
            f"/api/conversations/{conversation['id']}/messages/",
            {"content": "nobody watching"},
        )
        tasks.append(answer["task"])
    return tasks


def wait_final(base: str, token: str, tasks: list[str]) -> None:
    deadline = time.monotonic() + 300
    for task in tasks:
        while api(base, token, "GET", f"/api/tasks/{task}/")["status"] not in FINAL:
            if time.monotonic() > deadline:
                raise RuntimeError(f"task {task} did not finish")
            time.sleep(0.2)


class WebCpu:
    """The web process's CPU (its children's too) over a phase, in ms."""

    def __init__(self, product: Product) -> None:
        self.pid = product.pids()["web"]
        self.start = tree_cpu(self.pid)

    def ms(self) -> float:
        return (tree_cpu(self.pid) - self.start) * 1000


def table(rows: list[tuple[str, dict[str, Any]]]) -> str:
    lines = [
        "| watchers | runs | steps | frames | missing | out of order | twice "
        "| push p50 ms | push p95 ms | max ms | web CPU ms per run / per frame |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name, r in rows:
        lines.append(
            f"| {name} | {r['runs']} | {r['steps']} | {r['frames']} | {r['missing']} "
            f"| {r['out_of_order']} | {r['twice']} | {r['p50_ms']:.1f} "
            f"| {r['p95_ms']:.1f} | {r['max_ms']:.1f} "
            f"| {r['web_ms'] / r['runs']:.1f} / {r['web_ms'] / r['frames']:.2f} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--rounds", type=int, default=10, help="runs watched one at a time"
    )
    parser.add_argument("--many", type=int, default=100, help="runs watched at once")
    parser.add_argument("--steps", type=int, default=6, help="model calls per run")
    parser.add_argument(
        "--latency", type=float, default=0.05, help="model seconds per call"
    )
    parser.add_argument(
        "--connects", type=int, default=50, help="socket connects, one at a time"
    )
    parser.add_argument(
        "--messages", type=int, default=30, help="messages posted, nobody watching"
    )
    parser.add_argument("--port", type=int, default=8230)
    args = parser.parse_args(argv)

    scratch = Path(tempfile.mkdtemp(prefix="reach-watch-"))
    token = prepare_database(scratch)
    env = dict(os.environ)
    model, model_url = start_model(
        env, "--steps", str(args.steps), "--latency", str(args.latency)
    )
    port = pick_port(args.port, 1)
    product = Product(scratch, port, model_url, scratch / "product.log")
    rows: list[tuple[str, dict[str, Any]]] = []
    per: dict[str, float] = {}
    try:
        with running(product):
            base = product.url
            warm = asyncio.run(phase(base, token, 2, False, "warm up"))
            cpu = WebCpu(product)
            one = asyncio.run(phase(base, token, args.rounds, False, "one watcher"))
            web_ms = cpu.ms()
            rows.append(
                (
                    f"1 (x{args.rounds}, one after another)",
                    {**check(base, token, one), "web_ms": web_ms},
                )
            )
            cpu = WebCpu(product)
            many = asyncio.run(phase(base, token, args.many, True, "many watchers"))
            web_ms = cpu.ms()
            rows.append(
                (f"{args.many} at once", {**check(base, token, many), "web_ms": web_ms})
            )
            if args.connects:
                cpu = WebCpu(product)
                asyncio.run(connect_many(base, token, warm[0].task, args.connects))
                per["socket connect"] = cpu.ms() / args.connects
            if args.messages:
                cpu = WebCpu(product)
                tasks = post_many(base, token, args.messages)
                per["accepted message"] = cpu.ms() / args.messages
                wait_final(base, token, tasks)
    finally:
        model.stop()
    text = (
        f"Web server {web_server(os.environ)} (`REACH_WEB_SERVER`). Model latency "
        f"{args.latency * 1000:g} ms per call, {args.steps} calls per run.\n\n"
        + table(rows)
    )
    if per:
        text += "\n\nWeb CPU, one at a time: " + ", ".join(
            f"{ms:.2f} ms per {what}" for what, ms in per.items()
        )
        text += (
            f" ({args.connects} connects to a finished task, each answering one "
            f"resume; {args.messages} conversations + messages posted over the API, "
            "nobody watching)."
        )
    print()
    print(text)
    bad = sum(
        r["missing"] + r["out_of_order"] + r["twice"] + r["unfinished"] for _, r in rows
    )
    log("every step arrived once, in order" if not bad else f"{bad} problems")
    summary = {"server": web_server(os.environ), "rows": dict(rows), "per": per}
    print("SUMMARY " + json.dumps(summary))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
