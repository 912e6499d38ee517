"""deploy/grafana/gpupool.json asks only for metrics the scheduler exports, in valid PromQL.

The exported names come from a real scrape of the scheduler's registry (a LiveScheduler that
never reaches a server), so renaming a metric in gpupool.kube.controlplane.metrics fails here until
the dashboard follows. Every expression is also parsed by promtool (``promtool check rules`` over a
rules file holding them), with Grafana's ``$__rate_interval`` replaced by a fixed range.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

import httpx2
import pytest
import yaml
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from gpupool.kube.client.api import KubeAPI
from gpupool.kube.controlplane.metrics import scheduler_registry
from gpupool.kube.scheduler.config import LiveConfig
from gpupool.kube.scheduler.live import LiveScheduler

DASHBOARD = Path(__file__).resolve().parents[2] / "deploy" / "grafana" / "gpupool.json"
PROMQL_WORDS = {
    "sum",
    "max",
    "min",
    "avg",
    "count",
    "rate",
    "increase",
    "irate",
    "histogram_quantile",
    "by",
    "without",
    "on",
    "ignoring",
    "group_left",
    "group_right",
    "and",
    "or",
    "unless",
}


def _exprs() -> list[str]:
    dashboard = json.loads(DASHBOARD.read_text())
    return [target["expr"] for panel in dashboard["panels"] for target in panel["targets"]]


def _exported() -> set[str]:
    api = KubeAPI(httpx2.AsyncClient(base_url="https://127.0.0.1:1"))
    scheduler = LiveScheduler(api, LiveConfig(identity="grafana-test"))
    text = generate_latest(scheduler_registry(scheduler, lambda: True)).decode()
    return {s.name for family in text_string_to_metric_families(text) for s in family.samples}


def _metric_names(expr: str) -> set[str]:
    """Identifiers in ``expr`` that are neither PromQL words nor label names."""
    stripped = re.sub(r"\b(by|without|on|ignoring)\s*\([^)]*\)", " ", expr)
    stripped = re.sub(r"\{[^}]*\}|\[[^\]]*\]|\"[^\"]*\"", " ", stripped)
    names = set(re.findall(r"[A-Za-z_:][A-Za-z0-9_:]*", stripped))
    return names - PROMQL_WORDS


def test_every_expression_uses_exported_metrics_only() -> None:
    exported = _exported()
    assert "gpupool_scheduler_binds_total" in exported
    exprs = _exprs()
    assert len(exprs) >= 8
    used: set[str] = set()
    for expr in exprs:
        names = _metric_names(expr)
        assert names, f"no metric in {expr!r}"
        assert names <= exported, f"{expr!r}: not exported: {sorted(names - exported)}"
        used |= names
    # the dashboard covers the scheduler's main signals
    for family in ("leader", "pending_pods", "binds_total", "scheduling_duration_seconds_bucket"):
        assert f"gpupool_scheduler_{family}" in used


def test_the_checker_catches_a_renamed_metric() -> None:
    assert _metric_names("sum by (reason) (rate(gpupool_scheduler_pendng[5m]))") == {
        "gpupool_scheduler_pendng"
    }


def test_promtool_parses_every_expression(tmp_path: Path) -> None:
    configured = os.environ.get("GPUPOOL_PROMTOOL")
    promtool = (
        Path(configured)
        if configured
        else Path.home() / ".cache" / "gpupool" / "tools" / "bin" / "promtool"
    )
    if not promtool.is_file():
        pytest.fail(f"promtool not found at {promtool}: run scripts/install-promtool.sh")
    rules = [
        {"record": f"gpupool:dashboard_{i}", "expr": expr.replace("$__rate_interval", "5m")}
        for i, expr in enumerate(_exprs())
    ]
    path = tmp_path / "rules.yaml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "dashboard", "rules": rules}]}))
    done = subprocess.run(
        [str(promtool), "check", "rules", str(path)], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"SUCCESS: {len(rules)} rules found" in done.stdout
