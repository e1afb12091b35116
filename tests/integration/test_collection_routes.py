"""The routes every collection has, declared once (functions/handlers/collection.py), and the router rules
they follow (functions/handlers/errors.py ResourceRules): a page's parameters, unknown ones refused where
the router says so, another principal's resource 404, a delete answered 204 without a body.

The walk of every route as four callers (test_every_route_principals.py) proves the principals; this file
proves what the collection's routes add: the page parameters, the query-parameter rule per router, the
names and signatures Powertools documents.
"""

from __future__ import annotations

import inspect

from functions.handlers import api
from tests.helpers.api_lambda import Api
from tests.helpers.events import Caller
from tests.helpers.jobs import ALICE, BOB
from tests.helpers.retraining import policy_body

ALICE_CALLER = Caller("alice", ALICE, unique_id="AIDAEXAMPLEALICE")
BOB_CALLER = Caller("bob", BOB, unique_id="AIDAEXAMPLEBOB")
WEBHOOK = {"url": "https://93.184.215.14/hook", "event_types": ["job.*"]}  # an address literal: no DNS in tests


def test_a_page_of_policies_follows_limit_and_next_token_and_refuses_a_misspelt_parameter(call: Api) -> None:
    # Given three of Alice's policies
    for n in range(3):
        assert call.route("POST", "/retraining-policies", caller=ALICE_CALLER, body=policy_body(name=f"p{n}")).status == 201
    # When she pages them two at a time
    first = call.route("GET", "/retraining-policies", caller=ALICE_CALLER, query={"limit": "2"})
    second = call.route("GET", "/retraining-policies", caller=ALICE_CALLER, query={"limit": "2", "next_token": first.body["next_token"]})
    # Then the pages hold all three, once each
    assert first.status == second.status == 200
    names = [p["name"] for p in first.body["policies"] + second.body["policies"]]
    assert sorted(names) == ["p0", "p1", "p2"]
    # And a misspelt parameter is a 422 naming it, a limit out of bounds a 422 too
    misspelt = call.route("GET", "/retraining-policies", caller=ALICE_CALLER, query={"limt": "2"})
    assert misspelt.status == 422
    assert misspelt.body["errors"][0]["field"] == "limt"
    assert call.route("GET", "/retraining-policies", caller=ALICE_CALLER, query={"limit": "201"}).status == 422


def test_a_webhook_route_refuses_any_query_parameter_but_the_deliveries_limit(call: Api) -> None:
    # Given Alice's webhook
    created = call.route("POST", "/webhooks", caller=ALICE_CALLER, body=WEBHOOK)
    assert created.status == 201
    webhook = {"webhook_id": created.body["webhook_id"]}
    # When she reads it with a parameter no webhook route takes, then its deliveries with `limit`
    stray = call.route("GET", "/webhooks/{webhook_id}", webhook, caller=ALICE_CALLER, query={"verbose": "1"})
    deliveries = call.route("GET", "/webhooks/{webhook_id}/deliveries", webhook, caller=ALICE_CALLER, query={"limit": "5"})
    # Then the first is a 422 naming it (the router's rule), the second is answered
    assert stray.status == 422
    assert stray.body["errors"][0]["field"] == "verbose"
    assert deliveries.status == 200
    assert call.route("DELETE", "/webhooks/{webhook_id}", webhook, caller=ALICE_CALLER, query={"force": "1"}).status == 422


def test_a_policy_is_another_principals_404_and_its_delete_is_a_bodyless_204(call: Api) -> None:
    # Given Alice's policy
    created = call.route("POST", "/retraining-policies", caller=ALICE_CALLER, body=policy_body(name="mine"))
    policy = {"policy_id": created.body["policy_id"]}
    # When Bob reads and deletes it, then Alice deletes it
    assert call.route("GET", "/retraining-policies/{policy_id}", policy, caller=BOB_CALLER).status == 404
    assert call.route("DELETE", "/retraining-policies/{policy_id}", policy, caller=BOB_CALLER).status == 404
    deleted = call.route("DELETE", "/retraining-policies/{policy_id}", policy, caller=ALICE_CALLER)
    # Then hers is gone, and the answer had no body
    assert (deleted.status, deleted.body) == (204, None)
    assert call.route("GET", "/retraining-policies/{policy_id}", policy, caller=ALICE_CALLER).status == 404


def test_each_declared_route_has_its_own_name_and_the_signature_powertools_reads() -> None:
    routes = {(r.method, r.openapi_path): r.func for r in [*api.app._static_routes, *api.app._dynamic_routes]}
    expected = {
        ("GET", "/sweeps"): ("list_sweeps", ["limit", "next_token"]),
        ("GET", "/sweeps/{sweep_id}"): ("get_sweep", ["sweep_id"]),
        ("DELETE", "/sweeps/{sweep_id}"): ("delete_sweep", ["sweep_id"]),
        ("GET", "/retraining-policies"): ("list_policies", ["limit", "next_token"]),
        ("GET", "/retraining-policies/{policy_id}"): ("get_policy", ["policy_id"]),
        ("DELETE", "/retraining-policies/{policy_id}"): ("delete_policy", ["policy_id"]),
        ("GET", "/webhooks/{webhook_id}"): ("get_webhook", ["webhook_id"]),
        ("DELETE", "/webhooks/{webhook_id}"): ("delete_webhook", ["webhook_id"]),
    }
    for key, (name, parameters) in expected.items():
        func = routes[key]
        assert func.__name__ == name, key
        assert list(inspect.signature(func).parameters) == parameters, key
