"""``gpupool webhook`` and ``gpupool webhook install`` as a user runs them (real subprocesses)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from gpupool.webhook.configuration import WebhookTarget, webhook_configurations

PRINT = ["install", "--print", "--inject-ca-from", "a/b"]
DEPLOY = Path(__file__).resolve().parents[3] / "deploy"


def gpupool(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gpupool", *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


@pytest.mark.parametrize(
    ("args", "option"),
    [
        ([], "--tls-cert"),
        (["--tls-cert", "missing.crt", "--tls-key", "missing.key"], "--tls-cert"),
        (["install", "--print", "--url", "https://127.0.0.1:1"], "--ca"),
        (["install", "--print", "--inject-ca-from", "a/b", "--url", "http://x"], "--url"),
        (["install", "--print", "--inject-ca-from", "a/b", "--service", "nons"], "--service"),
        (
            [*PRINT, "--url", "https://x", "--failure-policy", "Sometimes"],
            "--failure-policy",
        ),
        (["install", "--inject-ca-from", "a/b", "--url", "https://x"], "--kubeconfig"),
    ],
)
def test_bad_options_name_the_option(args: list[str], option: str) -> None:
    result = gpupool("webhook", *args)
    assert result.returncode == 2, result
    assert result.stderr.startswith("error: ")
    assert option in result.stderr
    assert "Traceback" not in result.stderr


def test_the_deployed_configurations_are_what_the_code_generates() -> None:
    result = gpupool(
        "webhook", "install", "--print",
        "--service", "gpupool-system/gpupool-webhook",
        "--inject-ca-from", "gpupool-system/gpupool-webhook",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    printed = list(yaml.safe_load_all(result.stdout))
    deployed = list(yaml.safe_load_all((DEPLOY / "webhook-configurations.yaml").read_text()))
    target = WebhookTarget(service_namespace="gpupool-system", service_name="gpupool-webhook")
    generated = webhook_configurations(
        None, target, inject_ca_from="gpupool-system/gpupool-webhook"
    )
    assert printed == deployed == list(generated.values())
    assert all("caBundle" not in w["clientConfig"] for c in deployed for w in c["webhooks"])
