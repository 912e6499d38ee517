from __future__ import annotations

import os
from pathlib import Path

import pytest

from gpupool.devcluster.binaries import CONTAINERD, MissingBinariesError, find, find_binaries


def _fake_bin(folder: Path, names: tuple[str, ...] = ("etcd", "kube-apiserver")) -> Path:
    folder.mkdir(parents=True)
    for name in names:
        path = folder / name
        path.write_text("#!/bin/sh\n")
        path.chmod(0o755)
    return folder


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for name in ("GPUPOOL_CONTROLPLANE_BIN", "KUBEBUILDER_ASSETS"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("GPUPOOL_CACHE_DIR", str(tmp_path / "cache"))


def test_variable_wins(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    folder = _fake_bin(tmp_path / "mine")
    monkeypatch.setenv("GPUPOOL_CONTROLPLANE_BIN", str(folder))
    assert find_binaries() == folder


def test_envtest_assets_are_honoured(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    folder = _fake_bin(tmp_path / "assets")
    monkeypatch.setenv("KUBEBUILDER_ASSETS", str(folder))
    assert find_binaries() == folder


def test_a_variable_naming_an_incomplete_folder_says_what_is_missing(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    folder = _fake_bin(tmp_path / "half", ("etcd",))
    monkeypatch.setenv("GPUPOOL_CONTROLPLANE_BIN", str(folder))
    with pytest.raises(MissingBinariesError, match="kube-apiserver"):
        find_binaries()


def test_newest_complete_cache_build_is_the_fallback(tmp_path: Path) -> None:
    cache = tmp_path / "cache" / "controlplane"
    old = _fake_bin(cache / "k8s-old" / "bin")
    new = _fake_bin(cache / "k8s-new" / "bin")
    _fake_bin(cache / "k8s-broken" / "bin", ("etcd",))
    os.utime(old, (1, 1))
    assert find_binaries() == new


def test_nothing_built_explains_how_to_build() -> None:
    with pytest.raises(MissingBinariesError, match=r"build-control-plane\.sh"):
        find_binaries()


def test_node_binaries_are_found_the_same_way(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.delenv("GPUPOOL_CONTAINERD_BIN", raising=False)
    with pytest.raises(MissingBinariesError, match=r"build-containerd\.sh"):
        find(CONTAINERD)
    names = ("containerd", "containerd-shim-runc-v2", "ctr", "loopback")
    _fake_bin(tmp_path / "cache" / "node" / "containerd-v2-half" / "bin", names[:3])
    built = _fake_bin(tmp_path / "cache" / "node" / "containerd-v2-x" / "bin", names)
    assert find(CONTAINERD) == built
