"""One agent task (S tool steps, then a final answer) on several agent frameworks.

Each peer gives `run()` (sync entry point, what a Celery task would call) and
`arun()` (async entry point). A child process measures one peer, so imports
and peak RSS stay per framework; run_bench.py drives the children.

  python peers.py seq  --peer raw --base-url http://127.0.0.1:8901/v1 --k 30 --api sync
  python peers.py conc --peer raw --base-url http://127.0.0.1:8902/v1 --n 50 --mode async
Each prints one JSON line on stdout.
"""
import argparse
import ast
import asyncio
import atexit
import http.cookiejar
import json
import operator
import os
import re
import resource
import shutil
import sqlite3
import statistics
import sys
import tempfile
import time
import urllib.parse
import urllib.request
import uuid
import warnings
from concurrent.futures import ThreadPoolExecutor

T_START = time.perf_counter()
MODEL = "fake-model"
KEY = "sk-fake"
SYSTEM = "You are a careful calculator agent. Use the calculate tool for every arithmetic step."
QUESTION = "Run the calculation chain and tell me the last result."

_OPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
        ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod, ast.Pow: operator.pow,
        ast.USub: operator.neg, ast.UAdd: operator.pos}


def calculate(expression: str) -> str:
    """Evaluate an arithmetic expression with + - * / // % ** and parentheses."""
    def ev(node):
        if isinstance(node, ast.Constant) and type(node.value) in (int, float):
            return node.value
        if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
            if isinstance(node.op, ast.Pow) and abs(ev(node.right)) > 64:
                raise ValueError("exponent too large")
            return _OPS[type(node.op)](ev(node.left), ev(node.right))
        if isinstance(node, ast.UnaryOp) and type(node.op) in _OPS:
            return _OPS[type(node.op)](ev(node.operand))
        raise ValueError(f"unsupported expression: {ast.dump(node)[:60]}")
    return str(ev(ast.parse(expression, mode="eval").body))


def check(answer: str, steps: int) -> None:
    want = f"Done after {steps} tool calls. Last result: {steps * 7 + 1}"
    # The platform's calculate answers {"expression": ..., "result": N}: the same result, structured.
    structured = f'Done after {steps} tool calls. Last result: {{"expression": "{steps}*7+1", "result": {steps * 7 + 1}}}'
    if not isinstance(answer, str) or (want not in answer and structured not in answer):
        raise RuntimeError(f"unexpected final answer {answer!r}, wanted {want!r}")


# ---------------------------------------------------------------- peers
class Raw:
    """The floor: a hand-written loop over the openai SDK."""
    TOOLS = [{"type": "function", "function": {
        "name": "calculate", "description": calculate.__doc__,
        "parameters": {"type": "object", "properties": {"expression": {"type": "string"}},
                       "required": ["expression"]}}}]

    def __init__(self, base_url, steps):
        from openai import AsyncOpenAI, OpenAI
        self.steps = steps
        self.client = OpenAI(base_url=base_url, api_key=KEY)
        self.aclient = AsyncOpenAI(base_url=base_url, api_key=KEY)

    def _start(self):
        return [{"role": "system", "content": SYSTEM}, {"role": "user", "content": QUESTION}]

    @staticmethod
    def _apply(msg, messages):
        """Append the assistant turn and tool results; return True when the loop should go on."""
        if not msg.tool_calls:
            return False
        messages.append({"role": "assistant", "content": msg.content,
                         "tool_calls": [tc.model_dump() for tc in msg.tool_calls]})
        for tc in msg.tool_calls:
            out = calculate(**json.loads(tc.function.arguments))
            messages.append({"role": "tool", "tool_call_id": tc.id, "content": out})
        return True

    def run(self):
        messages = self._start()
        for _ in range(self.steps + 5):
            msg = self.client.chat.completions.create(model=MODEL, messages=messages, tools=self.TOOLS).choices[0].message
            if not self._apply(msg, messages):
                return msg.content
        raise RuntimeError("too many turns")

    async def arun(self):
        messages = self._start()
        for _ in range(self.steps + 5):
            r = await self.aclient.chat.completions.create(model=MODEL, messages=messages, tools=self.TOOLS)
            msg = r.choices[0].message
            if not self._apply(msg, messages):
                return msg.content
        raise RuntimeError("too many turns")


