"""Where a telemetry source may send gpuquota: an admin names the URL, but an admin is not
the network's owner, so a source never reaches the server's own neighbourhood unless the
site says so (`TELEMETRY_ALLOWED_NETWORKS`).

- Refused: every address that is not globally routable (loopback, link-local with the
  cloud metadata service, private and shared ranges, multicast, reserved, unspecified,
  IPv4 inside IPv6), in any spelling (`2130706433`, `0177.0.0.1`, `[::ffff:127.0.0.1]`)
  and behind any name: a name is refused when any of its addresses is.
- The check is made where the connection is opened, on the address connected to (a name
  that resolves elsewhere between the check and the connection gains nothing), and when
  a source is saved, for a clear message.
- `user:password@` in a URL is refused: credentials go in the source's encrypted field.
- Redirects are followed only to the same scheme, host and port (`redirect_check`)."""

import ipaddress
import socket
from functools import lru_cache
from urllib.parse import urljoin, urlsplit

from django.core.exceptions import ImproperlyConfigured
from requests.adapters import HTTPAdapter
from urllib3.connection import HTTPConnection, HTTPSConnection
from urllib3.connectionpool import HTTPConnectionPool, HTTPSConnectionPool

from gpuquota.telemetry import conf

Address = ipaddress.IPv4Address | ipaddress.IPv6Address


class AddressRefused(Exception):
    """A URL or address a source may not reach; the message says why, without secrets."""


@lru_cache(maxsize=8)
def _networks(raw: str) -> tuple:
    networks = []
    for item in (part.strip() for part in raw.split(",")):
        if not item:
            continue
        try:
            networks.append(ipaddress.ip_network(item, strict=False))
        except ValueError as exc:
            raise ImproperlyConfigured(
                f"TELEMETRY_ALLOWED_NETWORKS: {item!r} is not a network (CIDR such as "
                f"10.20.0.0/16 or 127.0.0.1/32)") from exc
    return tuple(networks)


def allowed_networks() -> tuple:
    """The networks the site lets sources reach although they are not public."""
    return _networks(conf.allowed_networks_raw())


NAT64 = ipaddress.ip_network("64:ff9b::/96")


def _embedded(ip: Address) -> ipaddress.IPv4Address | None:
    """The IPv4 address an IPv6 one carries (mapped, 6to4, NAT64), if any."""
    if ip.version == 4:
        return None
    if ip in NAT64:
        return ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
    return ip.ipv4_mapped or ip.sixtofour


def address_refusal(address: str, *, networks: tuple | None = None,
                    setting: str = "TELEMETRY_ALLOWED_NETWORKS",
                    who: str = "telemetry sources") -> str | None:
    """Why a source may not connect to `address` (an IP literal), or None when it may.
    Another kind of outbound URL (a notification channel) passes its own allowed `networks`
    and the name of the `setting` that lists them."""
    ip: Address = ipaddress.ip_address(address.split("%", 1)[0])
    embedded = _embedded(ip)
    seen = [ip] if embedded is None else [ip, embedded]
    networks = allowed_networks() if networks is None else networks
    if any(found in network for found in seen for network in networks
           if found.version == network.version):
        return None
    if all(found.is_global for found in seen):
        return None
    shown = embedded or ip
    kind = ("loopback" if shown.is_loopback else "link-local" if shown.is_link_local
            else "private" if shown.is_private else "not a public address")
    return f"{shown} is {kind}; {who} reach it only when {setting} lists its network"


def _addresses(host: str, port: int) -> list[str]:
    try:
        found = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError) as exc:
        raise AddressRefused(f"{host} does not resolve ({exc})") from exc
    return list(dict.fromkeys(info[4][0] for info in found))


def url_refusal(url: str, *, resolve: bool = True, refusal=address_refusal) -> str | None:
    """Why a source may not use `url`, or None: not http(s), credentials in it, no host,
    a bad port, or (with `resolve`) a host with an address it may not reach. A name that
    does not resolve here is left to the pull (it may resolve from the workers)."""
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        return "not a valid URL (its host or port)"
    if parts.scheme not in ("http", "https"):
        return "only http:// and https:// URLs"
    if "@" in parts.netloc:
        return ("no user or password in the URL: put the credentials in the source's "
                "authentication fields (stored encrypted)")
    if not parts.hostname:
        return "the URL names no host"
    try:
        return refusal(parts.hostname)  # an address literal (a zone id too)
    except ValueError:
        pass
    if not resolve:
        return None
    try:
        addresses = _addresses(parts.hostname, port or (443 if parts.scheme == "https" else 80))
    except AddressRefused:
        return None
    for address in addresses:
        why = refusal(address)
        if why:
            return why
    return None


def redirect_check(url: str, location: str) -> str:
    """The absolute URL a redirect from `url` points to; AddressRefused when it leaves
    the scheme, host or port of `url`."""
    target = urljoin(url, location)
    before, after = urlsplit(url), urlsplit(target)
    if (before.scheme, before.hostname, before.port) != (after.scheme, after.hostname,
                                                          after.port) or "@" in after.netloc:
        raise AddressRefused("redirected to another host or port; not followed")
    return target


class _Guarded:
    """Resolve the host, refuse if any address may not be reached, connect to a checked
    address (never a second resolution)."""

    refusal = staticmethod(address_refusal)

    def _new_conn(self):
        host = self._dns_host
        addresses = _addresses(host, self.port)
        for address in addresses:
            why = self.refusal(address)
            if why:
                raise AddressRefused(f"{host}: {why}")
        self._dns_host = addresses[0]
        try:
            return super()._new_conn()
        finally:
            self._dns_host = host


class GuardedHTTPConnection(_Guarded, HTTPConnection):
    pass


class GuardedHTTPSConnection(_Guarded, HTTPSConnection):
    pass


class _GuardedHTTPPool(HTTPConnectionPool):
    ConnectionCls = GuardedHTTPConnection


class _GuardedHTTPSPool(HTTPSConnectionPool):
    ConnectionCls = GuardedHTTPSConnection


class GuardedAdapter(HTTPAdapter):
    """requests' adapter whose connections go only where `address_refusal` allows."""

    def init_poolmanager(self, *args, **kwargs):
        super().init_poolmanager(*args, **kwargs)
        self.poolmanager.pool_classes_by_scheme = {"http": _GuardedHTTPPool,
                                                   "https": _GuardedHTTPSPool}


def adapter_for(refusal) -> HTTPAdapter:
    """A guarded adapter whose connections ask `refusal(address)` instead of the telemetry
    sources' rule (the notification channels' own allowed networks)."""
    rule = staticmethod(refusal)
    http = type("Http", (_GuardedHTTPPool,), {
        "ConnectionCls": type("Conn", (GuardedHTTPConnection,), {"refusal": rule})})
    https = type("Https", (_GuardedHTTPSPool,), {
        "ConnectionCls": type("Conn", (GuardedHTTPSConnection,), {"refusal": rule})})

    class _Adapter(HTTPAdapter):
        def init_poolmanager(self, *args, **kwargs):
            super().init_poolmanager(*args, **kwargs)
            self.poolmanager.pool_classes_by_scheme = {"http": http, "https": https}

    return _Adapter()
