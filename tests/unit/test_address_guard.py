"""The address guard (functions/service/address_guard.py): one function that decides whether a host a
user names (a tracker server now, a webhook in issue 23) may be connected to; and its use at submit."""

from __future__ import annotations

import pytest

from functions.catalog import address_guard
from functions.catalog.address_guard import address_problem, host_problem, url_problem

REFUSED_EVERYWHERE = ["169.254.169.254", "169.254.1.1", "fe80::1", "::ffff:169.254.169.254", "224.0.0.1", "240.0.0.1"]
LOOPBACK = ["127.0.0.1", "127.8.9.10", "::1", "::ffff:127.0.0.1", "0.0.0.0", "::"]
PRIVATE = ["10.0.0.5", "172.16.3.4", "192.168.1.1", "100.64.0.1", "fd00::1", "fc00::2", "2002:0a00:0001::1", "64:ff9b::a00:1"]
PUBLIC = ["8.8.8.8", "1.1.1.1", "2606:4700:4700::1111", "::ffff:8.8.8.8"]


@pytest.mark.parametrize("address", REFUSED_EVERYWHERE + LOOPBACK + PRIVATE)
def test_outside_local_mode_only_public_addresses_pass(address: str) -> None:
    assert address_problem(address) is not None


@pytest.mark.parametrize("address", PUBLIC)
def test_public_addresses_pass(address: str) -> None:
    assert address_problem(address) is None


@pytest.mark.parametrize("address", LOOPBACK + PRIVATE)
def test_local_mode_allows_loopback_and_private(address: str) -> None:
    assert address_problem(address, allow_loopback=True, allow_private=True) is None


@pytest.mark.parametrize("address", REFUSED_EVERYWHERE)
def test_link_local_and_the_metadata_endpoint_are_refused_even_in_local_mode(address: str) -> None:
    assert address_problem(address, allow_loopback=True, allow_private=True) is not None


@pytest.mark.parametrize("host", ["2130706433", "0177.0.0.1", "127.1", "0x7f000001", "[::1]", "localhost"])
def test_odd_spellings_of_loopback_are_resolved_and_refused(host: str) -> None:
    # inet_aton's spellings and names need no DNS: getaddrinfo reads them on any machine
    assert "loopback" in str(host_problem(host.strip("[]")))


def test_a_name_is_judged_by_every_address_it_resolves_to() -> None:
    # Given a name with one public and one private address (a DNS answer the caller controls)
    def resolve(host: str) -> list[str]:
        return {"mixed.example": ["8.8.8.8", "10.1.2.3"], "public.example": ["8.8.8.8"]}[host]

    assert "10.1.2.3" in str(host_problem("mixed.example", resolve=resolve))
    assert host_problem("public.example", resolve=resolve) is None


def test_a_name_that_does_not_resolve_is_refused() -> None:
    def resolve(host: str) -> list[str]:
        raise OSError("no such host")

    assert "does not resolve" in str(host_problem("nowhere.example", resolve=resolve))
    assert "does not resolve" in str(url_problem("https://nowhere.example/", local_mode=True, resolve=resolve))


def test_url_problem_reads_the_host_of_the_url(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(address_guard, "resolve_host", lambda host: {"mlflow.corp": ["10.0.0.7"], "127.0.0.1": ["127.0.0.1"]}[host])
    assert "private" in str(url_problem("https://mlflow.corp:5000/x", local_mode=False))
    assert url_problem("https://mlflow.corp:5000/x", local_mode=True) is None
    assert url_problem("http://127.0.0.1:5000", local_mode=True) is None
    assert "loopback" in str(url_problem("http://127.0.0.1:5000", local_mode=False))
