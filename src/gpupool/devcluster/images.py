"""The images ``scripts/build-images.sh`` built: their names, roles and OCI archives.

The script is the one place the image names and tags are defined; it writes them with the
archives into ``images.json`` in its output folder (cached outside the repository, keyed by a
hash of the images' inputs). The real node imports every archive into its containerd and takes
the ``pause`` image as its pod sandbox; tests take the names from here, so a renamed image
cannot leave a test pulling a name nobody built.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

from gpupool.devcluster.binaries import MissingBinariesError, cache_root

MANIFEST = "images.json"
ROLES = ("gpupool", "test-workload", "pause")
SCRIPT = "scripts/build-images.sh"


@dataclass(frozen=True, slots=True)
class ImageSet:
    """One build of the images.

    Attributes:
        folder: The script's output folder.
        names: Image name (``repository:tag``) per role.
        archive_files: OCI archive per role.
    """

    folder: Path
    names: dict[str, str]
    archive_files: dict[str, Path]

    @property
    def pause(self) -> str:
        """The pod sandbox image."""
        return self.names["pause"]

    @property
    def gpupool(self) -> str:
        """The image of gpupool itself (control plane, webhook, agent)."""
        return self.names["gpupool"]

    @property
    def test_workload(self) -> str:
        """The minimal image the end-to-end tests run as workloads."""
        return self.names["test-workload"]

    @property
    def archives(self) -> list[Path]:
        """Every archive, in role order."""
        return [self.archive_files[role] for role in ROLES]


def load(folder: Path) -> ImageSet:
    """Read ``folder/images.json``.

    Raises:
        MissingBinariesError: No manifest, a role missing, or an archive missing (the message
            names it and the script to run).
    """
    path = folder / MANIFEST
    try:
        entries = json.loads(path.read_text())["images"]
    except (OSError, ValueError, KeyError) as error:
        raise MissingBinariesError(f"{path}: no image manifest ({error}); run {SCRIPT}") from None
    names = {entry["role"]: entry["name"] for entry in entries}
    archives = {entry["role"]: folder / entry["archive"] for entry in entries}
    missing = [role for role in ROLES if role not in names or not archives[role].is_file()]
    if missing:
        raise MissingBinariesError(f"{path}: no {', '.join(missing)} image; run {SCRIPT}")
    return ImageSet(folder, names, archives)


def find_images() -> ImageSet:
    """``$GPUPOOL_IMAGES_DIR``, else the newest complete build in the script's cache folder.

    Raises:
        MissingBinariesError: Nothing was built (the message says how to build it).
    """
    value = os.environ.get("GPUPOOL_IMAGES_DIR")
    if value:
        return load(Path(value))
    built = sorted(
        (cache_root() / "images").glob(f"*/{MANIFEST}"), key=lambda path: path.stat().st_mtime
    )
    if not built:
        raise MissingBinariesError(
            f"no images: run `{SCRIPT}` and export GPUPOOL_IMAGES_DIR=<the folder it prints>"
        )
    return load(built[-1].parent)
