"""Helpers for the admission webhook tests: a ``gpupool webhook`` process and pod requests."""

from __future__ import annotations

import json
import signal
import socket
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from gpupool.kube.client.api import ApiError, KubeAPI

Json = dict[str, Any]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


class WebhookProcess:
    """``gpupool webhook`` as its own process on 127.0.0.1, with a certificate from ``ca``."""

    def __init__(self, kubeconfig: Path, cert: Path, key: Path, ca: Path, log: Path) -> None:
        self.port = free_port()
        self.ca = ca
        self.log = log
        command = [
            sys.executable, "-m", "gpupool", "webhook",
            "--kubeconfig", str(kubeconfig),
            "--tls-cert", str(cert),
            "--tls-key", str(key),
            "--host", "127.0.0.1",
            "--port", str(self.port),
        ]  # fmt: skip
        with log.open("ab") as out:
            self.process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT)

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    def wait_ready(self, timeout: float = 90.0) -> None:
        """Until ``/readyz`` answers 200 over TLS verified against the CA."""
        context = ssl.create_default_context(cafile=str(self.ca))
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise AssertionError(f"webhook exited {self.process.returncode}:\n{self.tail()}")
            try:
                with urllib.request.urlopen(f"{self.url}/readyz", context=context, timeout=2):
                    return
            except (urllib.error.URLError, OSError):
                time.sleep(0.3)
        raise AssertionError(f"webhook not ready after {timeout:.0f} s:\n{self.tail()}")

    def stop(self) -> int:
        """SIGTERM, and the exit code."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        return self.process.returncode

    def tail(self) -> str:
        return self.log.read_text(errors="replace")[-3000:]


def pod(name: str, limits: dict[str, str] | None = None, **metadata: Any) -> Json:
    """A pod as a tenant writes it (no schedulerName: the webhook sets it)."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, **metadata},
        "spec": {
            "containers": [
                {
                    "name": "main",
                    "image": "registry.invalid/cuda:latest",
                    "resources": {"limits": limits or {}, "requests": {"cpu": "100m"}},
                }
            ]
        },
    }


async def create_pod(api: KubeAPI, namespace: str, body: Json, *, dry_run: bool = False) -> Json:
    """Create (or dry-run create: admission runs, nothing is stored) and return the result."""
    params = {"dryRun": "All"} if dry_run else None
    path = f"/api/v1/namespaces/{namespace}/pods"
    result: Json = json.loads(await api.request("POST", path, body=body, params=params))
    return result


async def refusal(api: KubeAPI, namespace: str, body: Json) -> str:
    """The API server's message refusing a dry-run create of ``body`` ("" if admitted)."""
    try:
        await create_pod(api, namespace, body, dry_run=True)
    except ApiError as error:
        return error.message
    return ""
