"""Rerun the README's headline benchmarks (docs/headlines.toml) and put their JSON in place.

Each headline names the command that measures it and the JSON the docs cite; this runs the
command on the code checked out and copies what it produced over that JSON, so the number and
its commit move together (tests/unit/test_headlines.py checks the pair). Then update the
numbers in the text by hand from the new JSON: the commit to cite is in its ``source``.

    .venv/bin/python bench/report.py        # or: make bench-report
"""

from __future__ import annotations

import shlex
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def main() -> int:
    """Run every headline's command; 1 if one failed (the others still run)."""
    headlines = tomllib.loads((REPO / "docs" / "headlines.toml").read_text())["headline"]
    failed = 0
    for headline in headlines:
        print(f"== {headline['text']}", flush=True)
        done = subprocess.run([sys.executable, *shlex.split(headline["command"])], cwd=REPO)
        if done.returncode != 0:
            failed += 1
            continue
        shutil.copyfile(REPO / headline["produces"], REPO / headline["json"])
        print(f"   wrote {headline['json']}", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
