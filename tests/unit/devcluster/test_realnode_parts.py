"""The real node's parts that need no root: configurations, cgroup bookkeeping, image sets.

The whole node (namespace, containerd, runc, kubelet) runs in tests/e2e; these pin the
settings it depends on, each of which broke or would break the node when wrong.
"""

from __future__ import annotations

import errno
import json
import tomllib
from pathlib import Path

import pytest

from gpupool.devcluster import cgroups
from gpupool.devcluster.binaries import MissingBinariesError
from gpupool.devcluster.containerd import ContainerdPaths, has_capability, render_config
from gpupool.devcluster.images import ROLES, load
from gpupool.devcluster.kubelet import render_config as kubelet_config
from gpupool.devcluster.nodens import NODE_PATHS, session_path
from gpupool.devcluster.session import DevClusterConfig

MOUNTINFO = """\
22 1 252:0 / / rw,relatime shared:1 - ext4 /dev/vda rw
30 22 0:26 / /sys/fs/cgroup rw - tmpfs tmpfs rw,mode=755
31 30 0:27 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
32 30 0:28 / /sys/fs/cgroup/cpuset rw,relatime - cgroup cgroup rw,cpuset
33 30 0:29 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
"""


def test_cgroup_hierarchies_are_read_from_mountinfo(tmp_path: Path) -> None:
    mountinfo = tmp_path / "mountinfo"
    mountinfo.write_text(MOUNTINFO)
    assert cgroups.hierarchies(mountinfo) == [
        Path("/sys/fs/cgroup/memory"),
        Path("/sys/fs/cgroup/cpuset"),
        Path("/sys/fs/cgroup/unified"),
    ]


def test_a_new_cpuset_root_inherits_cpus_and_memory_nodes(tmp_path: Path) -> None:
    cpuset = tmp_path / "cpuset"
    (cpuset / "gpupool-x").mkdir(parents=True)  # the kernel makes the files with the folder
    (cpuset / "cpuset.cpus").write_text("0-1\n")
    (cpuset / "cpuset.mems").write_text("0\n")
    for name in ("cpuset.cpus", "cpuset.mems"):
        (cpuset / "gpupool-x" / name).write_text("\n")
    made = cgroups.create_root("gpupool-x", [cpuset])
    assert made == [cpuset / "gpupool-x"]
    assert (cpuset / "gpupool-x" / "cpuset.cpus").read_text() == "0-1\n"
    assert (cpuset / "gpupool-x" / "cpuset.mems").read_text() == "0\n"


def test_processes_are_found_below_a_root_and_the_tree_is_removed(tmp_path: Path) -> None:
    root = tmp_path / "memory" / "gpupool-x"
    pod = root / "kubepods" / "pod1" / "c1"
    pod.mkdir(parents=True)
    (root / "cgroup.procs").write_text("")
    (pod / "cgroup.procs").write_text("101\n102\n")
    assert cgroups.processes_below([root]) == {101, 102}
    for folder in (pod, pod.parent, pod.parent.parent, root):  # rmdir needs empty folders
        (folder / "cgroup.procs").unlink(missing_ok=True)
    cgroups.remove_tree([root])
    assert not root.exists()


