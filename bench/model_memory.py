"""The built-in model server's memory over a run of requests.

Starts ``python -m localmodel.server`` on the installed weights, sends ``--requests``
chat completions that each differ after a shared system prompt and tool list (as
the product's runs do), and prints the server's resident memory after each: it
should level off at about the weights plus the prompt cache's capacity
(``localmodel/server.py``), not grow with every request.

``python -m bench.model_memory [--requests 10] [--model PATH]``
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": name,
            "description": f"The {name} tool: {name} for the project notes.",
            "parameters": {
                "type": "object",
                "properties": {"text": {"type": "string", "description": name}},
                "required": ["text"],
            },
        },
    }
    for name in ("calculate", "search_notes", "create_ticket", "send_email")
]
SYSTEM = "You are a helpful assistant for project notes. " * 20


def rss_mb(pid: int) -> float:
    status = Path(f"/proc/{pid}/status").read_text()
    return int(status.split("VmRSS:")[1].split()[0]) / 1024


def ask(url: str, number: int) -> int:
    question = f"Question {number}: what is {number} + {number * 7}?"
    body = {
        "model": "local",
        "messages": [
            {"role": "system", "content": SYSTEM},
            {"role": "user", "content": question},
        ],
        "tools": TOOLS,
        "max_tokens": 16,
        "temperature": 0,
    }
    request = urllib.request.Request(  # noqa: S310 - the loopback server above
        url + "/chat/completions",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=300) as response:  # noqa: S310
        return int(json.loads(response.read())["usage"]["prompt_tokens"])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.model_memory")
    parser.add_argument("--requests", type=int, default=10)
    parser.add_argument(
        "--model",
        type=Path,
        default=ROOT / "var/models/qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
    )
    options = parser.parse_args(argv)
    server = subprocess.Popen(
        [sys.executable, "-m", "localmodel.server", "--model", str(options.model)],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        cwd=ROOT,
    )
    try:
        assert server.stdout is not None
        url = next(
            line.split()[1] for line in server.stdout if line.startswith("READY")
        )
        print(f"ready: {rss_mb(server.pid):.0f} MB resident")
        for number in range(options.requests):
            tokens = ask(url, number)
            print(
                f"request {number + 1}: {tokens} prompt tokens, "
                f"{rss_mb(server.pid):.0f} MB resident",
                flush=True,
            )
    finally:
        server.terminate()
        server.wait(timeout=30)
    return 0


if __name__ == "__main__":
    sys.exit(main())