class OpenAIAgents:
    """OpenAI Agents SDK with a chat-completions model on the local server, tracing off."""
    def __init__(self, base_url, steps):
        from agents import Agent, OpenAIChatCompletionsModel, Runner, function_tool, set_tracing_disabled
        from openai import AsyncOpenAI
        set_tracing_disabled(True)
        self.Runner, self.max_turns = Runner, steps + 5
        model = OpenAIChatCompletionsModel(model=MODEL, openai_client=AsyncOpenAI(base_url=base_url, api_key=KEY))
        self.agent = Agent(name="calc", instructions=SYSTEM, tools=[function_tool(calculate)], model=model)

    def run(self):
        return self.Runner.run_sync(self.agent, QUESTION, max_turns=self.max_turns).final_output

    async def arun(self):
        return (await self.Runner.run(self.agent, QUESTION, max_turns=self.max_turns)).final_output


class LangGraph:
    """LangGraph ReAct agent + ChatOpenAI; checkpointer: None, 'memory' or 'sqlite' (file).

    factory 'prebuilt': langgraph.prebuilt.create_react_agent (deprecated in LangGraph 1.0);
    'langchain': langchain.agents.create_agent, its replacement (also a LangGraph graph).
    """
    def __init__(self, base_url, steps, checkpointer=None, factory="prebuilt"):
        from langchain_core.tools import tool
        from langchain_openai import ChatOpenAI
        if factory == "prebuilt":
            from langgraph.prebuilt import create_react_agent
            warnings.filterwarnings("ignore", message=".*create_react_agent has been moved")
            self.create = lambda llm, tools, cp: create_react_agent(llm, tools, prompt=SYSTEM, checkpointer=cp)
        else:
            from langchain.agents import create_agent
            self.create = lambda llm, tools, cp: create_agent(llm, tools, system_prompt=SYSTEM, checkpointer=cp)
        self.kind, self.steps = checkpointer, steps
        self.llm = ChatOpenAI(model=MODEL, base_url=base_url, api_key=KEY)
        self.tools = [tool(calculate)]
        tmp = tempfile.mkdtemp(prefix="bench-lg-")
        atexit.register(shutil.rmtree, tmp, ignore_errors=True)
        self.db = os.path.join(tmp, "checkpoints.sqlite")
        self.graph = self.agraph = self.aconn = None

    def _saver(self):
        if self.kind == "memory":
            from langgraph.checkpoint.memory import InMemorySaver
            return InMemorySaver()
        if self.kind == "sqlite":
            from langgraph.checkpoint.sqlite import SqliteSaver
            return SqliteSaver(sqlite3.connect(self.db, check_same_thread=False))
        return None

    def _cfg(self):
        return {"configurable": {"thread_id": uuid.uuid4().hex}, "recursion_limit": 2 * self.steps + 5}

    def _input(self):
        return {"messages": [{"role": "user", "content": QUESTION}]}

    def run(self):
        if self.graph is None:
            self.graph = self.create(self.llm, self.tools, self._saver())
        return self.graph.invoke(self._input(), self._cfg())["messages"][-1].content

    async def arun(self):
        if self.agraph is None:
            if self.kind == "sqlite":  # the async graph needs the async saver
                import aiosqlite
                from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver
                self.aconn = await aiosqlite.connect(self.db)
                saver = AsyncSqliteSaver(self.aconn)
            else:
                saver = self._saver()
            self.agraph = self.create(self.llm, self.tools, saver)
        return (await self.agraph.ainvoke(self._input(), self._cfg()))["messages"][-1].content

    async def aclose(self):
        if self.aconn is not None:  # aiosqlite's worker thread is not a daemon: close it or exit hangs
            await self.aconn.close()


