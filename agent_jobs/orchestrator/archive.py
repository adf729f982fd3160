"""The archive of pruned tasks: gzip'd JSON Lines files, one task per line, written durably.

Each line is `{"task": {...}, "events": [...], "effects": [...], "approvals": [...],
"dead_letters": [...]}` — the rows as the database held them (times in ISO 8601, UTC). A file is
written under a temporary name, flushed to disk, then renamed, so a file that exists is whole. A
prune interrupted after its file was written and before its delete committed archives the same
tasks again next time: readers deduplicate by `task.id` (the newest file wins).

    zcat agent_jobs_archive/tasks-*.jsonl.gz | jq -c 'select(.task.tenant_id == "acme")'
"""

from __future__ import annotations

import gzip
import json
import os
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

NO_ARCHIVE = "none"


class JsonlArchive:
    """A `Writer` for `Store.prune_finished` that appends one file per batch to `directory`."""

    def __init__(self, directory: str | os.PathLike[str]) -> None:
        self.directory = Path(directory)

    def __call__(self, records: list[dict[str, Any]]) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S")
        path = self.directory / f"tasks-{stamp}-{uuid.uuid4().hex[:8]}.jsonl.gz"
        part = path.with_name(path.name + ".part")
        with open(part, "wb") as raw:
            with gzip.GzipFile(fileobj=raw, mode="wb") as gz:
                for record in records:
                    gz.write(json.dumps(record, separators=(",", ":"), default=str).encode())
                    gz.write(b"\n")
            raw.flush()
            os.fsync(raw.fileno())
        os.replace(part, path)
        dir_fd = os.open(self.directory, os.O_RDONLY)
        try:
            os.fsync(dir_fd)  # the rename itself survives a crash
        finally:
            os.close(dir_fd)


def discard(records: list[dict[str, Any]]) -> None:
    """A `Writer` for `AGENT_JOBS_ARCHIVE_DIR=none`: prune without keeping a copy."""


def writer_for(directory: str) -> Any:
    return discard if directory.strip().lower() == NO_ARCHIVE else JsonlArchive(directory)


def read_archive(directory: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """Every archived task, oldest file first, the newest copy of a task winning."""
    seen: dict[str, dict[str, Any]] = {}
    for path in sorted(Path(directory).glob("tasks-*.jsonl.gz")):
        with gzip.open(path, "rt", encoding="utf-8") as f:
            for line in f:
                record = json.loads(line)
                seen[record["task"]["id"]] = record
    return list(seen.values())
