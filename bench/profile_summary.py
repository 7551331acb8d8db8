"""Summarise a py-spy ``--format raw`` recording of the worker: where its CPU goes.

``python -m bench.profile_summary var/bench/<stamp>/worker.pyspy.txt [--steps N]
[--cpu-s S] [--rate HZ] [--top 15]``

py-spy samples ``rate`` times a second (with ``--gil``, as ``make bench-profile``
records, only the thread holding the GIL: py-spy's idle detection counts waiting
threads as busy on this machine); one line of the raw
(collapsed) file is ``frame;frame;...;leaf COUNT`` with frames outermost first,
each ``function (path:line)``. Reported:

* the top functions by cumulative (inclusive) samples, as a share of all samples and
  as CPU ms per step (the share of the worker's measured CPU per step);
* the samples by area: each sample is charged to the innermost frame that belongs
  to a known area (the product's modules and the libraries: openai SDK, httpx,
  Celery/kombu, redis-py, Django ORM ...; the standard library only when no such
  frame is on the stack), so ``json.dumps`` called from the journal counts as the
  journal's, and SQL that the ORM runs for the journal as the ORM's.
"""

from __future__ import annotations

import argparse
import re
from collections import Counter
from pathlib import Path

FRAME = re.compile(r"^(?P<func>.*?) \((?P<path>.*?)(?::(?P<line>\d+))?\)$")

#: (area, path fragment), innermost match wins; tried in this order per frame.
AREAS: list[tuple[str, str]] = [
    ("product: runs/ claim, journal, step writes, finish", "runs/services.py"),
    ("product: runs/ claim, journal, step writes, finish", "runs/leases.py"),
    ("product: runs/ claim, journal, step writes, finish", "runs/journal.py"),
    ("product: runs/ claim, journal, step writes, finish", "runs/steps.py"),
    ("product: runs/ claim, journal, step writes, finish", "runs/sql.py"),
    ("product: runs/ claim, journal, step writes, finish", "runs/finish.py"),
    ("product: runs/events.py (pushes)", "runs/events.py"),
    ("product: runs/tasks.py (Celery tasks, the driver)", "runs/tasks.py"),
    ("product: runs/payloads.py", "runs/payloads.py"),
    ("product: runs/ other", "/runs/"),
    ("product: engine/loop.py", "engine/loop.py"),
    ("product: engine/model_client.py", "engine/model_client.py"),
    ("product: engine/redaction.py", "engine/redaction.py"),
    ("product: engine/ other", "/engine/"),
    ("product: infra/push.py", "infra/push.py"),
    ("product: infra/ other", "/infra/"),
    ("product: registry/", "/registry/"),
    ("product: effects/", "/effects/"),
    ("product: approvals/", "/approvals/"),
    ("product: audit/", "/audit/"),
    ("product: traces/", "/traces/"),
    ("product: reach_site/", "/reach_site/"),
    ("openai SDK", "/openai/"),
    ("pydantic", "/pydantic"),
    ("httpx / httpcore / h11 / anyio", "/httpx"),
    ("httpx / httpcore / h11 / anyio", "/httpcore/"),
    ("httpx / httpcore / h11 / anyio", "/h11/"),
    ("httpx / httpcore / h11 / anyio", "/anyio/"),
    ("Celery / kombu / billiard / vine", "/celery/"),
    ("Celery / kombu / billiard / vine", "/kombu/"),
    ("Celery / kombu / billiard / vine", "/billiard/"),
    ("Celery / kombu / billiard / vine", "/vine/"),
    ("redis-py", "/redis/"),
    ("channels / channels_redis / asgiref", "/channels"),
    ("channels / channels_redis / asgiref", "/asgiref/"),
    ("Django db backend (SQL execution, sqlite3)", "django/db/backends/"),
    ("Django ORM (db/models)", "django/db/"),
    ("Django other", "/django/"),
]
#: Consulted only when no frame of the sample is in one of the areas above.
STDLIB_AREAS: list[tuple[str, str]] = [
    ("sqlite3 (stdlib driver)", "sqlite3/"),
    ("logging (stdlib)", "logging/"),
    ("json (stdlib)", "json/"),
    ("ssl / socket / selectors (stdlib)", "socket.py"),
    ("ssl / socket / selectors (stdlib)", "selectors.py"),
    ("threading (stdlib)", "threading.py"),
]


