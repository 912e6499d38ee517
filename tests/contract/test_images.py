"""The Dockerfile, scripts/build-images.sh, deploy/ and the chart describe the same images.

deploy/images/images.env defines the images once; the script builds from it without Docker,
and the Dockerfile builds the gpupool image for users with Docker. These checks read the files
as text, so a drift (another base, a missing extra, another entrypoint or user, a manifest
naming an image nobody builds) fails here rather than in a cluster.
"""

from __future__ import annotations

import json
import re
import shlex
import tomllib
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[2]
DOCKERFILE = REPO / "Dockerfile"
SCRIPT = REPO / "scripts" / "build-images.sh"


def _images_env() -> dict[str, str]:
    values = {}
    for line in (REPO / "deploy" / "images" / "images.env").read_text().splitlines():
        if line.strip() and not line.lstrip().startswith("#"):
            key, _, value = line.partition("=")
            values[key] = shlex.split(value)[0]
    return values


ENV = _images_env()
VERSION = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]
GPUPOOL_IMAGE = f"{ENV['REGISTRY']}/gpupool:{VERSION}"


def _final_stage() -> list[str]:
    """The Dockerfile's last stage as logical lines (continuations joined)."""
    text = DOCKERFILE.read_text().replace("\\\n", " ")
    lines = [line.strip() for line in text.splitlines() if line.strip() and line[0] != "#"]
    last_from = max(i for i, line in enumerate(lines) if line.startswith("FROM "))
    return lines[last_from:]


def _instruction(stage: list[str], name: str) -> list[str]:
    return [line.removeprefix(name).strip() for line in stage if line.startswith(f"{name} ")]


def _script_config(flag: str) -> list[str]:
    """The values of ``--config.<flag>=`` in the gpupool image's ``image gpupool`` call."""
    call = SCRIPT.read_text().split("gpupool=$(image gpupool", 1)[1].split("\n\n", 1)[0]
    return re.findall(rf"--config\.{flag}=(\S+?)\)?(?:\s|\\|$)", call)


def test_same_debian_base() -> None:
    assert _instruction(_final_stage(), "FROM") == [f"debian:{ENV['DEBIAN_SUITE']}-slim"]


def test_same_debian_packages() -> None:
    installs = [r for r in _instruction(_final_stage(), "RUN") if "apt-get install" in r]
    assert len(installs) == 1
    words = installs[0].split("apt-get install", 1)[1].split("&&", 1)[0].split()
    assert {w for w in words if not w.startswith("-")} == set(ENV["GPUPOOL_PACKAGES"].split())


def test_same_extras_into_the_same_venv() -> None:
    run = next(r for r in _instruction(_final_stage(), "RUN") if "pip install" in r)
    assert f"python3 -m venv {ENV['GPUPOOL_VENV']}" in run
    assert f"{ENV['GPUPOOL_VENV']}/bin/pip install" in run
    extras = re.search(r"\[([a-z,]+)\]", run)
    assert extras is not None
    assert extras.group(1).split(",") == ENV["GPUPOOL_EXTRAS"].split(",")


def test_same_entrypoint_command_and_user() -> None:
    stage = _final_stage()
    entrypoint = json.loads(_instruction(stage, "ENTRYPOINT")[0])
    command = json.loads(_instruction(stage, "CMD")[0])
    assert entrypoint == _script_config("entrypoint") == ["gpupool"]
    assert command == _script_config("cmd") == ["control-plane", "--http-address=0.0.0.0:9402"]
    uid = ENV["GPUPOOL_UID"]
    assert _instruction(stage, "USER") == [f"{uid}:{uid}"]
    assert _script_config("user") == ['"$GPUPOOL_UID:$GPUPOOL_UID"']
    assert any(f"--uid {uid}" in run for run in _instruction(stage, "RUN"))


def test_same_environment() -> None:
    env = " ".join(_instruction(_final_stage(), "ENV"))
    script = _script_config("env")
    assert f"PATH={ENV['GPUPOOL_VENV']}/bin:" in env
    assert any(value.startswith('"PATH=$GPUPOOL_VENV/bin:') for value in script)
    for flag in ("PYTHONDONTWRITEBYTECODE=1", "PYTHONUNBUFFERED=1"):
        assert flag in env
        assert flag in script


def _manifest_images(document: Any) -> list[str]:
    spec = document.get("spec", {}).get("template", {}).get("spec", {})
    return [c["image"] for c in spec.get("containers", []) if "gpupool" in c["image"]]


def test_deploy_manifests_name_the_built_image() -> None:
    seen = []
    for path in sorted((REPO / "deploy").glob("*.yaml")):
        for document in yaml.safe_load_all(path.read_text()):
            if document:
                seen += [(path.name, image) for image in _manifest_images(document)]
    assert {name for name, _ in seen} == {
        "agent-daemonset.yaml",
        "scheduler-deployment.yaml",
        "webhook.yaml",
    }
    assert {image for _, image in seen} == {GPUPOOL_IMAGE}


def test_the_chart_names_the_built_image() -> None:
    chart = REPO / "deploy" / "helm" / "gpupool"
    values = yaml.safe_load((chart / "values.yaml").read_text())
    meta = yaml.safe_load((chart / "Chart.yaml").read_text())
    assert values["image"]["repository"] == f"{ENV['REGISTRY']}/gpupool"
    assert values["image"]["tag"] in ("", VERSION)
    assert meta["appVersion"] == VERSION
    assert values["image"]["pullPolicy"] in ("IfNotPresent", "Never")
