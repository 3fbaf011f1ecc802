"""Delivery: spooled batches to `POST /api/v1/agent/batches`, oldest first, per the status table."""

from __future__ import annotations

import email.utils
import gzip
import json
import logging
import random
import ssl
import stat
import threading
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agent.batch import split_batch
from agent.spool import Spool
from agent.windows import iso

log = logging.getLogger("agent.send")

BACKOFF_BASE_S = 2.0
BACKOFF_CAP_S = 300.0
SLOW_RETRY_S = 60.0  # 401 and 422 wait for a person or a rolling upgrade: no point hurrying
GZIP_ABOVE_BYTES = 8192
TIMEOUT_S = 30.0
PATH = "/api/v1/agent/batches"


class TokenError(Exception):
    """The token file cannot be used; the message says why and what to do."""


class TokenFile:
    """The node token, re-read whenever its file changes (rotation needs no restart)."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._seen: tuple[int, int, int] | None = None
        self._token = ""

    def read(self, force: bool = False) -> str:
        """The current token; raises TokenError for a missing, empty or shared file."""
        try:
            st = self.path.stat()
        except OSError as exc:
            raise TokenError(f"cannot read token file {self.path}: {exc.strerror}") from None
        if st.st_mode & (stat.S_IRWXG | stat.S_IRWXO):
            raise TokenError(f"token file {self.path} is accessible by group or others "
                             f"(mode {stat.S_IMODE(st.st_mode):04o}); run: chmod 600 {self.path}")
        key = (st.st_ino, st.st_mtime_ns, st.st_size)
        if force or key != self._seen:
            token = self.path.read_text().strip()
            if not token:
                raise TokenError(f"token file {self.path} is empty")
            self._token, self._seen = token, key
        return self._token


@dataclass
class Outcome:
    """What one attempt to send the oldest batch led to."""

    delivered: bool  # the spool moved on (stored, quarantined or split)
    retry_after_s: float | None = None
    slow: bool = False


def _detail(body: str) -> str:
    """The server's `detail` of a refusal (its first characters when it is not our JSON)."""
    try:
        found = json.loads(body)
    except ValueError:
        return body[:300]
    return str(found.get("detail", ""))[:300] if isinstance(found, dict) else body[:300]


def parse_retry_after(value: str | None, now: float) -> float | None:
    """Seconds to wait from a Retry-After header (delta-seconds or an HTTP date)."""
    if not value:
        return None
    if value.strip().isdigit():
        return float(value.strip())
    try:
        return max(0.0, email.utils.parsedate_to_datetime(value).timestamp() - now)
    except (TypeError, ValueError):
        return None


