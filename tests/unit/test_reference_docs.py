"""The site's reference pages (CRD fields, CLI help, REST paths) are what the code says today."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_reference_pages_are_current() -> None:
    result = subprocess.run(
        [sys.executable, str(REPO / "scripts" / "gen_reference_docs.py"), "--check"],
        capture_output=True,
        text=True,
        cwd=REPO,
        check=False,
    )
    assert result.returncode == 0, result.stderr
