"""Every measured section of docs/benchmarks.md cites its JSON and names the commit it measured.

A number in the benchmarks page is only as true as the code it was measured on. Each section
(a ``##`` or ``###`` heading and its text) that reports measurements cites the JSON under
``docs/results/`` its numbers come from, and names that JSON's commit (its ``source.commit``, or
for a JSON written before benchmarks recorded one, the commit that last wrote the file: the code
it describes is at or before it), so a reader can tell which code each number describes. The
README's headline numbers are checked against the code they measure in ``test_headlines.py``.
"""

from __future__ import annotations

import json
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
PAGE = REPO / "docs" / "benchmarks.md"

NO_MEASUREMENT = {
    "# Benchmarks": "the page's introduction",
    "## 5. Regression gate in the test suite": "its numbers are the pins of the test it names",
    "## 6. The live scheduler on a real control plane": "the setup the sections below share",
    "### Earlier attempts (the version before these terms)": "outcomes only, no number",
    "### Trying it by hand: `gpupool dev-cluster up`": "commands, no measurement",
}
"""Sections that report no measurement of their own, with why."""

COMMIT = re.compile(r"[0-9a-f]{7,40}")
CITED = re.compile(r"(?:docs/)?results/([\w.\-{},]+\.json)")


def sections(text: str) -> Iterator[tuple[str, str]]:
    """(heading, text) of each section, headings inside code blocks left alone."""
    heading, fenced = "", False
    lines: list[str] = []
    for line in text.splitlines():
        if line.startswith("```"):
            fenced = not fenced
        if not fenced and re.match(r"#{1,3} ", line):
            if heading:
                yield heading, "\n".join(lines)
            heading, lines = line.strip(), []
        lines.append(line)
    if heading:
        yield heading, "\n".join(lines)


def cited_files(text: str) -> set[str]:
    """The JSON files a section names, ``name_{a,b}.json`` read as two names."""
    found = set()
    for name in CITED.findall(text):
        head, brace, rest = name.partition("{")
        if not brace:
            found.add(name)
            continue
        choices, _, tail = rest.partition("}")
        found.update(f"{head}{choice}{tail}" for choice in choices.split(","))
    return found


def recorded_commits(value: Any) -> set[str]:
    """Every commit a result file records (``commit`` or ``git_commit``, at any depth: some
    hold several runs, each with its ``source``)."""
    if isinstance(value, dict):
        found = {
            value[key]
            for key in ("commit", "git_commit")
            if isinstance(value.get(key), str) and COMMIT.fullmatch(value[key])
        }
        for item in value.values():
            found |= recorded_commits(item)
        return found
    if isinstance(value, list):
        return {commit for item in value for commit in recorded_commits(item)}
    return set()


def _git(*args: str) -> str:
    return subprocess.run(
        ["git", *args], cwd=REPO, capture_output=True, text=True, check=False
    ).stdout.strip()


def written_at(path: Path) -> str:
    """The commit that last wrote ``path`` ("" without the history to tell): a result without
    a recorded commit measured code at or before it."""
    if _git("rev-parse", "--is-shallow-repository") != "false":
        return ""
    return _git("log", "-1", "--format=%H", "--", str(path.relative_to(REPO)))


SECTIONS = list(sections(PAGE.read_text()))


def test_every_exempt_section_still_exists() -> None:
    headings = {heading for heading, _ in SECTIONS}
    assert set(NO_MEASUREMENT) <= headings, set(NO_MEASUREMENT) - headings


@pytest.mark.parametrize(("heading", "text"), SECTIONS, ids=[h for h, _ in SECTIONS])
def test_a_measured_section_cites_its_json_and_names_its_commit(heading: str, text: str) -> None:
    names = cited_files(text)
    if heading in NO_MEASUREMENT:
        return
    assert names, f"{heading}: cites no JSON under docs/results/ (or add it to NO_MEASUREMENT)"
    for name in sorted(names):
        path = REPO / "docs" / "results" / name
        assert path.is_file(), f"{heading}: cites {name}, which does not exist"
        commits = recorded_commits(json.loads(path.read_text())) or {written_at(path)}
        if "" in commits:
            pytest.skip("a shallow clone has no history to find when a result was written")
        named = [commit[:7] for commit in commits if commit[:7] in text]
        assert named, (
            f"{heading}: {name} was measured at {' or '.join(c[:7] for c in sorted(commits))}, "
            "which the section does not name (say 'measured at <commit>' beside its numbers)"
        )


def test_the_check_reads_braces_and_finds_commits_at_any_depth() -> None:
    """The check itself: brace lists are names, nested runs' commits are found."""
    assert cited_files("--json docs/results/run_{a,b}.json") == {"run_a.json", "run_b.json"}
    nested = {"screens": {"k4": {"source": {"commit": "8e76f9d", "dirty": False}}}}
    assert recorded_commits(nested) == {"8e76f9d"}
    assert recorded_commits({"runs": [{"source": {"commit": "abc1234"}}]}) == {"abc1234"}
    assert recorded_commits({"git_commit": "1355ff6", "commit": "not a commit"}) == {"1355ff6"}