class Sender:
    """Sends the spool's batches one at a time; never loses one, never quarantines on doubt."""

    def __init__(self, *, spool: Spool, server: str, token: TokenFile, ca_file: str | None,
                 clock: Callable[[], float], node_status: Callable[[], dict[str, int]],
                 rng: random.Random | None = None, timeout_s: float = TIMEOUT_S) -> None:
        self.spool, self.token, self.clock = spool, token, clock
        self.url = server.rstrip("/") + PATH
        self.node_status = node_status
        self.rng = rng or random.Random()
        self.timeout_s = timeout_s
        context = ssl.create_default_context(cafile=ca_file) if ca_file else None
        self._opener = urllib.request.build_opener(urllib.request.HTTPSHandler(context=context))
        self.failures = 0

    def backoff_s(self, outcome: Outcome) -> float:
        """Full-jitter exponential backoff, at least Retry-After, slower for 401 and 422."""
        delay = self.rng.uniform(0, min(BACKOFF_CAP_S, BACKOFF_BASE_S * 2 ** self.failures))
        if outcome.slow:
            delay = max(delay, SLOW_RETRY_S)
        return max(delay, outcome.retry_after_s or 0.0)

    def drain(self, wait: Callable[[float], bool], *, retry: bool = True) -> bool:
        """Send until the spool is empty; between failures `wait(s)` (True: stop). True if empty."""
        while True:
            pending = self.spool.pending()
            if not pending:
                return True
            outcome = self.send(pending[0])
            if outcome.delivered:
                self.failures = 0
                continue
            if not retry:
                return False
            delay = self.backoff_s(outcome)
            self.failures += 1
            if wait(delay):
                return False

    def send(self, path: Path) -> Outcome:
        """One attempt at the batch spooled at `path`, acting on the answer as the protocol says."""
        try:
            batch = self.spool.load(path)
        except FileNotFoundError:
            return Outcome(True)  # the spool cap dropped it meanwhile
        except ValueError:
            log.error("event=batch_unreadable file=%s action=rejected", path.name)
            self.spool.reject(path)
            return Outcome(True)
        batch_id = batch["batch_id"]
        batch["sent_at"] = iso(self.clock())
        batch["node"].update(self.node_status())
        try:
            status, headers, body = self._post(batch)
        except TokenError as exc:
            log.error("event=token_unusable error=%r", str(exc))
            return Outcome(False, slow=True)
        except OSError as exc:
            log.warning("event=send_failed batch=%s error=%r", batch_id, str(exc))
            return Outcome(False)
        if status in (200, 202):
            self.spool.remove(path)
            self._log_stored(batch, status, body)
            return Outcome(True)
        if status == 400:
            target = self.spool.reject(path)
            log.error("event=batch_refused batch=%s status=400 moved_to=%s problems=%s",
                      batch_id, target, body[:2000])
            return Outcome(True)
        if status == 401:
            log.error("event=unauthorized batch=%s detail=%r action=reread_token_and_retry",
                      batch_id, "the server does not accept this node's token")
            try:
                self.token.read(force=True)
            except TokenError as exc:
                log.error("event=token_unusable error=%r", str(exc))
            return Outcome(False, slow=True)
        if status == 413:
            return self._split(path, batch)
        if status == 422:
            log.error("event=server_refuses_version batch=%s detail=%r action=keep_spooling",
                      batch_id, _detail(body))
        retry_after = parse_retry_after(headers.get("Retry-After"), self.clock())
        log.warning("event=send_deferred batch=%s status=%d retry_after=%s body=%r", batch_id,
                    status, retry_after, body[:300])
        return Outcome(False, retry_after_s=retry_after, slow=status == 422)

    def _post(self, batch: dict[str, Any]) -> tuple[int, Any, str]:
        body = json.dumps(batch, separators=(",", ":")).encode()
        headers = {"Authorization": f"Bearer {self.token.read()}",
                   "Content-Type": "application/json", "Idempotency-Key": batch["batch_id"]}
        if len(body) > GZIP_ABOVE_BYTES:
            body = gzip.compress(body, compresslevel=6)
            headers["Content-Encoding"] = "gzip"
        request = urllib.request.Request(self.url, data=body, headers=headers, method="POST")
        try:
            with self._opener.open(request, timeout=self.timeout_s) as response:
                return response.status, response.headers, response.read().decode(errors="replace")
        except urllib.error.HTTPError as exc:
            with exc:
                return exc.code, exc.headers, exc.read().decode(errors="replace")

    def _split(self, path: Path, batch: dict[str, Any]) -> Outcome:
        parts = split_batch(batch)
        if parts is None:
            target = self.spool.reject(path)
            log.error("event=batch_too_large batch=%s records=1 moved_to=%s", batch["batch_id"],
                      target)
        else:
            self.spool.replace(path, parts)
            log.warning("event=batch_split batch=%s parts=%s", batch["batch_id"],
                        ",".join(p["batch_id"] for p in parts))
        return Outcome(True)

    @staticmethod
    def _log_stored(batch: dict[str, Any], status: int, body: str) -> None:
        try:
            answer = json.loads(body) if body else {}
        except ValueError:
            answer = {}
        answer = answer if isinstance(answer, dict) else {}
        log.info("event=batch_sent batch=%s status=%d samples=%d processes=%d events=%d "
                 "rejected=%d nulled=%d", batch["batch_id"], status, len(batch["samples"]),
                 len(batch["processes"]), len(batch["events"]),
                 len(answer.get("rejected") or ()), len(answer.get("nulled") or ()))
        for kind in ("rejected", "nulled"):
            for item in answer.get(kind) or ():
                log.warning("event=record_%s batch=%s item=%s", kind, batch["batch_id"], item)


def run_sender(sender: Sender, *, stop: threading.Event, wake: threading.Event,
               jitter_s: float, wait: Callable[[float], bool]) -> None:
    """The sender thread: after each wake-up, a fleet-spreading pause, then drain the spool."""
    while not stop.is_set():
        wake.wait()
        wake.clear()
        if stop.is_set() or wait(sender.rng.uniform(0, jitter_s)):
            return
        sender.drain(wait)

