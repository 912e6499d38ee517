"""A throwaway PostgreSQL server for the audit store: the store's and the end-to-end tests'.

The server is Debian's PostgreSQL (``scripts/install-postgres.sh``), started in a temporary
folder (initdb, then ``pg_ctl start`` on a free loopback port, trust authentication on loopback
only) and stopped and removed by whoever started it. PostgreSQL refuses to run as root, so as
root (CI) the server runs as the ``postgres`` system user through ``runuser``, in a folder that
user owns. Missing binaries raise with how to install them: a test that needs the store fails
rather than skips.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from gpupool.devcluster.binaries import MissingBinariesError
from gpupool.devcluster.processes import free_port

POSTGRES_BIN_ENV = "GPUPOOL_POSTGRES_BIN"
INSTALL_HINT = (
    "PostgreSQL server binaries not found: run scripts/install-postgres.sh (it installs "
    "Debian's postgresql package) and set GPUPOOL_POSTGRES_BIN to the folder it prints"
)


def postgres_bin() -> Path:
    """The server binaries' folder: ``$GPUPOOL_POSTGRES_BIN``, else Debian's newest.

    Raises:
        MissingBinariesError: None found (the message says how to install them).
    """
    configured = os.environ.get(POSTGRES_BIN_ENV)
    candidates = (
        [Path(configured)]
        if configured
        else sorted(
            Path("/usr/lib/postgresql").glob("*/bin"),
            key=lambda p: int(p.parent.name) if p.parent.name.isdigit() else 0,
            reverse=True,
        )
    )
    for folder in candidates:
        if all((folder / tool).is_file() for tool in ("initdb", "pg_ctl", "postgres", "psql")):
            return folder
    looked = ", ".join(str(c) for c in candidates) or "/usr/lib/postgresql/*/bin"
    raise MissingBinariesError(f"{INSTALL_HINT} (looked in {looked})")


class PostgresServer:
    """One throwaway PostgreSQL server: initdb once, start and stop as often as a test likes."""

    def __init__(self, bin_dir: Path, root: Path) -> None:
        self.bin = bin_dir
        self.root = root
        self.data = root / "data"
        self.log = root / "server.log"
        self.port = free_port()
        self.as_postgres = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []

    def _run(self, *args: str, timeout: float = 120) -> None:
        done = subprocess.run(
            [*self.as_postgres, *args], capture_output=True, text=True, timeout=timeout, check=False
        )
        if done.returncode != 0:
            log = self.log.read_text()[-2000:] if self.log.exists() else ""
            raise RuntimeError(f"{' '.join(args)} failed: {done.stdout}{done.stderr}\n{log}")

    def init(self) -> None:
        """Create the cluster folder (once), owned by the user the server runs as."""
        self._run(
            str(self.bin / "initdb"), "-D", str(self.data), "-U", "gpupool", "--auth=trust",
            "-E", "UTF8", "--no-sync", "--no-instructions",
        )  # fmt: skip

    def start(self) -> None:
        """Start on loopback only; ``fsync`` off: a test server never outlives its data."""
        options = f"-p {self.port} -k {self.root} -c listen_addresses=127.0.0.1 -c fsync=off"
        self._run(
            str(self.bin / "pg_ctl"), "-D", str(self.data), "-l", str(self.log), "-w",
            "-t", "60", "-o", options, "start",
        )  # fmt: skip

    def stop(self, mode: str = "fast") -> None:
        """Stop the server; ``immediate`` is a crash: no checkpoint, recovery at the next start."""
        self._run(str(self.bin / "pg_ctl"), "-D", str(self.data), "-m", mode, "-w", "stop")

    def url(self, database: str) -> str:
        """The store URL of one of its databases."""
        return f"postgresql+asyncpg://gpupool@127.0.0.1:{self.port}/{database}"

    def create_database(self) -> str:
        """A new, empty database (one per test: no test reads another's rows); its name."""
        name = f"test_{uuid.uuid4().hex[:12]}"
        self._run(
            str(self.bin / "psql"), "-h", "127.0.0.1", "-p", str(self.port), "-U", "gpupool",
            "-d", "postgres", "-v", "ON_ERROR_STOP=1", "-c", f'CREATE DATABASE "{name}"',
        )  # fmt: skip
        return name


@contextmanager
def throwaway_postgres() -> Iterator[PostgresServer]:
    """A PostgreSQL server running until the block ends, then stopped and removed."""
    bin_dir = postgres_bin()
    root = Path(tempfile.mkdtemp(prefix="gpupool-pg-"))
    if os.geteuid() == 0:
        shutil.chown(root, "postgres", "postgres")
    server = PostgresServer(bin_dir, root)
    server.init()
    server.start()
    try:
        yield server
    finally:
        subprocess.run(
            [*server.as_postgres, str(bin_dir / "pg_ctl"), "-D", str(server.data), "-m",
             "immediate", "-w", "stop"],
            capture_output=True, check=False, timeout=60,
        )  # fmt: skip
        shutil.rmtree(root, ignore_errors=True)
