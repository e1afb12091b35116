"""Where the control plane may send a request of its own (webhooks; issue 23.6): public addresses only.

One small rule with two moments. At registration a URL must be HTTPS and every address its host
resolves to must be public (`check_url`); at connect time the address the socket actually reached is
checked again (`check_address`, called by the HTTP adapter on the connected socket), so a DNS answer
that changes after registration (rebinding) cannot reach the metadata service or the VPC.

Refused: private (RFC 1918, ULA), loopback, link-local (169.254/16, where the instance metadata
service lives, and fe80::/10), multicast, reserved, unspecified, shared (100.64/10) and documentation
ranges, and IPv4 addresses hidden in IPv6 (::ffff:a.b.c.d, 6to4, Teredo) by what they hide. Local mode
(`allow_loopback`) also accepts loopback receivers, over http or https, and nothing else private.
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Callable, Sequence
from urllib.parse import urlsplit

Resolver = Callable[[str, int], Sequence[str]]


class AddressRefused(ValueError):
    """The URL or the address it reaches is not one the control plane may call; the message says why."""


def resolve(host: str, port: int) -> list[str]:
    """Every address `host` resolves to (A and AAAA)."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (OSError, ValueError) as exc:  # gaierror; UnicodeError (a label over 63), an embedded NUL
        raise AddressRefused(f"the host {host!r} does not resolve ({exc})") from exc
    return sorted({str(info[4][0]) for info in infos})


def _embedded_ipv4(ip: ipaddress.IPv6Address) -> ipaddress.IPv4Address | None:
    if ip.ipv4_mapped is not None:
        return ip.ipv4_mapped
    if ip.sixtofour is not None:
        return ip.sixtofour
    if ip.teredo is not None:
        return ip.teredo[1]
    return None


def check_address(address: str, *, allow_loopback: bool = False) -> None:
    """Refuse an address that is not public (AddressRefused); loopback only where `allow_loopback`."""
    try:
        ip = ipaddress.ip_address(address.split("%", 1)[0])  # drop an IPv6 zone id
    except ValueError as exc:
        raise AddressRefused(f"{address!r} is not an IP address") from exc
    if isinstance(ip, ipaddress.IPv6Address):
        embedded = _embedded_ipv4(ip)
        if embedded is not None:
            check_address(str(embedded), allow_loopback=allow_loopback)
            return
    if ip.is_loopback:
        if allow_loopback:
            return
        raise AddressRefused(f"{ip} is a loopback address")
    if not ip.is_global or ip.is_multicast or ip.is_reserved or ip.is_unspecified or ip.is_link_local:
        raise AddressRefused(f"{ip} is not a public address (private, link-local, metadata, shared or reserved)")


def check_url(url: str, *, allow_loopback: bool = False, resolver: Resolver = resolve) -> list[str]:
    """Refuse a URL the control plane may not call; returns the addresses its host resolves to now.

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
