"""The optional state file: the world as JSON, replaced atomically, never half-written."""

from __future__ import annotations

import json
import os
from pathlib import Path

from pydantic import ValidationError

from agent_jobs.sim.errors import StateFileError
from agent_jobs.sim.models import WorldData, describe


def read(path: Path) -> WorldData | None:
    """The world saved at `path`, or None when there is no file yet (a first start)."""
    try:
        raw = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    if not raw.strip():
        return None
    try:
        return WorldData.model_validate(json.loads(raw))
    except json.JSONDecodeError as e:
        raise StateFileError(f"{path}: not JSON ({e})") from e
    except ValidationError as e:
        raise StateFileError(f"{path}: not a sim world ({describe(e)})") from e


def write(path: Path, world: WorldData) -> None:
    """Write a sibling temp file, fsync, rename it over `path`: readers see old or new."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    data = json.dumps(world.model_dump(mode="json"), indent=2, sort_keys=True) + "\n"
    with tmp.open("w", encoding="utf-8") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    _fsync_dir(path.parent)


def _fsync_dir(directory: Path) -> None:
    # The rename is only durable once the directory entry is; not every platform lets us open one.
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