class PydanticAI:
    """pydantic-ai Agent with OpenAIChatModel (chat completions) on the local server."""
    def __init__(self, base_url, steps):
        from pydantic_ai import Agent
        from pydantic_ai.models.openai import OpenAIChatModel
        from pydantic_ai.providers.openai import OpenAIProvider
        from pydantic_ai.usage import UsageLimits
        model = OpenAIChatModel(MODEL, provider=OpenAIProvider(base_url=base_url, api_key=KEY))
        self.agent = Agent(model, system_prompt=SYSTEM, tools=[calculate])
        self.limits = UsageLimits(request_limit=steps + 5)

    def run(self):
        return self.agent.run_sync(QUESTION, usage_limits=self.limits).output

    async def arun(self):
        return (await self.agent.run(QUESTION, usage_limits=self.limits)).output


class Platform:
    """Agent Reach itself, over its public HTTP API (docs/api.md), as a client sees it.

    The product must already run with OPENAI_BASE_URL pointing at the fake server this run
    uses, and OPENAI_MODEL=fake-model. PLATFORM_URL (default http://127.0.0.1:8000) and
    PLATFORM_TOKEN (from `manage.py issue_token alice`) say where and as whom. Time counts
    from the message POST to the final answer seen through the task API (polled every 2 ms):
    the whole platform path — HTTP, Celery dispatch, persisted steps, pushes — per task.
    """
    def __init__(self, base_url, steps):
        self.url = os.environ.get("PLATFORM_URL", "http://127.0.0.1:8000").rstrip("/")
        self.headers = {"authorization": "Bearer " + os.environ["PLATFORM_TOKEN"],
                        "content-type": "application/json"}
        self._open = urllib.request.urlopen
        self._req = urllib.request.Request

    def _call(self, method, path, body=None):
        data = None if body is None else json.dumps(body).encode()
        with self._open(self._req(self.url + path, data=data, method=method, headers=self.headers),
                        timeout=60) as r:
            return json.loads(r.read())

    def run(self):
        # A new conversation per task, like the other peers' fresh runs (no growing history;
        # concurrent tasks never share a conversation). Its POST counts as platform time.
        conv = self._call("POST", "/api/conversations/", {})["id"]
        task = self._call("POST", f"/api/conversations/{conv}/messages/", {"content": QUESTION})["task"]
        while True:
            t = self._call("GET", f"/api/tasks/{task}/")
            if t["status"] in ("succeeded", "stopped", "failed", "cancelled"):
                return t.get("final_answer") or f"status {t['status']} / {t.get('stop_reason')}"
            time.sleep(0.002)

    async def arun(self):
        # Not asyncio.to_thread: its default pool has cpu+4 threads and would cap concurrency.
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(_PLATFORM_POOL, self.run)


_PLATFORM_POOL = __import__('concurrent.futures').futures.ThreadPoolExecutor(max_workers=256)


class PlatformWS(Platform):
    """The platform as its own chat page uses it: POST the message, then wait on the task's
    websocket for the final task event (no polling load on the web process)."""
    def __init__(self, base_url, steps):
        super().__init__(base_url, steps)
        jar = http.cookiejar.CookieJar()
        opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(jar))
        page = opener.open(self.url + "/accounts/login/").read().decode()
        csrf = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page).group(1)
        body = urllib.parse.urlencode({"username": os.environ.get("PLATFORM_USER", "alice"),
                                       "password": os.environ["PLATFORM_PASSWORD"],
                                       "csrfmiddlewaretoken": csrf}).encode()
        opener.open(urllib.request.Request(self.url + "/accounts/login/", data=body,
                                           headers={"Referer": self.url + "/accounts/login/"}))
        self.cookie = "; ".join(f"{c.name}={c.value}" for c in jar)
        assert "sessionid=" in self.cookie, "login failed"

    def run(self):
        from websockets.sync.client import connect
        conv = self._call("POST", "/api/conversations/", {})["id"]
        task = self._call("POST", f"/api/conversations/{conv}/messages/", {"content": QUESTION})["task"]
        ws_url = self.url.replace("http", "ws", 1) + f"/ws/tasks/{task}/"
        with connect(ws_url, additional_headers={"Cookie": self.cookie, "Origin": self.url}) as ws:
            t = self._call("GET", f"/api/tasks/{task}/")  # it may have finished before we joined
            while t["status"] not in ("succeeded", "stopped", "failed", "cancelled"):
                msg = json.loads(ws.recv(timeout=60))
                if msg.get("type") == "task":
                    t = msg["task"]
        return t.get("final_answer") or f"status {t['status']} / {t.get('stop_reason')}"


