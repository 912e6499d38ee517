"""Every headline number of the README cites its JSON and comes from current code, or says which.

docs/headlines.toml lists each: its text, where it is shown, the JSON it comes from and the paths
it measures. A number whose JSON was written at a commit older than the latest change to those
paths describes code that is gone; the text beside it must then say "measured at <commit>".
"""

from __future__ import annotations

import json
import re
import subprocess
import tomllib
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
HEADLINES: list[dict[str, Any]] = tomllib.loads((REPO / "docs" / "headlines.toml").read_text())[
    "headline"
]


def _git(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["git", *args], cwd=REPO, capture_output=True, text=True, check=False)


def _paragraph(text: str, needle: str) -> str:
    """The paragraph (or list item) of ``text`` holding ``needle``, its lines joined."""
    flat = " ".join(text.split())
    at = flat.index(needle)
    blocks = re.split(r"\n\s*\n|\n(?=\s*[*|-] )", text)
    for block in blocks:
        if needle in " ".join(block.split()):
            return " ".join(block.split())
    return flat[max(0, at - 400) : at + 400]


def _current(commit: str, measures: list[str]) -> bool:
    """Whether ``commit`` is in the history and no later commit changed ``measures``."""
    last = _git("log", "-1", "--format=%H", "--", *measures).stdout.strip()
    if not last or _git("cat-file", "-e", f"{commit}^{{commit}}").returncode != 0:
        return False
    return _git("merge-base", "--is-ancestor", last, commit).returncode == 0


@pytest.mark.parametrize("headline", HEADLINES, ids=[h["json"] for h in HEADLINES])
def test_a_headline_is_from_current_code_or_says_which_commit(headline: dict[str, Any]) -> None:
    if _git("rev-parse", "--is-shallow-repository").stdout.strip() != "false":
        pytest.skip("a shallow clone has no history to compare with")
    source = json.loads((REPO / headline["json"]).read_text())["source"]
    for shown in headline["shown_in"]:
        text = (REPO / shown).read_text()
        assert headline["text"] in " ".join(text.split()), f"{shown} no longer shows it"
        assert headline["json"] in _paragraph(text, headline["text"]), (
            f"{shown}: {headline['text']!r} does not cite {headline['json']} beside it"
        )
        if source["dirty"] or not _current(source["commit"], headline["measures"]):
            said = re.findall(r"measured at ([0-9a-f]{7,40})", _paragraph(text, headline["text"]))
            assert any(source["commit"].startswith(sha) for sha in said), (
                f"{shown}: {headline['text']!r} comes from {headline['json']} "
                f"({source['commit'][:7]}), older than the code it measures: rerun "
                f"`{headline['command']}` or say 'measured at {source['commit'][:7]}' beside it"
            )


def test_a_headline_that_names_no_commit_is_caught(tmp_path: Path) -> None:
    """The check itself: a stale JSON with no 'measured at' beside the number fails."""
    text = "placement (4.14% of GPUs unallocated on the openb trace), under"
    said = re.findall(r"measured at ([0-9a-f]{7,40})", _paragraph(text, "4.14%"))
    assert said == []
    assert not _current("0" * 40, ["src"])
