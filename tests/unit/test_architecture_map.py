"""The folder map that opens docs/architecture.md names every folder of the tree, and only those.

A newcomer finds the room for a change from that map alone, so a folder added, moved or removed
without the map changing fails here.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

REPOSITORY = Path(__file__).resolve().parents[2]
# Subfolders the map names one by one: the rooms of streams/ and the services.
ROOMED = ("streams", "services")


def mapped_folders() -> set[str]:
    """The folders the map names: `name/` at a line's start, `  name/` under the folder above."""
    text = (REPOSITORY / "docs" / "architecture.md").read_text()
    block = text.split("## The map", 1)[1].split("```", 2)[1]
    folders: set[str] = set()
    parent = ""
    for line in block.splitlines():
        match = re.match(r"^( {0,2})([a-z][\w/, ]*?/)(?= |$)", line)
        if match is None:
            continue
        names = [name.strip() for name in match.group(2).split(",")]
        if match.group(1):
            folders.update(f"{parent}/{name.rstrip('/')}" for name in names)
        else:
            parent = names[0].rstrip("/")
            folders.update(name.rstrip("/") for name in names)
    return folders


def tracked_folders() -> set[str]:
    """Every tracked top-level folder, and the subfolders of the roomed ones holding code."""
    files = subprocess.run(
        ["git", "ls-files"], cwd=REPOSITORY, capture_output=True, text=True, check=True
    ).stdout.split()
    folders = {path.split("/")[0] for path in files if "/" in path and not path.startswith(".")}
    folders |= {
        "/".join(path.split("/")[:2])
        for path in files
        if path.split("/")[0] in ROOMED and path.endswith("/__init__.py") and path.count("/") == 2
    }
    return folders


def test_the_map_names_every_folder_of_the_tree_and_no_other() -> None:
    mapped, tracked = mapped_folders(), tracked_folders()
    assert tracked - mapped == set(), f"folders the map does not name: {sorted(tracked - mapped)}"
    assert mapped - tracked == set(), (
        f"folders the map names that do not exist: {sorted(mapped - tracked)}"
    )


def test_the_map_reader_sees_nested_and_shared_lines() -> None:
    """The reader itself: a room under its folder, and `a/, b/` naming two folders."""
    assert {"streams/wire", "compose", "deploy", "core"} <= mapped_folders()