# Peers whose sync entry point is natively sync (safe to call from many threads at once,
# as a Celery thread pool would). openai-agents and pydantic-ai run_sync wrap asyncio
# around one shared AsyncOpenAI client, which breaks across threads' event loops.
THREAD_SAFE_SYNC = {"raw", "platform", "platform-ws", "langgraph", "langgraph-mem", "langgraph-sqlite", "langchain-agent", "langchain-agent-sqlite"}

PEERS = {
    "raw": Raw,
    "openai-agents": OpenAIAgents,
    "langgraph": LangGraph,
    "langgraph-mem": lambda u, s: LangGraph(u, s, "memory"),
    "langgraph-sqlite": lambda u, s: LangGraph(u, s, "sqlite"),
    "langchain-agent": lambda u, s: LangGraph(u, s, None, "langchain"),
    "langchain-agent-sqlite": lambda u, s: LangGraph(u, s, "sqlite", "langchain"),
    "pydantic-ai": PydanticAI,
    "platform": Platform,
    "platform-ws": PlatformWS,
}


# ---------------------------------------------------------------- the platform's own CPU
# (Added for the product's `make bench`.) BENCH_PLATFORM_PIDFILE names the product launcher's
# `up.pids` ({"launcher": pid, "children": {name: pid}}). Around the timed tasks, the CPU time
# (utime + stime of all threads, from /proc/<pid>/stat) of each of those processes and its
# descendants (the web server's worker process, if it has one) is read, so
# the report can give the worker's and the web process's CPU per step. A process restarted in
# the window gives no figure. Without the variable nothing is read.
_TICK = os.sysconf("SC_CLK_TCK")


def _platform_pids():
    path = os.environ.get("BENCH_PLATFORM_PIDFILE")
    if not path:
        return {}
    try:
        with open(path) as f:
            data = json.load(f)
    except (OSError, ValueError):
        return {}
    pids = dict(data.get("children") or {})
    pids["launcher"] = data.get("launcher")
    return {k: v for k, v in pids.items() if isinstance(v, int)}


def _proc_stats():
    """{pid: (ppid, CPU seconds)} of every process (utime + stime, all threads)."""
    out = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        out[int(entry)] = (int(fields[1]), (int(fields[11]) + int(fields[12])) / _TICK)
    return out


def _tree_cpu(pid, stats, others=()):
    """CPU seconds of `pid` and its live descendants but `others` and theirs (a server
    that runs its app in a worker process, granian's, counts with it; the launcher
    without its children), None when `pid` is gone."""
    if pid not in stats:
        return None
    total, todo = 0.0, [pid]
    while todo:
        current = todo.pop()
        total += stats[current][1]
        todo += [p for p, (ppid, _) in stats.items() if ppid == current and p not in others]
    return total


def platform_snapshot():
    """{name: (pid, CPU seconds)} of the platform's processes (empty without the pid file)."""
    out = {}
    pids = _platform_pids()
    stats = _proc_stats() if pids else {}
    for name, pid in pids.items():
        cpu = _tree_cpu(pid, stats, set(pids.values()))
        if cpu is not None:
            out[name] = (pid, cpu)
    out["_t"] = (0, time.perf_counter())
    return out


def platform_delta(before) -> dict:
    """JSON fields for the window since `before`: CPU seconds per process, window seconds."""
    if len(before) <= 1:
        return {}
    after = platform_snapshot()
    cpu = {name: round(after[name][1] - b[1], 3) for name, b in before.items()
           if name != "_t" and name in after and after[name][0] == b[0]}
    return {"platform_cpu_s": cpu, "window_s": after["_t"][1] - before["_t"][1]}


