"""A small client of a running control plane's REST API, for the CLI's live commands.

The CLI reads the same ``/api/v1`` a browser or script does (never the cluster directly), so it
works the same against the demo on loopback and against a control plane over HTTPS with a token
for the API's audience (``kubectl create token ACCOUNT --audience gpupool.io/api``), its
certificate checked against ``--ca-file`` or the system's CAs. Standard library only: the
commands must start fast and need nothing the API server's clients do not already have. Every
failure (no server, a refused token, a pod that is not pending) becomes one line that says
what to fix.
"""

from __future__ import annotations

import contextlib
import json
import os
import ssl
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from typing import Any

SERVER_ENV = "GPUPOOL_SERVER"
TOKEN_ENV = "GPUPOOL_TOKEN"
CA_ENV = "GPUPOOL_CA_FILE"
DEFAULT_SERVER = "http://127.0.0.1:9402"


class ApiClientError(RuntimeError):
    """The API could not answer; the message says why, naming the option to fix."""

    def __init__(self, message: str, status: int = 0) -> None:
        super().__init__(message)
        self.status = status


@dataclass(frozen=True, slots=True)
class ApiClient:
    """GETs JSON from one control plane.

    Args:
        server: Base URL (``http://127.0.0.1:9402``).
        token: Bearer token, or "" for none (loopback under ``--insecure-local`` needs none).
        ca_file: PEM CA for an https server ("" for the system's CAs).
        timeout: Seconds per request.
    """

    server: str
    token: str = ""
    ca_file: str = ""
    timeout: float = 10.0

    @classmethod
    def from_options(cls, server: str, token: str, ca_file: str = "") -> ApiClient:
        """From the options, falling back to ``$GPUPOOL_SERVER``, ``_TOKEN`` and ``_CA_FILE``.

        Raises:
            ApiClientError: The server is not an http(s) URL, or the CA file is missing.
        """
        url = server or os.environ.get(SERVER_ENV, "") or DEFAULT_SERVER
        parts = urllib.parse.urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise ApiClientError(f"--server: {url!r} is not an http(s) URL")
        ca = ca_file or os.environ.get(CA_ENV, "")
        if ca and not os.path.isfile(ca):
            raise ApiClientError(f"--ca-file: no such file {ca}")
        return cls(url.rstrip("/"), token or os.environ.get(TOKEN_ENV, ""), ca)

    def get(self, path: str) -> Any:
        """The JSON at ``path`` (``/api/v1/...``).

        Raises:
            ApiClientError: No answer, an error status, or not JSON.
        """
        request = urllib.request.Request(self.server + path, headers={"Accept": "application/json"})
        if self.token:
            request.add_header("Authorization", f"Bearer {self.token}")
        context = ssl.create_default_context(cafile=self.ca_file or None)
        try:
            with urllib.request.urlopen(request, timeout=self.timeout, context=context) as response:
                body = response.read()
        except urllib.error.HTTPError as error:
            detail = error.read().decode("utf-8", "replace").strip()
            with contextlib.suppress(ValueError, AttributeError):
                detail = str(json.loads(detail).get("detail", detail))
            hint = (
                " (pass --token or set GPUPOOL_TOKEN: a token for audience gpupool.io/api)"
                if error.code == 401
                else ""
            )
            raise ApiClientError(f"{path}: {error.code} {detail}{hint}", error.code) from None
        except (urllib.error.URLError, OSError) as error:
            reason = getattr(error, "reason", error)
            raise ApiClientError(f"--server {self.server}: cannot connect: {reason}") from None
        try:
            return json.loads(body)
        except ValueError:
            raise ApiClientError(f"{path}: the answer is not JSON") from None
