"""The on-disk spool: every closed batch is here before it is sent, until the server has it.

One JSON file per batch, named so that names sort oldest first; written to a temporary file,
fsynced and renamed, so a crash leaves either the whole batch or none of it. With
`keep_delivered_s`, a batch the server stored moves to `delivered/` for that long, so a
server restored from a dump older than that can be given the batches again (`manage.py
import_batches`; docs/operations.md, "Backup and restore").
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agent.batch import LIMITS

log = logging.getLogger("agent.spool")


def _stamp_ns(path: Path) -> int:
    """When the batch at `path` was spooled (its name starts with the time in ns)."""
    return int(path.name.split("-", 1)[0].split(".")[0])


@dataclass
class Dropped:
    """What the spool caps threw away."""

    batches: int = 0
    samples: int = 0
    processes: int = 0
    events: int = 0

    @property
    def records(self) -> int:
        return self.samples + self.processes + self.events


class Spool:
    """Pending batches in one folder, refused ones in its `rejected/` folder, delivered ones
    kept a while in `delivered/`."""

    def __init__(self, directory: str | Path, *, max_bytes: int = 512 * 2**20,
                 max_age_s: float = 7 * 86400, keep_delivered_s: float = 0,
                 clock: Callable[[], float] = time.time) -> None:
        self.dir = Path(directory)
        self.rejected_dir = self.dir / "rejected"
        self.rejected_dir.mkdir(parents=True, exist_ok=True)
        self.delivered_dir = self.dir / "delivered"
        self.keep_delivered_s = keep_delivered_s
        self.max_bytes, self.max_age_s, self.clock = max_bytes, max_age_s, clock
        self._lock = threading.Lock()
        for leftover in self.dir.glob(".tmp-*"):
            leftover.unlink()  # a write that a crash interrupted: never renamed, never complete
        self._last_stamp = 0

    def pending(self) -> list[Path]:
        """The spooled batches, oldest first."""
        return sorted(self.dir.glob("*.json"))

    def put(self, batch: dict[str, Any]) -> Dropped:
        """Write `batch` durably, then apply the caps; return what the caps dropped."""
        with self._lock:
            stamp = max(self._last_stamp + 1, int(self.clock() * 1e9))
            self._last_stamp = stamp
            self._write(self.dir / f"{stamp:020d}-{batch['batch_id']}.json", batch)
            return self._enforce_caps()

    def replace(self, path: Path, parts: list[dict[str, Any]]) -> None:
        """Put `parts` in the place of the batch at `path` (same position in the order)."""
        with self._lock:
            stamp = path.name.split("-", 1)[0]
            for number, part in enumerate(parts, 1):
                self._write(self.dir / f"{stamp}.{number}-{part['batch_id']}.json", part)
            path.unlink(missing_ok=True)

    @staticmethod
    def load(path: Path) -> dict[str, Any]:
        """The batch stored at `path`."""
        return json.loads(path.read_bytes())

    def remove(self, path: Path) -> None:
        """Forget a batch the server has stored (keep it in `delivered/` a while, if asked;
        its time there counts from now)."""
        with self._lock:
            if self.keep_delivered_s <= 0 or not path.exists():
                path.unlink(missing_ok=True)
                return
            self.delivered_dir.mkdir(exist_ok=True)
            target = self.delivered_dir / path.name
            os.replace(path, target)
            now = self.clock()
            os.utime(target, (now, now))

    def reject(self, path: Path) -> Path:
        """Move a batch the server refused to `rejected/`, where it is kept but never resent."""
        target = self.rejected_dir / path.name
        with self._lock:
            if path.exists():  # the caps may have dropped it while it was being sent
                os.replace(path, target)
        return target

    def _write(self, path: Path, batch: dict[str, Any]) -> None:
        tmp = self.dir / f".tmp-{path.name}"
        with open(tmp, "wb") as f:
            f.write(json.dumps(batch, separators=(",", ":")).encode())
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
        dir_fd = os.open(self.dir, os.O_RDONLY)
        try:
            os.fsync(dir_fd)  # the rename itself must survive a power cut
        finally:
            os.close(dir_fd)

    def _enforce_caps(self) -> Dropped:
        dropped = Dropped()
        files = [(p, p.stat().st_size) for p in self.pending()]
        total = sum(size for _, size in files)
        oldest_kept = (self.clock() - self.max_age_s) * 1e9
        for path, size in files[:-1]:  # the batch just written is never dropped
            too_old = _stamp_ns(path) < oldest_kept
            if total <= self.max_bytes and not too_old:
                break
            try:
                batch = self.load(path)
            except (OSError, ValueError):
                batch = {}
            dropped.batches += 1
            for kind in LIMITS:
                setattr(dropped, kind, getattr(dropped, kind) + len(batch.get(kind, ())))
            path.unlink(missing_ok=True)
            total -= size
        for path in self.rejected_dir.glob("*.json"):
            if _stamp_ns(path) < oldest_kept:
                path.unlink(missing_ok=True)
        delivered_before = self.clock() - self.keep_delivered_s
        for path in self.delivered_dir.glob("*.json"):
            if path.stat().st_mtime < delivered_before:
                path.unlink(missing_ok=True)
        if dropped.batches:
            log.error("event=spool_dropped batches=%d samples=%d processes=%d events=%d",
                      dropped.batches, dropped.samples, dropped.processes, dropped.events)
        return dropped
