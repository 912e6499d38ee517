"""``gpupool report congestion`` as a user runs it: a subprocess against a real loopback server
whose congestion ledger is the warm demo's."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from gpupool.api.app import create_face
from gpupool.api.embedded import demo_congestion
from gpupool.api.example import example_view
from gpupool.api.serve import serving
from gpupool.sim.demo.session import DemoSession

from .test_cli_face import run


@pytest.fixture(scope="module")
def server() -> Iterator[str]:
    congestion = demo_congestion(DemoSession(seed=0))
    face = create_face(example_view(), None, insecure_local=True, congestion=congestion)
    with serving(face) as url:
        yield url


def test_report_congestion_ranks_the_reservation_holders_class_with_its_cause(server: str) -> None:
    done = run("gpupool", "report", "congestion", "--server", server)
    assert done.returncode == 0, done.stderr
    assert "Congestion by class" in done.stdout
    rows = [line for line in done.stdout.splitlines() if "│ training" in line]
    nlp = next(line for line in rows if "│ nlp" in line)
    assert "reservation" in nlp
    assert nlp.rstrip().rstrip("│").strip().endswith("0%")  # no training share is contended
    assert "pending minutes charged" in done.stdout
