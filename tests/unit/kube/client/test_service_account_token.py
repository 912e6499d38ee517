"""In-cluster configuration: the ServiceAccount token is re-read as the kubelet rotates it."""

from __future__ import annotations

import os
from pathlib import Path

import httpx2
import pytest

from gpupool.kube.client.api import InClusterConfigError, KubeAPI, ServiceAccountToken


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _rotate(folder: Path, token: str) -> None:
    """The kubelet's way: write elsewhere, then swap in atomically (a new inode)."""
    fresh = folder / "token.tmp"
    fresh.write_text(token)
    os.replace(fresh, folder / "token")


def _overwrite_in_place(path: Path, token: str) -> None:
    """Same inode, size and modification time: invisible to the signature check."""
    info = path.stat()
    with path.open("r+") as handle:
        handle.write(token)
    os.utime(path, ns=(info.st_atime_ns, info.st_mtime_ns))


def _flow(auth: ServiceAccountToken, *statuses: int) -> list[str]:
    """Drive the auth flow with server answers ``statuses``; the Authorization headers sent."""
    flow = auth.auth_flow(httpx2.Request("GET", "https://api/api/v1/nodes"))
    sent = [next(flow).headers["Authorization"]]
    for status in statuses:
        try:
            sent.append(flow.send(httpx2.Response(status)).headers["Authorization"])
        except StopIteration:
            break
    return sent


def test_a_swapped_token_file_is_read_at_the_next_request(tmp_path: Path) -> None:
    _rotate(tmp_path, "one")
    auth = ServiceAccountToken(tmp_path / "token", clock=Clock())
    assert auth.token() == "one"
    assert auth.token() == "one"
    assert auth.reads == 1  # unchanged: not read again
    _rotate(tmp_path, "two")
    assert auth.token() == "two"
    assert auth.reads == 2


def test_the_token_is_read_again_after_sixty_seconds_even_if_it_looks_unchanged(
    tmp_path: Path,
) -> None:
    _rotate(tmp_path, "aaa\n")
    clock = Clock()
    auth = ServiceAccountToken(tmp_path / "token", clock=clock)
    _overwrite_in_place(tmp_path / "token", "bbb\n")
    clock.now += 59.0
    assert auth.token() == "aaa"
    clock.now += 1.0
    assert auth.token() == "bbb"


def test_a_401_rereads_the_file_and_retries_once_with_a_new_token(tmp_path: Path) -> None:
    _rotate(tmp_path, "old")
    clock = Clock()
    auth = ServiceAccountToken(tmp_path / "token", clock=clock)
    assert _flow(auth, 200) == ["Bearer old"]
    _overwrite_in_place(tmp_path / "token", "new")  # not noticed before the 401
    assert _flow(auth, 401, 401) == ["Bearer old", "Bearer new"]  # retried once, not twice
    assert _flow(auth, 401) == ["Bearer new"]  # the same token again: no retry


def test_a_token_missing_at_start_is_an_error_later_the_last_one_is_kept(tmp_path: Path) -> None:
    with pytest.raises(InClusterConfigError, match="token"):
        ServiceAccountToken(tmp_path / "token")
    (tmp_path / "token").write_text("  \n")
    with pytest.raises(InClusterConfigError, match="empty"):
        ServiceAccountToken(tmp_path / "token")
    _rotate(tmp_path, "kept")
    clock = Clock()
    auth = ServiceAccountToken(tmp_path / "token", clock=clock)
    (tmp_path / "token").unlink()
    clock.now += 120
    assert auth.token() == "kept"


def test_in_cluster_needs_the_service_variables_and_the_mounted_files(tmp_path: Path) -> None:
    with pytest.raises(InClusterConfigError, match="KUBERNETES_SERVICE_HOST"):
        KubeAPI.in_cluster(environ={})
    env = {
        "KUBERNETES_SERVICE_HOST": "10.96.0.1",
        "KUBERNETES_SERVICE_PORT": "443",
        "GPUPOOL_SERVICEACCOUNT_DIR": str(tmp_path),
    }
    with pytest.raises(InClusterConfigError, match=r"ca\.crt"):
        KubeAPI.in_cluster(environ=env)


async def test_in_cluster_connects_to_the_service_address(tmp_path: Path) -> None:
    from gpupool.devcluster.certs import write_cluster_certs

    certs = write_cluster_certs(tmp_path / "pki")
    os.replace(certs.ca_cert, tmp_path / "ca.crt")
    _rotate(tmp_path, "secret")
    for host, url in (
        ("10.96.0.1", "https://10.96.0.1:6443"),
        ("fd00::1", "https://[fd00::1]:6443"),
    ):
        api = KubeAPI.in_cluster(
            environ={
                "KUBERNETES_SERVICE_HOST": host,
                "KUBERNETES_SERVICE_PORT": "6443",
                "GPUPOOL_SERVICEACCOUNT_DIR": str(tmp_path),
            }
        )
        assert str(api.http.base_url).rstrip("/") == url
        await api.close()
