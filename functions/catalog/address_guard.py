"""The address guard: may the control plane, or a trainer it starts, be pointed at this host?

ONE rule for every URL a user gives that something of ours will connect to: a tracker server (MLflow's
`http(s)://`, a self-hosted W&B `base_url`; `url_problem`, at submit) and a webhook's receiver (`check_url`
at registration, `check_address` again on the connected socket at delivery, so a DNS answer that changes
after registration, rebinding, cannot reach the metadata service or the VPC). The host is resolved (a name,
an IP literal, or inet_aton's odd spellings such as `2130706433` or `0177.1`) and EVERY address it resolves
to is checked (`address_problem`): loopback, private (RFC 1918, unique-local fc00::/7), link-local
(169.254/16 with the cloud metadata endpoint 169.254.169.254, fe80::/10), shared (100.64/10), unspecified,
multicast, reserved and documentation ranges are refused, also when wrapped in IPv6 (::ffff:a.b.c.d, 6to4,
Teredo, NAT64) by what they wrap. A name that does not resolve is refused: fail closed.

Local mode allows loopback (its servers are on 127.0.0.1); a tracker there may also be on a private address
(the user's own network). Link-local and the metadata endpoint never. docs/SECURITY.md, "Outbound addresses".
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Callable, Iterable, Sequence
from urllib.parse import urlsplit

Address = ipaddress.IPv4Address | ipaddress.IPv6Address
Resolver = Callable[[str], Iterable[str]]  # host -> its addresses (tracker URIs)
PortResolver = Callable[[str, int], Sequence[str]]  # host, port -> its addresses (webhook receivers)

METADATA = ipaddress.ip_address("169.254.169.254")
_NAT64 = ipaddress.ip_network("64:ff9b::/96")


class AddressRefused(ValueError):
    """The URL or the address it reaches is not one the control plane may call; the message says why."""


def resolve_host(host: str) -> list[str]:
    """Every address `host` resolves to (getaddrinfo: names, IP literals, inet_aton spellings)."""
    return sorted({str(info[4][0]).split("%", 1)[0] for info in socket.getaddrinfo(host, None, proto=socket.IPPROTO_TCP)})


def resolve(host: str, port: int) -> list[str]:
    """Every address `host` resolves to (A and AAAA) for a connection to `port`; AddressRefused if none."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (OSError, ValueError) as exc:  # gaierror; UnicodeError (a label over 63), an embedded NUL
        raise AddressRefused(f"the host {host!r} does not resolve ({exc})") from exc
    return sorted({str(info[4][0]) for info in infos})


def _unwrapped(address: Address) -> Address:
    """The IPv4 address an IPv6 one carries (mapped, 6to4, Teredo, NAT64), else itself."""
    if isinstance(address, ipaddress.IPv6Address):
        if address.ipv4_mapped is not None:
            return address.ipv4_mapped
        if address.sixtofour is not None:
            return address.sixtofour
        if address.teredo is not None:
            return address.teredo[1]
        if address in _NAT64:
            return ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
    return address


def address_problem(address: str, *, allow_loopback: bool = False, allow_private: bool = False) -> str | None:
    """Why a connection to this IP address is refused, or None."""
    try:
        ip = _unwrapped(ipaddress.ip_address(address.split("%", 1)[0]))  # an IPv6 zone id is not the address
    except ValueError:
        return f"{address!r} is not an IP address"
    if ip == METADATA or ip.is_link_local:
        return f"{ip} is link-local (the cloud metadata endpoint's range)"
    if ip.is_loopback or ip.is_unspecified:
        return None if allow_loopback else f"{ip} is a loopback address (allowed in local mode only)"
    if ip.is_multicast or ip.is_reserved:
        return f"{ip} is a multicast or reserved address"
    if not ip.is_global:
        return None if allow_private else f"{ip} is a private, shared or reserved address, not a public one"
    return None


def host_problem(host: str, *, allow_loopback: bool = False, allow_private: bool = False, resolve: Resolver | None = None) -> str | None:
    """Why `host` may not be connected to (one of its addresses is refused, or it does not resolve), or None."""
    try:
        addresses = list((resolve or resolve_host)(host))
    except (OSError, UnicodeError) as exc:
        return f"the host {host!r} does not resolve ({exc.__class__.__name__})"
    if not addresses:
        return f"the host {host!r} does not resolve"
    for address in addresses:
        problem = address_problem(address, allow_loopback=allow_loopback, allow_private=allow_private)
        if problem:
            return f"the host {host!r} resolves to {problem}" if address != host.strip("[]") else problem
    return None


def url_problem(url: str, *, local_mode: bool, resolve: Resolver | None = None) -> str | None:
    """A tracker URL's host: outside local mode public addresses only; local mode also loopback and private
    ones. None when the URL may be used (or has no host: the URL's own check says so)."""
    host = urlsplit(url).hostname
    if not host:
        return None
    return host_problem(host, allow_loopback=local_mode, allow_private=local_mode, resolve=resolve)


def check_address(address: str, *, allow_loopback: bool = False) -> None:
    """A webhook delivery's connected address: AddressRefused unless public (loopback where `allow_loopback`)."""
    problem = address_problem(address, allow_loopback=allow_loopback)
    if problem:
        raise AddressRefused(problem)


def check_url(url: str, *, allow_loopback: bool = False, resolver: PortResolver = resolve) -> list[str]:
    """Refuse a webhook URL the control plane may not call; returns the addresses its host resolves to now.

    HTTPS only, except a loopback receiver where `allow_loopback` (local mode). No user info in the URL
    (it would be sent, and logged, as credentials)."""
    try:
        parts = urlsplit(url)
        hostname = parts.hostname
    except ValueError as exc:  # e.g. an unclosed IPv6 bracket
        raise AddressRefused(f"not a URL: {exc}") from exc
    if parts.scheme not in ("https", "http"):
        raise AddressRefused(f"the URL must be https://, not {parts.scheme or 'schemeless'}")
    if not hostname:
        raise AddressRefused("the URL names no host")
    if parts.username or parts.password:
        raise AddressRefused("the URL may not carry a user name or password")
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError as exc:
        raise AddressRefused(f"the URL's port is not a number in 1-65535 ({exc})") from exc
    addresses = list(resolver(hostname, port))
    if not addresses:
        raise AddressRefused(f"the host {hostname!r} resolves to no address")
    for address in addresses:
        check_address(address, allow_loopback=allow_loopback)
    if parts.scheme == "http" and not (allow_loopback and all(ipaddress.ip_address(a.split("%", 1)[0]).is_loopback for a in addresses)):
        raise AddressRefused("the URL must be https:// (plain http only for a loopback receiver in local mode)")
    return addresses
