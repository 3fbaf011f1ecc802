"""One Celery beat at a time (docs/operations.md, "The one beat").

A beat that starts takes a PostgreSQL advisory lock on a connection of its own and holds it
while it runs. A second beat finds the lock taken and stands by: it sends nothing, says who
holds the lock, and takes over within `GPUQUOTA_BEAT_LOCK_CHECK_S` once the first one is gone
(its process died, its host went away: PostgreSQL ends the session and frees the lock). A
beat whose lock connection was lost (PostgreSQL restarted, a network cut) stops at once
unless it can take the lock again, so two never send at the same time. On SQLite (the
embedded default, which runs no beat process) there is nothing to lock.
"""

import logging
import os
import signal
import socket
import threading
import time

from django.db import connections

from gpuquota.core.env import env_int

log = logging.getLogger("gpuquota.beat")
#: The advisory lock's key: "gq-beat" as a bigint, the same for every gpuquota beat.
LOCK_KEY = int.from_bytes(b"gq-beat", "big")
HOLDER = """SELECT a.application_name, a.client_addr, a.backend_start FROM pg_locks l
            JOIN pg_stat_activity a ON a.pid = l.pid
            WHERE l.locktype = 'advisory' AND l.granted
              AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
              AND ((l.classid::bigint << 32) | l.objid::bigint) = %s"""


def check_interval_s() -> int:
    """How often a standby beat tries the lock and the running one checks it holds it
    (`GPUQUOTA_BEAT_LOCK_CHECK_S`, default 10)."""
    return env_int("GPUQUOTA_BEAT_LOCK_CHECK_S", 10, 1)


class BeatLock:
    """The advisory lock of the one running beat, on a connection of its own."""

    def __init__(self) -> None:
        self.name = f"gpuquota-beat {socket.gethostname()} pid {os.getpid()}"
        self.connection = None

    def _connect(self):
        wrapper = connections.create_connection("default")
        params = wrapper.get_connection_params()
        params["application_name"] = self.name
        connection = wrapper.get_new_connection(params)
        connection.autocommit = True
        return connection

    def try_take(self) -> bool:
        """Take the lock if it is free (connecting first if needed)."""
        if self.connection is None or self.connection.closed:
            self.connection = self._connect()
        return bool(self.connection.execute("SELECT pg_try_advisory_lock(%s)",
                                            [LOCK_KEY]).fetchone()[0])

    def holds(self) -> bool:
        """Whether this beat's session still holds the lock (False when it was lost)."""
        try:
            return bool(self.connection.execute(
                "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND granted AND "
                "pid = pg_backend_pid() AND ((classid::bigint << 32) | objid::bigint) = %s",
                [LOCK_KEY]).fetchone()[0])
        except Exception:  # noqa: BLE001 - a lost connection is a lost lock
            return False

    def holder(self) -> str:
        """Who holds the lock, in words, from another session."""
        try:
            row = self.connection.execute(HOLDER, [LOCK_KEY]).fetchone()
        except Exception:  # noqa: BLE001 - only for the log line
            return "another beat"
        if row is None:
            return "nobody now"
        name, address, since = row
        return (f"{name or 'another client'} (from {address or 'a local socket'}, since "
                f"{since:%Y-%m-%d %H:%M} UTC)")

    def wait_and_take(self, *, interval_s: int) -> None:
        """Stand by until the lock is free, then take it."""
        waiting_since = None
        while True:
            try:
                if self.try_take():
                    break
            except Exception as exc:  # noqa: BLE001 - PostgreSQL away: keep standing by
                log.warning("beat lock: cannot reach PostgreSQL (%s); trying again", exc)
                self.connection = None
            else:
                if waiting_since is None or time.monotonic() - waiting_since > 300:
                    log.warning("beat lock: another beat runs (%s): standing by, sending "
                                "nothing, trying every %d s", self.holder(), interval_s)
                    waiting_since = time.monotonic()
            time.sleep(interval_s)
        log.warning("beat lock: taken (%s): this beat runs the schedule", self.name)

    def watch(self, *, interval_s: int) -> None:
        """Check the lock every `interval_s`; lost and not taken back: stop this beat."""
        while True:
            time.sleep(interval_s)
            if self.holds():
                continue
            try:
                self.connection = None
                if self.try_take():
                    log.warning("beat lock: the lock's connection was lost and taken again")
                    continue
            except Exception as exc:  # noqa: BLE001 - PostgreSQL away: it is not ours now
                log.error("beat lock: cannot reach PostgreSQL (%s)", exc)
            log.error("beat lock: lost to %s; stopping this beat (its supervisor restarts "
                      "it, and it stands by)", self.holder() if self.connection else "?")
            os.kill(os.getpid(), signal.SIGTERM)
            return


def beat_lock_hold() -> BeatLock | None:
    """Block until this process is the one beat, then keep checking it is (on PostgreSQL);
    None where there is nothing to lock."""
    if connections["default"].vendor != "postgresql":
        return None
    lock, interval_s = BeatLock(), check_interval_s()
    lock.wait_and_take(interval_s=interval_s)
    threading.Thread(target=lock.watch, kwargs={"interval_s": interval_s},
                     name="beat-lock", daemon=True).start()
    return lock
