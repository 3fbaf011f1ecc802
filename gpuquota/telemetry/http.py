"""HTTP to a source: its auth and TLS settings, a timeout, a size cap, errors named."""

from urllib.parse import urlsplit, urlunsplit

import requests

from gpuquota.telemetry import conf
from gpuquota.telemetry.errors import SourceError
from gpuquota.telemetry.models import AuthKind, TelemetrySource
from gpuquota.telemetry.secrets import secret_open

USER_AGENT = "gpuquota-telemetry/1"


def session_for(source: TelemetrySource) -> requests.Session:
    """A session carrying the source's credentials and TLS settings."""
    session = requests.Session()
    session.headers["User-Agent"] = USER_AGENT
    secret = secret_open(source.secret_encrypted)
    if source.auth == AuthKind.BASIC:
        session.auth = (source.username, secret)
    elif source.auth == AuthKind.BEARER:
        session.headers["Authorization"] = f"Bearer {secret}"
    session.verify = (source.ca_bundle or True) if source.tls_verify else False
    return session


def url_shown(url: str) -> str:
    """The URL without any user:password@ it may carry: errors are shown on pages."""
    parts = urlsplit(url)
    if "@" not in parts.netloc:
        return url
    return urlunsplit(parts._replace(netloc=parts.netloc.rsplit("@", 1)[1]))


def body_get(session: requests.Session, url: str, *, params=None) -> bytes:
    """The body of a 200 answer, at most TELEMETRY_MAX_RESPONSE_BYTES; SourceError otherwise
    (naming the URL without credentials)."""
    try:
        return _body_get(session, url, params=params)
    except SourceError as exc:
        raise SourceError(exc.reason.replace(url, url_shown(url))) from exc


def _body_get(session: requests.Session, url: str, *, params=None) -> bytes:
    try:
        with session.get(url, params=params, timeout=conf.HTTP_TIMEOUT_S, stream=True) as answer:
            if answer.status_code in (401, 403):
                raise SourceError(f"{url}: refused with {answer.status_code} (check the "
                                  "credentials)")
            if answer.status_code != 200:
                raise SourceError(f"{url}: answered {answer.status_code} "
                                  f"{_excerpt(answer.raw.read(300, decode_content=True))}")
            chunks, size = [], 0
            for chunk in answer.iter_content(1 << 20):
                size += len(chunk)
                if size > conf.MAX_RESPONSE_BYTES:
                    raise SourceError(f"{url}: the answer is over "
                                      f"{conf.MAX_RESPONSE_BYTES} bytes")
                chunks.append(chunk)
            return b"".join(chunks)
    except requests.exceptions.SSLError as exc:
        raise SourceError(f"{url}: TLS failed ({_short(exc)})") from exc
    except requests.exceptions.Timeout as exc:
        raise SourceError(f"{url}: no answer within {conf.HTTP_TIMEOUT_S} s") from exc
    except requests.exceptions.ConnectionError as exc:
        raise SourceError(f"{url}: cannot connect ({_short(exc)})") from exc
    except requests.exceptions.RequestException as exc:
        raise SourceError(f"{url}: {_short(exc)}") from exc


def _excerpt(raw: bytes) -> str:
    return raw.decode("utf-8", "replace").strip()[:200]


def _short(exc: Exception) -> str:
    return str(exc).split(": ", 1)[-1][:200]
