"""Issue 14 point 2 and the error states: the page and its assets are unsigned, every API call is signed,
the sign-in hand-off is single-use, one principal never sees another's jobs, and the page says what to do
when the credentials are refused or the API does not answer."""

from __future__ import annotations

import re
from collections.abc import Callable

import pytest
import requests

from tests.e2e.conftest import LocalPlane
from tests.e2e.dashboard.jobs import cancel_all, fake_spec, submit
from tests.e2e.dashboard.support import Dashboard, sign_in_url

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


def test_page_and_assets_are_served_unsigned_with_security_headers(fake_plane: LocalPlane) -> None:
    # `trainplane up` prints where the page is
    assert f"dashboard: {fake_plane.api_url}/" in fake_plane.log_path.read_text()
    page = requests.get(fake_plane.api_url + "/", timeout=10)
    assert page.status_code == 200 and page.headers["Content-Type"].startswith("text/html")
    assert "default-src 'self'" in page.headers["Content-Security-Policy"]
    assert page.headers["X-Frame-Options"] == "DENY" and page.headers["X-Content-Type-Options"] == "nosniff"
    scripts = re.findall(r'src="(/assets/[^"]+\.js)"', page.text)
    assert scripts
    asset = requests.get(fake_plane.api_url + scripts[0], timeout=10)
    assert asset.status_code == 200 and "javascript" in asset.headers["Content-Type"]
    assert "immutable" in asset.headers["Cache-Control"]
    # The API beside it still wants a signature
    assert requests.get(fake_plane.api_url + "/jobs", timeout=10).status_code == 403


def test_an_unsigned_call_from_the_page_origin_is_refused(fake_plane: LocalPlane, open_dashboard: Callable[..., Dashboard]) -> None:
    dash = open_dashboard(fake_plane)
    dash.page.wait_for_selector('[data-card="total"]')
    # The page's own origin, same cookies (none): without a SigV4 signature the API refuses
    result = dash.page.evaluate("""async () => { const r = await fetch('/jobs'); return [r.status, await r.text()]; }""")
    assert result[0] == 403 and "Missing Authentication Token" in result[1]
    # A forged signature from the page is refused too: well formed, current, with alice's real key id
    forged = dash.page.evaluate(
        """async ([keyId, region]) => {
        const amzDate = new Date().toISOString().replace(/[-:]/g, '').replace(/\\.\\d{3}/, '');
        const scope = `${amzDate.slice(0, 8)}/${region}/execute-api/aws4_request`;
        const r = await fetch('/jobs', {headers: {'X-Amz-Date': amzDate, Authorization:
          `AWS4-HMAC-SHA256 Credential=${keyId}/${scope}, SignedHeaders=host;x-amz-date, Signature=${'0'.repeat(64)}`}});
        return [r.status, (await r.json()).message]; }""",
        [fake_plane.principal("alice")["access_key_id"], fake_plane.region],
    )
    assert forged[0] == 403 and forged[1].startswith("The request signature we calculated does not match"), forged
    # While the page's own (signed) calls work
    assert dash.page.locator('[data-card="total"] .card-value').inner_text().isdigit()


