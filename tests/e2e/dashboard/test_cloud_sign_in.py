"""The cloud sign-in path of the page, in the real browser, with AWS's endpoints stood in by routes: the
Hosted UI redirect with PKCE, the token exchange, the identity pool's GetId / GetCredentialsForIdentity,
and API calls signed with the temporary credentials (session token included). No AWS account needed."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import mimetypes
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, quote, urlsplit

import pytest
from botocore.utils import normalize_url_path

from dashboard_assets import STATIC_DIR
from localmode.sigv4 import canonical_query
from tests.e2e.dashboard.support import DESKTOP

pytestmark = [pytest.mark.e2e]

SITE = "https://dashboard.example"
API = "https://abc123.execute-api.eu-west-1.amazonaws.com/v1/"
HOSTED_UI = "https://trainplane-prod-111122223333.auth.eu-west-1.amazoncognito.com"
IDENTITY = "https://cognito-identity.eu-west-1.amazonaws.com/"
CONFIG = {
    "mode": "cloud",
    "region": "eu-west-1",
    "api_url": API,
    "cognito": {"domain": HOSTED_UI, "client_id": "client123", "user_pool_id": "eu-west-1_Pool", "identity_pool_id": "eu-west-1:pool-id"},
}


ACCESS_KEY_ID, SECRET_KEY, SESSION_TOKEN = "ASIAANA", "s" * 40, "session-token-ana"


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode().rstrip("=")


def signature_problem(method: str, url: str, headers: dict[str, str], body: bytes) -> str | None:
    """What is wrong with a request's SigV4 signature by the temporary keys, or None: the canonical request
    rebuilt from what arrived (the headers the client says it signed, the session token among them) and
    signed with the secret key, as API Gateway's AWS_IAM authorization checks it."""
    fields = dict(part.strip().split("=", 1) for part in headers.get("authorization", "").partition(" ")[2].split(","))
    key_id, day, region, service, terminator = fields["Credential"].split("/")
    signed = fields["SignedHeaders"].split(";")
    if key_id != ACCESS_KEY_ID or "x-amz-security-token" not in signed or "host" not in signed:
        return f"credential {fields['Credential']}, signed headers {signed}"
    parts = urlsplit(url)
    values = {**headers, "host": parts.netloc}
    canonical_headers = "".join(f"{name}:{' '.join(values[name].split())}\n" for name in signed)
    payload = headers.get("x-amz-content-sha256") or hashlib.sha256(body).hexdigest()
    path = quote(normalize_url_path(parts.path), safe="/~")
    canonical = f"{method}\n{path}\n{canonical_query(parts.query)}\n{canonical_headers}\n{';'.join(signed)}\n{payload}"
    scope = f"{day}/{region}/{service}/{terminator}"
    to_sign = f"AWS4-HMAC-SHA256\n{headers['x-amz-date']}\n{scope}\n{hashlib.sha256(canonical.encode()).hexdigest()}"
    key = ("AWS4" + SECRET_KEY).encode()
    for part in (day, region, service, terminator):
        key = hmac.new(key, part.encode(), hashlib.sha256).digest()
    expected = hmac.new(key, to_sign.encode(), hashlib.sha256).hexdigest()
    return None if hmac.compare_digest(expected, fields["Signature"]) else f"signature mismatch over {canonical!r}"


@pytest.fixture
def context(browser: Any) -> Iterator[Any]:
    ctx = browser.new_context(viewport=DESKTOP)
    yield ctx
    ctx.close()


