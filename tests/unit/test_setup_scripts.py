"""The set-up scripts cannot fail spuriously: no SIGPIPE from a version check, no shared partials.

``"$bin/etcd" --version | grep -q 3.7.3`` under ``set -o pipefail`` failed 3 times in 9 on a warm
cache: grep exits at its first match, etcd dies of SIGPIPE writing the rest, and pipefail turns
that into the script's failure. The scripts now go through ``scripts/lib.sh``; these tests run
its functions in bash against commands that write far more than a pipe buffer after the match.
"""

from __future__ import annotations

import re
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

SCRIPTS = Path(__file__).resolve().parents[2] / "scripts"
LIB = SCRIPTS / "lib.sh"
# A version line first, then 4 MiB more: what `grep -q` closed the pipe on.
LOUD_VERSION = "echo 'etcd Version: 3.7.3'; head -c 4194304 /dev/zero | tr '\\0' x; echo"


def _bash(script: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", "-c", f"set -euo pipefail; source {LIB}; {script}"],
        capture_output=True,
        text=True,
        cwd=cwd,
        check=False,
    )


def test_the_old_pattern_really_fails_by_sigpipe() -> None:
    """The failure this guards against, reproduced: the pipeline's status is SIGPIPE's."""
    result = _bash(f'sh -c "{LOUD_VERSION}" | grep -q 3.7.3')
    assert result.returncode == 141  # 128 + SIGPIPE


def test_expect_version_passes_on_a_loud_binary_every_time() -> None:
    for _ in range(10):
        result = _bash(f'expect_version etcd 3.7.3 sh -c "{LOUD_VERSION}"; echo ok')
        assert result.returncode == 0, result.stderr
        assert result.stdout == "ok\n"


def test_expect_version_names_the_binary_on_a_mismatch() -> None:
    result = _bash("expect_version etcd 3.7.4 echo 'etcd Version: 3.7.3'")
    assert result.returncode == 1
    assert "error: etcd version: expected 3.7.4" in result.stderr
    assert "etcd Version: 3.7.3" in result.stderr


def test_expect_version_fails_when_the_binary_fails() -> None:
    result = _bash("expect_version kwok v0.8.0 sh -c 'echo broken >&2; exit 3'")
    assert result.returncode == 1
    assert "error: kwok:" in result.stderr
    assert "broken" in result.stderr


def test_concurrent_publishers_of_one_folder_all_succeed(tmp_path: Path) -> None:
    """Two runs filling one cache entry: both succeed, one complete folder is left, no partial."""
    final = tmp_path / "entry"
    script = (
        f'p=$(mktemp -d "{final}.partial.XXXXXX"); echo "$$" > "$p/owner"; touch "$p/.complete";'
        f' publish_dir "$p" "{final}"; test -f "{final}/.complete"'
    )
    with ThreadPoolExecutor(8) as pool:
        results = list(pool.map(lambda _: _bash(script), range(16)))
    assert [r.returncode for r in results] == [0] * 16, [r.stderr for r in results]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["entry"]
    assert (final / "owner").read_text().strip().isdigit()


def test_partial_paths_are_unique_and_beside_the_target(tmp_path: Path) -> None:
    target = tmp_path / "bin" / "etcd"
    target.parent.mkdir()
    paths = {_bash(f"partial_path {target}").stdout.strip() for _ in range(5)}
    assert len(paths) == 5
    assert all(Path(p).parent == target.parent and Path(p).name.startswith(".etcd.") for p in paths)


@pytest.mark.parametrize("script", sorted(SCRIPTS.glob("*.sh")), ids=lambda p: p.name)
def test_no_script_pipes_into_an_early_exit(script: Path) -> None:
    """`cmd | grep -q`, `cmd | head` and the like close the pipe early: use expect_version."""
    code = [line for line in script.read_text().splitlines() if not line.lstrip().startswith("#")]
    early_exit = re.compile(r"\|\s*(grep\s+(-\w*[qm]\w*)|head\b|sed\s+[^|]*\bq\b)")
    assert [line for line in code if early_exit.search(line)] == []
