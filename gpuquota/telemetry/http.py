"""HTTP to a source: its auth and TLS settings, a timeout, a size cap, errors named.

Connections go only where `netguard` allows; a redirect is followed only to the same
scheme, host and port; an answer that is not a 200 is described (status, content type,
size), never quoted: a source's errors are shown on pages and in the API."""

from urllib.parse import urlsplit, urlunsplit

import requests

from gpuquota.telemetry import conf
from gpuquota.telemetry.errors import SourceError
from gpuquota.telemetry.models import AuthKind, TelemetrySource
from gpuquota.telemetry.netguard import AddressRefused, GuardedAdapter, redirect_check
from gpuquota.telemetry.secrets import secret_open

USER_AGENT = "gpuquota-telemetry/1"
MAX_REDIRECTS = 3


def session_for(source: TelemetrySource) -> requests.Session:
    """A session carrying the source's credentials and TLS settings, whose connections
    pass the network guard (proxies from the environment are not used: they would
    reach for the source what the guard refuses)."""
    session = requests.Session()
    session.trust_env = False
    adapter = GuardedAdapter()
    session.mount("http://", adapter)
    session.mount("https://", adapter)
    session.headers["User-Agent"] = USER_AGENT
    secret = secret_open(source.secret_encrypted)
    if source.auth == AuthKind.BASIC:
        session.auth = (source.username, secret)
    elif source.auth == AuthKind.BEARER:
        session.headers["Authorization"] = f"Bearer {secret}"
    session.verify = (source.ca_bundle or True) if source.tls_verify else False
    return session


def url_shown(url: str) -> str:
    """The URL without any user:password@ or query: errors are shown on pages."""
    parts = urlsplit(url)
    netloc = parts.netloc.rsplit("@", 1)[-1]
    return urlunsplit(parts._replace(netloc=netloc, query="", fragment=""))


def body_get(session: requests.Session, url: str, *, params=None) -> bytes:
    """The body of a 200 answer, at most TELEMETRY_MAX_RESPONSE_BYTES; SourceError otherwise
    (naming the URL without credentials, never quoting the answer)."""
    shown = url_shown(url)
    for _ in range(MAX_REDIRECTS + 1):
        try:
            with session.get(url, params=params, timeout=conf.HTTP_TIMEOUT_S, stream=True,
                             allow_redirects=False) as answer:
                if answer.is_redirect:
                    url = redirect_check(url, answer.headers.get("Location", ""))
                    continue
                return _body(answer, shown)
        except AddressRefused as exc:
            raise SourceError(f"{shown}: refused: {exc}") from exc
        except requests.exceptions.SSLError as exc:
            raise SourceError(f"{shown}: TLS failed ({_short(exc)})") from exc
        except requests.exceptions.Timeout as exc:
            raise SourceError(f"{shown}: no answer within {conf.HTTP_TIMEOUT_S} s") from exc
        except requests.exceptions.ConnectionError as exc:
            refused = _refusal_in(exc)
            if refused:
                raise SourceError(f"{shown}: refused: {refused}") from exc
            raise SourceError(f"{shown}: cannot connect ({_short(exc)})") from exc
        except requests.exceptions.RequestException as exc:
            raise SourceError(f"{shown}: {_short(exc)}") from exc
    raise SourceError(f"{shown}: more than {MAX_REDIRECTS} redirects")


def _body(answer: requests.Response, shown: str) -> bytes:
    if answer.status_code in (401, 403):
        raise SourceError(f"{shown}: refused with {answer.status_code} (check the "
                          "credentials)")
    if answer.status_code != 200:
        raise SourceError(f"{shown}: answered {answer.status_code} ({described(answer)})")
    chunks, size = [], 0
    for chunk in answer.iter_content(1 << 20):
        size += len(chunk)
        if size > conf.MAX_RESPONSE_BYTES:
            raise SourceError(f"{shown}: the answer is over {conf.MAX_RESPONSE_BYTES} bytes")
        chunks.append(chunk)
    return b"".join(chunks)


def described(answer: requests.Response) -> str:
    """An answer's content type and size, never its text."""
    kind = answer.headers.get("Content-Type", "no content type").split(";")[0].strip()[:60]
    length = answer.headers.get("Content-Length", "")
    size = f"{int(length)} bytes" if length.isdigit() else "size not given"
    return f"{kind}, {size}"


def _refusal_in(exc: Exception) -> str | None:
    """The guard's refusal when urllib3 wrapped it (in a retry error's reason)."""
    seen = exc
    for _ in range(6):
        if isinstance(seen, AddressRefused):
            return str(seen)
        seen = getattr(seen, "reason", None) or seen.__context__ or (
            seen.args[0] if seen.args and isinstance(seen.args[0], BaseException) else None)
        if seen is None:
            return None
    return None


def _short(exc: Exception) -> str:
    return str(exc).split(": ", 1)[-1][:200]