def test_the_sign_in_code_works_once_and_only_from_loopback_names(fake_plane: LocalPlane, open_dashboard: Callable[..., Dashboard]) -> None:
    url = sign_in_url(fake_plane, "alice")
    code = url.split("#code=")[1]
    assert "code=" not in url.split("#")[0]  # only in the fragment: never sent to a server
    # A foreign Host (DNS rebinding) or Origin is refused, and does not spend the code
    session = fake_plane.api_url + "/_dashboard/session"
    assert requests.post(session, json={"code": code}, headers={"Host": "evil.example:80"}, timeout=10).status_code == 403
    assert requests.post(session, json={"code": code}, headers={"Origin": "http://evil.example"}, timeout=10).status_code == 403
    # The page trades it for alice's keys and takes it off the address bar
    dash = open_dashboard(fake_plane, principal="")
    dash.page.goto(url)
    dash.page.wait_for_selector('[data-testid="principal"]:has-text("alice")')
    assert "code=" not in dash.page.url
    assert dash.page.evaluate("history.length") >= 1 and "code" not in dash.page.evaluate("location.hash")
    # Spent: a second use is refused, and a page opened with it says so
    again = requests.post(session, json={"code": code}, timeout=10)
    assert again.status_code == 403 and "already used" in again.json()["message"]
    other = open_dashboard(fake_plane, principal="")
    other.page.goto(url)
    other.page.wait_for_selector("#banner:has-text('Sign-in failed')")
    assert other.page.locator("h1", has_text="Sign in").is_visible()
    other.shot("sign-in-refused")


def test_another_principals_jobs_are_invisible(fake_plane: LocalPlane, open_dashboard: Callable[..., Dashboard]) -> None:
    admins = submit(fake_plane, fake_spec("admins-private-job", max_steps=2), principal="admin")
    mine = submit(fake_plane, fake_spec("alices-visible-job", max_steps=2))
    try:
        dash = open_dashboard(fake_plane, principal="alice")
        dash.page.wait_for_selector(f'tr[data-job-id="{mine["job_id"]}"]')
        assert dash.page.locator(f'tr[data-job-id="{admins["job_id"]}"]').count() == 0
        dash.page.fill('input[name="q"]', "admins-private")
        dash.page.wait_for_selector("text=No job matches these filters.")
        # Its details page is a 404 for alice, shown as such
        dash.go(f"#/jobs/{admins['job_id']}")
        dash.page.wait_for_selector(".error-state")
        assert "not found" in dash.page.locator(".error-state").inner_text().lower()
        dash.shot("other-principal-job-not-found")
    finally:
        cancel_all(fake_plane, [mine["job_id"]])
        cancel_all(fake_plane, [admins["job_id"]], principal="admin")


def test_refused_credentials_and_an_unreachable_api_say_what_to_do(
    fake_plane: LocalPlane, open_dashboard: Callable[..., Dashboard]
) -> None:
    # Expired / unknown keys: the banner says the credentials were refused and how to sign in again
    dash = open_dashboard(fake_plane)
    dash.page.wait_for_selector('[data-card="total"]')
    dash.page.evaluate(
        """() => sessionStorage.setItem('trainplane.credentials', JSON.stringify(
        {accessKeyId: 'AKIAEXPIREDEXPIRED00', secretAccessKey: 'x'.repeat(40), principal: 'alice'}))"""
    )
    dash.page.reload()
    banner = dash.page.wait_for_selector("#banner:has-text('Credentials refused')")
    assert "trainplane dashboard" in banner.inner_text()
    dash.shot("error-credentials-refused")
    # Temporary credentials past their expiry are not even sent
    dash.page.evaluate(
        """() => sessionStorage.setItem('trainplane.credentials', JSON.stringify(
        {accessKeyId: 'ASIAX', secretAccessKey: 'y', sessionToken: 't', expiration: Date.now() - 60000, principal: 'bob'}))"""
    )
    dash.page.reload()
    dash.page.wait_for_selector("#banner:has-text('expired')")
    # The API not answering: the banner says so and the page recovers by itself when it answers again
    fresh = open_dashboard(fake_plane)
    fresh.page.wait_for_selector('[data-card="total"]')
    fresh.page.route("**/jobs?**", lambda route: route.abort("connectionrefused"))
    fresh.page.route("**/summary", lambda route: route.abort("connectionrefused"))
    fresh.page.wait_for_selector("#banner:has-text('API unreachable')", timeout=15_000)
    fresh.shot("error-api-unreachable")
    fresh.page.unroute("**/jobs?**")
    fresh.page.unroute("**/summary")
    fresh.page.wait_for_selector("#banner", state="hidden", timeout=15_000)
