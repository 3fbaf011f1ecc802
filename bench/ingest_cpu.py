"""What `bench.ingest` reads of CPU time: the server's processes and their PostgreSQL
backends over a round, and the rollup sweep run beside the senders (`--sweep`).

Wall rates on a shared machine move with whatever else runs; CPU seconds per sample do
much less, so the bench compares both: COPY's (its process and its backend) against the
server's (gunicorn's processes and the backends of their connections)."""

import os
import threading
import time

from bench.table_stats import backend_cpu_s

SWEEPER = "gq-bench-sweeper"  # the sweeper's application_name: its backend is not the server's


def children(pid: int) -> list[int]:
    """The processes whose parent is `pid` (gunicorn's workers)."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as stat:
                fields = stat.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            found.append(int(entry))
    return found


def _cpu_s(pid: int) -> float | None:
    try:
        return backend_cpu_s(pid)
    except OSError:
        return None  # ended


class ServerCpu:
    """CPU seconds of the server's processes (`pids`) and of the database's client backends
    (but the bench's own and the sweeper's) between `start()` and `stop()`. Read every
    0.2 s, so a backend that ends meanwhile (a connection past its age) loses at most that:
    each pid's last reading counts, from its first (or from 0 if it began meanwhile)."""

    def __init__(self, dsn: str, pids: list[int]):
        import psycopg

        self.conn = psycopg.connect(dsn, autocommit=True)
        self.pids = pids
        self.first: dict[tuple[str, int], float] = {}
        self.last: dict[tuple[str, int], float] = {}
        self._stop = threading.Event()

    def _backends(self) -> list[int]:
        return [
            row[0]
            for row in self.conn.execute(
                "SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND "
                "backend_type = 'client backend' AND pid <> pg_backend_pid() AND "
                "application_name <> %s",
                [SWEEPER],
            )
        ]

    def _read(self, baseline: bool) -> None:
        for kind, pids in (("server", self.pids), ("db", self._backends())):
            for pid in pids:
                value = _cpu_s(pid)
                if value is None:
                    continue
                if baseline:
                    self.first[kind, pid] = value
                self.last[kind, pid] = value

    def _poll(self) -> None:
        while not self._stop.wait(0.2):
            self._read(baseline=False)

    def start(self) -> None:
        self._read(baseline=True)
        self._thread = threading.Thread(target=self._poll, daemon=True)
        self._thread.start()

    def stop(self) -> dict:
        self._stop.set()
        self._thread.join()
        self._read(baseline=False)
        self.conn.close()
        spent = {"server": 0.0, "db": 0.0}
        for (kind, pid), value in self.last.items():
            spent[kind] += value - self.first.get((kind, pid), 0.0)
        return {
            "server_cpu_s": spent["server"],
            "db_cpu_s": spent["db"],
            "cpu_s": spent["server"] + spent["db"],
        }


def sweeper(ready, senders_done, results) -> None:
    """The rollup sweep beside the senders, as beat's task runs it but back to back: every
    mark taken as soon as it is made; after the senders are done, until none is left.
    Puts its CPU (process and backend) and how long the marks took to drain after the
    senders ended."""
    from django.db import connection

    from bench.table_stats import pg_cpu_s
    from gpuquota.outbox.models import DirtyGpuHour
    from gpuquota.usage.sweep import dirty_hours_process

    with connection.cursor() as cursor:
        cursor.execute("SET application_name = %s", [SWEEPER])
    marks, cpu, db = 0, time.process_time(), pg_cpu_s()
    ready.release()
    while not senders_done.is_set():
        done = dirty_hours_process(limit=5000)
        marks += done
        if not done:
            time.sleep(0.1)
    ended = time.perf_counter()
    while DirtyGpuHour.objects.exists():
        marks += dirty_hours_process(limit=5000)
    drain_s = time.perf_counter() - ended
    results.put(
        {"marks": marks, "drain_s": drain_s, "cpu_s": time.process_time() - cpu + pg_cpu_s() - db}
    )
    connection.close()