# ---------------------------------------------------------------- measurement
def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: KiB


async def aclose(peer) -> None:
    if hasattr(peer, "aclose"):
        await peer.aclose()


def seq(peer, steps, k, warmup, api) -> dict:
    """Warm-up, then k tasks one after another; wall and client-CPU time per task."""
    loop = asyncio.new_event_loop() if api == "async" else None  # one loop: client pools stay valid
    call = peer.run if api == "sync" else (lambda: loop.run_until_complete(peer.arun()))
    wall, cpu = [], []
    t0 = time.perf_counter()
    check(call(), steps)
    first = time.perf_counter() - t0
    snapshot = None
    for i in range(warmup + k):
        if i == warmup:
            snapshot = platform_snapshot()
        t0, c0 = time.perf_counter(), time.process_time()
        check(call(), steps)
        if i >= warmup:
            wall.append(time.perf_counter() - t0)
            cpu.append(time.process_time() - c0)
    platform = platform_delta(snapshot) if snapshot else {}
    if loop is not None:
        loop.run_until_complete(aclose(peer))
        loop.close()
    return {"first_task_s": first, "wall_s": wall, "cpu_s": cpu,
            "median_task_ms": 1000 * statistics.median(wall), "timed_tasks": k, **platform}


def conc(peer, steps, n, mode) -> dict:
    """n tasks at once; total wall time (after 1 task alone, then 2 at once, as warm-up)."""
    if mode == "async":
        async def main():
            await peer.arun()  # alone first: lazy one-time setup must not race
            await asyncio.gather(*(peer.arun() for _ in range(2)))
            snapshot = platform_snapshot()
            t0 = time.perf_counter()
            outs = await asyncio.gather(*(peer.arun() for _ in range(n)))
            total_ = time.perf_counter() - t0
            platform_ = platform_delta(snapshot)
            await aclose(peer)
            return total_, outs, platform_
        total, outs, platform = asyncio.run(main())
    else:
        with ThreadPoolExecutor(max_workers=n) as pool:
            peer.run()
            list(pool.map(lambda _: peer.run(), range(2)))
            snapshot = platform_snapshot()
            t0 = time.perf_counter()
            outs = list(pool.map(lambda _: peer.run(), range(n)))
            total = time.perf_counter() - t0
            platform = platform_delta(snapshot)
    for o in outs:
        check(o, steps)
    return {"total_s": total, "timed_tasks": n, **platform}


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("what", choices=["seq", "conc", "once"])
    p.add_argument("--peer", required=True, choices=sorted(PEERS))
    p.add_argument("--base-url", default="http://127.0.0.1:8901/v1")
    p.add_argument("--steps", type=int, default=int(os.environ.get("FAKE_STEPS", "5")))
    p.add_argument("--k", type=int, default=30)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--api", choices=["sync", "async"], default="sync")
    p.add_argument("--n", type=int, default=50)
    p.add_argument("--mode", choices=["async", "threads"], default="async")
    a = p.parse_args()
    if a.what == "conc" and a.mode == "threads" and a.peer not in THREAD_SAFE_SYNC:
        p.error(f"{a.peer} has no thread-safe sync entry point; use --mode async")
    peer = PEERS[a.peer](a.base_url, a.steps)
    import_s = time.perf_counter() - T_START  # interpreter start excluded; imports + construction
    if a.what == "once":
        print(peer.run())
        return
    out = seq(peer, a.steps, a.k, a.warmup, a.api) if a.what == "seq" else conc(peer, a.steps, a.n, a.mode)
    out.update(peer=a.peer, what=a.what, steps=a.steps, import_s=import_s, peak_rss_mb=peak_rss_mb(),
               **({"api": a.api} if a.what == "seq" else {"mode": a.mode, "n": a.n}))
    json.dump(out, sys.stdout)
    print()


if __name__ == "__main__":
    main()
