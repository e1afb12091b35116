"""The address guard (functions/address_guard.py): public HTTPS only, loopback in local mode only, and the
connect-time check in the webhook sender (functions/adapters/webhooks.py), which a DNS answer that
changes after registration cannot get past."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from functions.adapters.webhooks import HttpWebhookSender
from functions.catalog.address_guard import AddressRefused, check_address, check_url


@pytest.mark.parametrize(
    "address",
    [
        "10.1.2.3",
        "172.16.0.1",
        "192.168.0.1",
        "127.0.0.1",
        "169.254.169.254",
        "100.64.0.1",
        "0.0.0.0",
        "224.0.0.1",
        "::1",
        "fe80::1",
        "fd00::1",
        "::ffff:10.0.0.1",
        "2002:0a00:0001::1",
        "192.0.2.1",
        "240.0.0.1",
    ],
)
def test_addresses_that_are_not_public_are_refused(address: str) -> None:
    with pytest.raises(AddressRefused):
        check_address(address)


@pytest.mark.parametrize("address", ["93.184.215.14", "1.1.1.1", "2606:4700:4700::1111"])
def test_public_addresses_pass(address: str) -> None:
    check_address(address)


def test_loopback_only_where_allowed_and_nothing_else_private() -> None:
    check_address("127.0.0.1", allow_loopback=True)
    check_address("::1", allow_loopback=True)
    with pytest.raises(AddressRefused):
        check_address("10.0.0.1", allow_loopback=True)


def test_a_host_is_judged_by_every_address_it_resolves_to() -> None:
    def rebinding(host: str, port: int) -> list[str]:
        return ["93.184.215.14", "10.0.0.7"]

    with pytest.raises(AddressRefused, match=r"10\.0\.0\.7"):
        check_url("https://hooks.example.com/x", resolver=rebinding)
    assert check_url("https://hooks.example.com/x", resolver=lambda h, p: ["93.184.215.14"]) == ["93.184.215.14"]


def test_http_only_for_a_loopback_receiver_in_local_mode() -> None:
    with pytest.raises(AddressRefused, match="https"):
        check_url("http://93.184.215.14/x")
    with pytest.raises(AddressRefused, match="https"):
        check_url("http://93.184.215.14/x", allow_loopback=True)
    check_url("http://127.0.0.1:8080/x", allow_loopback=True)
    with pytest.raises(AddressRefused, match="loopback"):
        check_url("http://127.0.0.1:8080/x")
    with pytest.raises(AddressRefused, match="https"):
        check_url("ftp://93.184.215.14/x")


@pytest.fixture
def loopback_receiver() -> Iterator[tuple[str, list[bytes]]]:
    received: list[bytes] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            received.append(self.rfile.read(int(self.headers["Content-Length"])))
            self.send_response(503)
            self.send_header("Retry-After", "7")
            self.send_header("Content-Length", "4")
            self.end_headers()
            self.wfile.write(b"busy")

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}/hook", received
    server.shutdown()


def test_the_sender_checks_the_address_it_reaches_at_connect_time(loopback_receiver: tuple[str, list[bytes]]) -> None:
    # Given a URL that passed registration once (e.g. DNS said public) but now reaches a loopback address
    url, received = loopback_receiver
    # When the cloud's sender (no loopback allowed) sends to it
    result = HttpWebhookSender(allow_loopback=False).send(url, b"{}", {"content-type": "application/json"}, 15.0)
    # Then nothing was sent: the connection was refused after connecting, before a byte went out
    assert result.status is None and "loopback" in result.excerpt and received == []


def test_local_modes_sender_reaches_a_loopback_receiver(loopback_receiver: tuple[str, list[bytes]]) -> None:
    url, received = loopback_receiver
    result = HttpWebhookSender(allow_loopback=True).send(url, b'{"a":1}', {"content-type": "application/json"}, 15.0)
    assert (result.status, result.retry_after, result.excerpt) == (503, "7", "busy") and received == [b'{"a":1}']
