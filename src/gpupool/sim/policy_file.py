"""Reading a pools-and-queues YAML file for the simulator (multi-document, CRD-shaped).

The bundled configuration is ``configs/teams.yaml``; the fields are those of docs/crds.md and
every error names the file and the field (parsed by :func:`gpupool.policy.config.parse_policy`).
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path

from gpupool.policy.config import parse_policy
from gpupool.policy.spec import PolicyConfig
from gpupool.policy.spec_reader import PolicyConfigError

BUNDLED = "teams.yaml"


def bundled_config_text() -> str:
    """The text of the bundled ``configs/teams.yaml``."""
    return resources.files("gpupool.sim").joinpath("configs", BUNDLED).read_text()


def parse_policy_text(text: str, source: str) -> PolicyConfig:
    """Parse YAML documents of GPUPool and GPUQueue objects.

    Raises:
        PolicyConfigError: Bad YAML or a bad field; the message starts with ``source``.
    """
    import yaml

    try:
        documents = list(yaml.safe_load_all(text))
    except yaml.YAMLError as error:
        raise PolicyConfigError(f"{source}: not valid YAML: {error}") from None
    try:
        return parse_policy(documents)
    except PolicyConfigError as error:
        raise PolicyConfigError(f"{source}: {error}") from None


def load_policy(path: Path | None) -> PolicyConfig:
    """The configuration in ``path``, or the bundled one when ``path`` is ``None``."""
    if path is None:
        return parse_policy_text(bundled_config_text(), f"bundled {BUNDLED}")
    try:
        text = path.read_text()
    except OSError as error:
        raise PolicyConfigError(f"{path}: cannot read: {error.strerror}") from None
    return parse_policy_text(text, str(path))
