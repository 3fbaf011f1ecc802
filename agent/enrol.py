"""Bootstrap enrolment (agent-enrolment.md): with no node token yet, the agent trades its
cluster's bootstrap secret for its node's own token, once, and keeps it in the token file."""

from __future__ import annotations

import json
import logging
import os
import ssl
import tempfile
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path

log = logging.getLogger("agent.enrol")

PATH = "/api/v1/agent/enrol"
TIMEOUT_S = 30.0
RETRY_S = 30.0  # the server or its database is not reachable yet: try again


class EnrolError(Exception):
    """The server refused the enrolment; only a person can fix it (the message says how)."""


def token_present(token_file: str | Path) -> bool:
    """True when the token file holds something (the agent then never enrols)."""
    try:
        return bool(Path(token_file).read_text().strip())
    except OSError:
        return False


def _write_private(path: Path, text: str) -> None:
    """Write `text` to `path` with mode 0600, atomically (a crash leaves no half token)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".token-")
    try:
        os.fchmod(fd, 0o600)
        with os.fdopen(fd, "w") as out:
            out.write(text + "\n")
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def enrol_request(*, server: str, bootstrap_secret: str, node_name: str,
                  ca_file: str | None, timeout_s: float = TIMEOUT_S) -> str:
    """One enrolment; the node token. Raises EnrolError on a refusal, OSError when the
    server cannot be reached or answers 5xx (worth retrying)."""
    request = urllib.request.Request(
        server.rstrip("/") + PATH, method="POST",
        data=json.dumps({"node_name": node_name}).encode(),
        headers={"Authorization": f"Bearer {bootstrap_secret}",
                 "Content-Type": "application/json"})
    context = ssl.create_default_context(cafile=ca_file) if ca_file else None
    opener = urllib.request.build_opener(urllib.request.HTTPSHandler(context=context))
    try:
        with opener.open(request, timeout=timeout_s) as response:
            return json.loads(response.read())["token"]
    except urllib.error.HTTPError as exc:
        if exc.code >= 500:
            raise OSError(f"server answered {exc.code}") from None
        try:
            detail = json.loads(exc.read()).get("detail", "")
        except ValueError:
            detail = ""
        raise EnrolError(f"enrolment of {node_name} refused ({exc.code}): {detail}") from None
    except (KeyError, ValueError, TypeError):
        raise OSError("the server's answer has no token") from None


def enrol_if_needed(*, server: str, token_file: str, bootstrap_file: str | None,
                    node_name: str, ca_file: str | None,
                    wait: Callable[[float], bool]) -> bool:
    """Enrol when the token file is empty and a bootstrap secret is given; True when the
    agent has a token to run with. Retries while the server is unreachable (`wait(s)`
    returns True to stop); raises EnrolError when the server refuses."""
    if token_present(token_file) or not bootstrap_file:
        return True
    secret = Path(bootstrap_file).read_text().strip()
    if not secret:
        raise EnrolError(f"bootstrap secret file {bootstrap_file} is empty")
    while True:
        try:
            token = enrol_request(server=server, bootstrap_secret=secret, node_name=node_name,
                                  ca_file=ca_file)
        except OSError as exc:
            log.warning("event=enrol_retry node=%s error=%r retry_s=%s", node_name, str(exc),
                        RETRY_S)
            if wait(RETRY_S):
                return False
            continue
        _write_private(Path(token_file), token)
        log.info("event=enrolled node=%s token_file=%s", node_name, token_file)
        return True