def test_hosted_ui_sign_in_then_every_api_call_signed_with_the_identity_pools_credentials(context: Any, screenshots: Path) -> None:
    seen: dict[str, Any] = {"api": []}
    id_token = ".".join([b64url(b'{"alg":"none"}'), b64url(json.dumps({"email": "ana@example.com"}).encode()), "sig"])

    def site(route: Any) -> None:
        path = urlsplit(route.request.url).path
        if path == "/dashboard-config.json":
            route.fulfill(status=200, body=json.dumps(CONFIG), headers={"Content-Type": "application/json"})
            return
        file = STATIC_DIR / ("index.html" if path == "/" else path.lstrip("/"))
        route.fulfill(status=200, body=file.read_bytes(), headers={"Content-Type": mimetypes.guess_type(file.name)[0] or "text/html"})

    def hosted_ui(route: Any) -> None:
        url = urlsplit(route.request.url)
        if url.path == "/oauth2/authorize":
            seen["authorize"] = parse_qs(url.query)
            q = seen["authorize"]
            # The user signs in; Cognito redirects back with a code
            route.fulfill(status=302, headers={"Location": f"{q['redirect_uri'][0]}?code=auth-code-1&state={q['state'][0]}"})
        elif url.path == "/oauth2/token":
            seen["token"] = parse_qs(route.request.post_data)
            route.fulfill(status=200, body=json.dumps({"id_token": id_token, "access_token": "a", "expires_in": 3600}),
                          headers={"Content-Type": "application/json", "Access-Control-Allow-Origin": SITE})  # fmt: skip
        elif url.path == "/logout":
            seen["logout"] = parse_qs(url.query)
            route.fulfill(status=302, headers={"Location": seen["logout"]["logout_uri"][0]})
        else:
            route.fulfill(status=404)

    def identity(route: Any) -> None:
        cors = {
            "Access-Control-Allow-Origin": SITE,
            "Access-Control-Allow-Headers": "content-type,x-amz-target",
            "Content-Type": "application/json",
        }
        if route.request.method == "OPTIONS":
            route.fulfill(status=200, headers=cors)
            return
        target = route.request.headers["x-amz-target"].split(".")[-1]
        body = json.loads(route.request.post_data)
        seen[target] = body
        if target == "GetId":
            route.fulfill(status=200, body=json.dumps({"IdentityId": "eu-west-1:ana"}), headers=cors)
        else:
            credentials = {"AccessKeyId": ACCESS_KEY_ID, "SecretKey": SECRET_KEY, "SessionToken": SESSION_TOKEN, "Expiration": 4102444800}
            route.fulfill(status=200, body=json.dumps({"IdentityId": "eu-west-1:ana", "Credentials": credentials}), headers=cors)

    def api(route: Any) -> None:
        headers = route.request.headers
        cors = {"Access-Control-Allow-Origin": SITE, "Access-Control-Allow-Headers": "*", "Content-Type": "application/json"}
        if route.request.method == "OPTIONS":
            route.fulfill(status=200, headers=cors)
            return
        seen["api"].append((urlsplit(route.request.url).path, headers.get("authorization", ""), headers.get("x-amz-security-token")))
        path = urlsplit(route.request.url).path
        # The stand-in refuses what API Gateway would: a signature the temporary keys did not make
        problem = signature_problem(route.request.method, route.request.url, headers, route.request.post_data_buffer or b"")
        if problem is not None:
            seen.setdefault("refused", []).append((path, problem))
            route.fulfill(status=403, body=json.dumps({"message": "The request signature we calculated does not match"}), headers=cors)
            return
        body: Any = {"total": 0, "running": 0, "completed": 0, "failed": 0, "queued": 0, "paused": 0, "counts": {}}
        if path.endswith("/jobs"):
            body = {"jobs": [], "next_token": None}
        route.fulfill(status=200, body=json.dumps(body), headers=cors)

    context.route(f"{SITE}/**", site)
    context.route(f"{HOSTED_UI}/**", hosted_ui)
    context.route(f"{IDENTITY}**", identity)
    context.route(f"{API}**", api)
    page = context.new_page()
    page.goto(SITE + "/")
    page.click("text=Sign in with your team account")
    page.wait_for_selector('[data-testid="principal"]:has-text("ana@example.com")')
    page.wait_for_selector("text=No jobs yet.")
    page.screenshot(path=str(screenshots / "cloud-signed-in.png"), full_page=True)
    # PKCE: S256 challenge of the verifier later sent to the token endpoint; the state came back
    authorize, token = seen["authorize"], seen["token"]
    assert (
        authorize["response_type"] == ["code"]
        and authorize["client_id"] == ["client123"]
        and authorize["code_challenge_method"] == ["S256"]
    )
    assert authorize["redirect_uri"] == [SITE + "/"]
    verifier = token["code_verifier"][0]
    assert b64url(hashlib.sha256(verifier.encode()).digest()) == authorize["code_challenge"][0]
    assert token["grant_type"] == ["authorization_code"] and token["code"] == ["auth-code-1"]
    # The identity pool, with the user pool's ID token as the login
    login = {"cognito-idp.eu-west-1.amazonaws.com/eu-west-1_Pool": id_token}
    assert seen["GetId"] == {"IdentityPoolId": "eu-west-1:pool-id", "Logins": login}
    assert seen["GetCredentialsForIdentity"] == {"IdentityId": "eu-west-1:ana", "Logins": login}
    # Every API call is SigV4 with the temporary keys and their session token (each signature verified by
    # the stand-in, the token among the signed headers); the code left the address bar
    assert seen.get("refused", []) == []
    assert seen["api"] and all(
        auth.startswith("AWS4-HMAC-SHA256 Credential=ASIAANA/")
        and "/eu-west-1/execute-api/aws4_request" in auth
        and token_ == "session-token-ana"
        for _, auth, token_ in seen["api"]
    )
    assert "code=" not in page.url and page.url.endswith("#/jobs")
    # Sign out ends the Hosted UI session too, and the keys are gone from the tab
    page.click("text=Sign out")
    page.wait_for_selector("text=Sign in with your team account")
    assert seen["logout"] == {"client_id": ["client123"], "logout_uri": [SITE + "/"]}
    assert page.evaluate("sessionStorage.getItem('trainplane.credentials')") is None