#: Stacks through these functions are one-time or per-connection costs, not per-step
#: ones: left out of the shares and reported apart.
EXCLUDED = {
    "_find_and_load": "imports (lazy, once per process)",
    "pbkdf2": "password hashing (the driver's login, once per child)",
}

PLUMBING = {
    "Thread.run",
    "Thread._bootstrap",
    "Thread._bootstrap_inner",
    "_worker",
    "_WorkItem.run",
}


def parse(path: Path) -> list[tuple[list[tuple[str, str]], int]]:
    stacks = []
    for line in path.read_text(errors="replace").splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        frames = []
        for raw in stack.split(";"):
            if raw.startswith(("thread (", "process ")):  # --threads / --subprocesses
                continue
            match = FRAME.match(raw.strip())
            if match:
                frames.append((match["func"], match["path"]))
            else:
                frames.append((raw.strip(), ""))
        stacks.append((frames, int(count)))
    return stacks


def short(path: str) -> str:
    for marker in ("site-packages/", "/lib/python3.11/", "/work/main/"):
        if marker in path:
            return path.split(marker, 1)[1]
    return path


PRODUCT = (
    "runs/",
    "engine/",
    "infra/",
    "registry/",
    "effects/",
    "approvals/",
    "audit/",
    "traces/",
    "reach_site/",
    "agents/",
    "localmodel/",
)


def owner_of(frames: list[tuple[str, str]]) -> tuple[str, str]:
    """The innermost product function on the stack and its file; for a sample with
    no product frame, its area and the thread's role (Celery's consumer, the event
    loop...) in their place."""
    for func, path in reversed(frames):
        rel = path.split("/work/main/", 1)[-1]
        if rel.startswith(PRODUCT):
            return func, rel
    funcs = {func for func, _ in frames}
    if funcs & {"Consumer.start", "Blueprint.start"}:
        role = "Celery consumer (main thread: delivery, acks, kombu + redis-py)"
    elif "apply_target" in funcs:
        role = "Celery task tracing around the task (pool thread)"
    elif "BaseEventLoop.run_forever" in funcs:
        role = "asyncio event loop thread (pushes, channels_redis, the web server)"
    else:
        role = "other threads"
    return f"(no product frame: {area_of(frames)})", f"({role})"


def area_of(frames: list[tuple[str, str]]) -> str:
    for areas in (AREAS, STDLIB_AREAS):
        for _, path in reversed(frames):
            # py-spy prints paths short ("kombu/utils/eventio.py"): anchor them.
            anchored = path if path.startswith("/") else "/" + path
            for area, fragment in areas:
                if fragment in anchored:
                    return area
    leaf = frames[-1][1] if frames else ""
    return f"other ({short(leaf) or '?'})"


