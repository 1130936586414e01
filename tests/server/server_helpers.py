"""Helpers the server tests share (imported as ``server_helpers``): the server subprocess,
its settings, and polling for an idle pool."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx

API_KEY = "test-key"
MAX_MODEL_LEN = 128
MAX_REQUEST_BYTES = 64 * 1024


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class ServerProcess:
    """``python -m hinge.cli serve MODEL ...`` with its log in a file; ``stop()`` sends SIGTERM."""

    def __init__(self, model: Path, log_dir: Path, *extra: str, api_key: str | None = API_KEY):
        self.port = free_port()
        self.base_url = f"http://127.0.0.1:{self.port}"
        self.api_key = api_key
        self.log_path = log_dir / f"server-{self.port}.log"
        cmd = [sys.executable, "-m", "hinge.cli", "serve", str(model), "--port", str(self.port),
               "--deterministic", "--kv-cache-bytes", "32MiB", "--cache", "none",
               "--max-model-len", str(MAX_MODEL_LEN),
               "--max-request-bytes", str(MAX_REQUEST_BYTES), *extra]
        if api_key:
            cmd += ["--api-key", api_key]
        env = {**os.environ, "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}
        self._log = open(self.log_path, "wb")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(cmd, stdout=self._log, stderr=subprocess.STDOUT, env=env)
        self._wait_healthy(timeout=90)

    @property
    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}

    def client(self, **kwargs) -> httpx.Client:
        return httpx.Client(base_url=self.base_url, headers=self.headers, timeout=60, **kwargs)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def _wait_healthy(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"server exited with {self.proc.returncode}:\n{self.log()}")
            try:
                if httpx.get(self.base_url + "/health", timeout=1).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        self.stop()
        raise RuntimeError(f"server not healthy after {timeout}s:\n{self.log()}")

    def stop(self, timeout: float = 30) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._log.close()
        return self.proc.returncode


def kv_pages_used(server: Any) -> int:
    with server.client() as c:
        return c.get("/server_info").json()["stats"]["kv_pages_used"]


def wait_until_idle(server: Any, timeout: float = 20) -> dict:
    """Poll /server_info until no request runs or waits and no KV page is allocated."""
    deadline = time.monotonic() + timeout
    stats = {}
    with server.client() as c:
        while time.monotonic() < deadline:
            stats = c.get("/server_info").json()["stats"]
            if stats["kv_pages_used"] == 0 and stats["num_running"] == 0 \
                    and stats["num_waiting"] == 0:
                return stats
            time.sleep(0.05)
    raise AssertionError(f"server not idle after {timeout}s: {stats}")