def test_a_cgroup_removed_while_it_is_read_holds_no_process(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The kernel answers ENODEV for a cgroup removed between open and read; other errors
    still surface (a permission problem must not look like an empty node)."""
    root = tmp_path / "unified" / "gpupool-x"
    gone, kept = root / "kubepods" / "pod1" / "gone", root / "kubepods" / "pod2" / "kept"
    for folder in (gone, kept):
        folder.mkdir(parents=True)
        (folder / "cgroup.procs").write_text("7\n" if folder == kept else "8\n")
    failure = {"errno": errno.ENODEV}
    read_text = Path.read_text

    def removed_meanwhile(path: Path, *args: object, **kwargs: object) -> str:
        if path.parent == gone:
            raise OSError(failure["errno"], "No such device")
        return read_text(path)

    monkeypatch.setattr(Path, "read_text", removed_meanwhile)
    assert cgroups.processes_below([root]) == {7}
    failure["errno"] = errno.EACCES
    with pytest.raises(PermissionError):
        cgroups.processes_below([root])


def _containerd(tmp_path: Path, restrict: bool) -> dict[str, object]:
    text = render_config(
        ContainerdPaths(tmp_path / "c"),
        tmp_path / "bin",
        Path("/usr/sbin/runc"),
        "ghcr.io/gpupool/pause:0.1.0",
        restrict_oom_score_adj=restrict,
    )
    return tomllib.loads(text)


def test_containerd_config_has_cdi_runc_loopback_and_the_sandbox(tmp_path: Path) -> None:
    config = _containerd(tmp_path, restrict=True)
    plugins = config["plugins"]
    assert isinstance(plugins, dict)
    runtime = plugins["io.containerd.cri.v1.runtime"]
    assert config["version"] == 3
    assert config["grpc"] == {"address": str(tmp_path / "c" / "containerd.sock")}
    assert runtime["cdi_spec_dirs"] == ["/var/run/cdi"]
    assert runtime["restrict_oom_score_adj"] is True
    runc = runtime["containerd"]["runtimes"]["runc"]
    assert runc["options"] == {"BinaryName": "/usr/sbin/runc", "SystemdCgroup": False}
    assert runtime["cni"]["conf_dir"] == str(tmp_path / "c" / "net.d")
    images = plugins["io.containerd.cri.v1.images"]
    assert images["pinned_images"] == {"sandbox": "ghcr.io/gpupool/pause:0.1.0"}
    assert "io.containerd.nri.v1.nri" in config["disabled_plugins"]  # type: ignore[operator]
    unrestricted = _containerd(tmp_path, restrict=False)["plugins"]
    assert isinstance(unrestricted, dict)
    assert unrestricted["io.containerd.cri.v1.runtime"]["restrict_oom_score_adj"] is False


def test_capabilities_are_read_from_the_effective_set(tmp_path: Path) -> None:
    status = tmp_path / "status"
    status.write_text("Name:\tx\nCapEff:\t000001fffeffffff\n")  # all but CAP_SYS_RESOURCE
    assert not has_capability(24, status)
    assert has_capability(21, status)  # CAP_SYS_ADMIN


def test_kubelet_config_allows_cgroup_v1_in_its_own_root() -> None:
    config = json.loads(kubelet_config(Path("/tmp/c.sock"), "/gpupool-x", 4242, 4243))
    assert config["failCgroupV1"] is False
    assert config["cgroupsPerQOS"] is True
    assert config["cgroupRoot"] == "/gpupool-x"
    assert config["containerRuntimeEndpoint"] == "unix:///tmp/c.sock"
    assert (config["port"], config["healthzPort"], config["readOnlyPort"]) == (4242, 4243, 0)
    assert config["volumePluginDir"].startswith("/var/lib/kubelet/")  # not /usr/libexec


def test_node_paths_map_to_distinct_session_folders(tmp_path: Path) -> None:
    folders = {session_path(tmp_path, path) for path in NODE_PATHS}
    assert len(folders) == len(NODE_PATHS)
    assert all(folder.parent == tmp_path / "node" for folder in folders)
    assert "/var/lib/kubelet" in NODE_PATHS  # device-plugins/kubelet.sock is fixed below it


def _image_set(folder: Path, roles: tuple[str, ...]) -> None:
    folder.mkdir()
    images = [{"role": r, "name": f"x/{r}:1", "archive": f"{r}.oci.tar"} for r in roles]
    for role in roles:
        (folder / f"{role}.oci.tar").write_bytes(b"")
    (folder / "images.json").write_text(json.dumps({"images": images}))


def test_an_image_set_names_every_role(tmp_path: Path) -> None:
    _image_set(tmp_path / "set", ROLES)
    images = load(tmp_path / "set")
    assert (images.gpupool, images.test_workload, images.pause) == (
        "x/gpupool:1",
        "x/test-workload:1",
        "x/pause:1",
    )
    assert [p.name for p in images.archives] == [f"{r}.oci.tar" for r in ROLES]


def test_an_incomplete_image_set_says_what_is_missing(tmp_path: Path) -> None:
    _image_set(tmp_path / "set", ("gpupool", "pause"))
    with pytest.raises(MissingBinariesError, match=r"no test-workload image; run scripts/build"):
        load(tmp_path / "set")
    with pytest.raises(MissingBinariesError, match="no image manifest"):
        load(tmp_path)


@pytest.mark.parametrize("name", ["", "Real-Node", "node_1", "-x", "x" * 64])
def test_a_bad_real_node_name_is_refused_naming_the_option(name: str) -> None:
    with pytest.raises(ValueError, match="--real-node-name"):
        DevClusterConfig(real_node=name).validate()


def test_a_real_node_allows_no_fake_nodes() -> None:
    DevClusterConfig(nodes=0, real_node="real-node").validate()
    with pytest.raises(ValueError, match="--nodes"):
        DevClusterConfig(nodes=0).validate()