def summarise_profile(
    path: Path,
    rate: float,
    steps: int = 0,
    cpu_s: float = 0.0,
    top: int = 15,
    title: str = "The worker",
    recorded_cpu_s: float = 0.0,
    mode: str = "--gil",
) -> str:
    excluded: Counter[str] = Counter()
    stacks = []
    for frames, count in parse(path):
        why = next((EXCLUDED[f] for f, _ in frames if f in EXCLUDED), None)
        if why:
            excluded[why] += count
        else:
            stacks.append((frames, count))
    total = sum(count for _, count in stacks)
    if not total:
        return f"## {title}: profile\n\nNo samples in {path}.\n"
    inclusive: Counter[tuple[str, str]] = Counter()
    self_: Counter[tuple[str, str]] = Counter()
    areas: Counter[str] = Counter()
    owners: Counter[tuple[str, str]] = Counter()
    for frames, count in stacks:
        owners[owner_of(frames)] += count
        for key in {(func, short(p)) for func, p in frames}:
            inclusive[key] += count
        self_[(frames[-1][0], short(frames[-1][1]))] += count
        areas[area_of(frames)] += count
    sampled_s = total / rate
    per_step = 1000 * cpu_s / steps if steps and cpu_s else 0.0

    def ms(count: int) -> str:
        return f"{per_step * count / total:.2f}" if per_step else "n/a"

    all_samples = total + sum(excluded.values())
    coverage = ""
    if recorded_cpu_s > 0:
        coverage = (
            f" The process used {recorded_cpu_s:.1f} s CPU while it was recorded "
            f"(/proc): the samples ({all_samples / rate:.1f} s) cover "
            f"{100 * all_samples / rate / recorded_cpu_s:.0f} % of it."
        )
    if excluded:
        coverage += " Left out: " + "; ".join(
            f"{why} {100 * n / all_samples:.1f} %" for why, n in excluded.items()
        )
        coverage += "."
    lines = [
        f"## {title}: where its CPU goes (py-spy {mode})",
        "",
        f"{total} samples at {rate:g} Hz = {sampled_s:.1f} s.{coverage} "
        + (
            f"In the timed windows it used {cpu_s:.1f} s CPU over {steps} steps = "
            f"{per_step:.2f} ms/step, shared out below by sample counts."
            if per_step
            else ""
        ),
        "",
        "### By area (each sample charged to its innermost known frame)",
        "",
        "| area | share | CPU ms/step |",
        "|---|---|---|",
    ]
    small = 0
    for area, count in areas.most_common():
        if count < 0.005 * total:
            small += count
            continue
        lines.append(f"| {area} | {100 * count / total:.1f} % | {ms(count)} |")
    if small:
        lines.append(
            f"| the rest (< 0.5 % each) | {100 * small / total:.1f} % | {ms(small)} |"
        )
    files: Counter[str] = Counter()
    for (func, file), count in owners.items():
        files[
            file if func != "(no product frame)" else f"(no product frame) {file}"
        ] += count
    lines += [
        "",
        "### By product file (innermost product frame; what it calls included)",
        "",
        "| file | share | CPU ms/step |",
        "|---|---|---|",
    ]
    for file, count in files.most_common():
        if count >= 0.005 * total:
            lines.append(f"| {file} | {100 * count / total:.1f} % | {ms(count)} |")
    lines += [
        "",
        "### By product function (each sample charged to the innermost product "
        "frame on its stack, with the library and SQL work it called)",
        "",
        "| product function | file | share | CPU ms/step |",
        "|---|---|---|---|",
    ]
    for (func, file), count in owners.most_common(top + 5):
        lines.append(
            f"| `{func}` | {file} | {100 * count / total:.1f} % | {ms(count)} |"
        )
    lines += [
        "",
        f"### Top {top} functions by cumulative samples",
        "",
        "| function | file | cumulative | CPU ms/step | self |",
        "|---|---|---|---|---|",
    ]
    # Skip the thread plumbing that nearly every sample shares.
    ranked = [
        (key, count) for key, count in inclusive.most_common() if key[0] not in PLUMBING
    ]
    for (func, file), count in ranked[:top]:
        lines.append(
            f"| `{func}` | {file} | {100 * count / total:.1f} % | {ms(count)} | "
            f"{100 * self_[(func, file)] / total:.1f} % |"
        )
    lines += [
        "",
        f"### Top {top} functions by self samples",
        "",
        "| function | file | self | CPU ms/step |",
        "|---|---|---|---|",
    ]
    for (func, file), count in self_.most_common(top):
        lines.append(
            f"| `{func}` | {file} | {100 * count / total:.1f} % | {ms(count)} |"
        )
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("path", type=Path)
    parser.add_argument("--rate", type=float, default=200)
    parser.add_argument("--steps", type=int, default=0)
    parser.add_argument("--cpu-s", type=float, default=0.0)
    parser.add_argument("--top", type=int, default=15)
    parser.add_argument("--title", default="The worker")
    parser.add_argument("--recorded-cpu-s", type=float, default=0.0)
    parser.add_argument("--mode", default="--gil", help="the py-spy options used")
    args = parser.parse_args()
    print(
        summarise_profile(
            args.path,
            args.rate,
            args.steps,
            args.cpu_s,
            args.top,
            args.title,
            args.recorded_cpu_s,
            args.mode,
        )
    )


if __name__ == "__main__":
    main()
