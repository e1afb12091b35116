"""The address guard: may the control plane, or a trainer it starts, be pointed at this host?

ONE function for every URL a user gives that something of ours will connect to: a tracker server
(MLflow's `http(s)://`, a self-hosted W&B) today, webhooks (issue 23) next. The host is resolved (a name,
an IP literal, or inet_aton's odd spellings such as `2130706433` or `0177.1`) and EVERY address it resolves
to is checked: loopback, private (RFC 1918, unique-local fc00::/7), link-local (169.254/16 with the cloud
metadata endpoint 169.254.169.254, fe80::/10), shared (100.64/10), unspecified, multicast, reserved and
documentation ranges are refused, also when wrapped in IPv6 (::ffff:a.b.c.d, 6to4, NAT64). Local mode
allows loopback (its servers are on 127.0.0.1) and private addresses (the user's own network); link-local
and the metadata endpoint never. A name that does not resolve is refused: fail closed.

The check happens at submit; a name's DNS answer may change later (rebinding), which is why it is also a
guard to call again at connection time (webhook delivery will). docs/SECURITY.md, "Outbound addresses".
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Callable, Iterable
from urllib.parse import urlsplit

Address = ipaddress.IPv4Address | ipaddress.IPv6Address
Resolver = Callable[[str], Iterable[str]]

METADATA = ipaddress.ip_address("169.254.169.254")
_NAT64 = ipaddress.ip_network("64:ff9b::/96")


def resolve_host(host: str) -> list[str]:
    """Every address `host` resolves to (getaddrinfo: names, IP literals, inet_aton spellings)."""
    return sorted({str(info[4][0]).split("%", 1)[0] for info in socket.getaddrinfo(host, None, proto=socket.IPPROTO_TCP)})


def _unwrapped(address: Address) -> Address:
    """The IPv4 address an IPv6 one carries (mapped, 6to4, NAT64), else itself."""
    if isinstance(address, ipaddress.IPv6Address):
        if address.ipv4_mapped is not None:
            return address.ipv4_mapped
        if address.sixtofour is not None:
            return address.sixtofour
        if address in _NAT64:
            return ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
    return address


def address_problem(address: str, *, allow_loopback: bool = False, allow_private: bool = False) -> str | None:
    """Why a connection to this IP address is refused, or None."""
    ip = _unwrapped(ipaddress.ip_address(address))
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
    """The guard for an http(s) URL's host: outside local mode public addresses only; local mode also
    loopback and private ones. None when the URL may be used (or has no host: the URL's own check says so)."""
    host = urlsplit(url).hostname
    if not host:
        return None
    return host_problem(host, allow_loopback=local_mode, allow_private=local_mode, resolve=resolve)
