"""Every route of the API, walked as four callers: two dashboard users (Cognito identities of the one
dashboard role, one shared session name) and two IAM users. Each sees only its own.

The routes are the resolver's own list (a new route is walked the day it is registered, and fails here until
the walk knows how to fill its path parameters and body); the four callers each create one of everything
through every creating route, then:
- every listing shows a caller its own and nothing of anyone else's, and the same answer it gave before the
  others created theirs;
- every route that names a resource answers 404 for another's, and changes nothing (the listings after
  the walk are those before it), while the owner gets it;
- a request without a caller is 403 on every route: each asks the one gate (functions/handlers/errors.py
  principal_of, tests/unit/test_route_rules.py).
The sweeps router once read the caller its own way (issue 21): both dashboard users were one principal and
each got the other's sweep.
"""

from __future__ import annotations

import itertools
import json
import re
from collections import defaultdict
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import cache
from typing import Annotated, Any, get_args, get_origin, get_type_hints

import pytest
from aws_lambda_powertools.event_handler.openapi.params import Body
from pydantic import BaseModel

from functions import composition
from functions.handlers import api
from functions.service.paths import principal_key
from schemas.budgets import BudgetPatch, BudgetSpec, OverrideRequest
from schemas.job import SubmitJobRequest
from schemas.retraining import RetrainingPolicyRequest
from schemas.sweeps import SweepRequest
from schemas.train import TrainRequest
from schemas.webhooks import WebhookRequest
from tests.helpers.api_lambda import Api, Reply
from tests.helpers.events import DASHBOARD_SESSION, Caller, dashboard_user, route_event
from tests.helpers.jobs import ALICE, BOB, request_body
from tests.helpers.retraining import policy_body
from tests.helpers.sweeps import sweep_body
from tests.integration.conftest import composed_api

ANA = dashboard_user("ana", "us-east-1:11111111-2222-3333-4444-555555555555")
BEN = dashboard_user("ben", "us-east-1:99999999-8888-7777-6666-555555555555")
CALLERS = (ANA, BEN, Caller("alice", ALICE, unique_id="AIDAEXAMPLEALICE"), Caller("bob", BOB, unique_id="AIDAEXAMPLEBOB"))
RUN_ID = "walk-run"  # every caller's /train run has the same id: one principal's must not be another's
# The deployment's, named by no caller: a training shape (read by any signed caller); a team (each caller reads
# its own, the default team here, and only admins define one).
SHARED_PARAMETERS = {"name", "team"}
# Routes only the deployment's admins may call (none of the four callers is one): each answers them 403, and
# they change nothing. tests/integration/test_teams_api.py walks them as an admin.
ADMIN_ONLY = {("PUT", "/teams/{team}"), ("DELETE", "/teams/{team}"), ("POST", "/budgets/{budget_id}/resume")}


@dataclass(frozen=True)
class Route:
    method: str
    resource: str  # as OpenAPI spells it: /sweeps/{sweep_id}
    body: type[BaseModel] | None
    body_optional: bool

    @property
    def parameters(self) -> tuple[str, ...]:
        return tuple(re.findall(r"{(\w+)}", self.resource))

    @property
    def owned_parameters(self) -> tuple[str, ...]:
        return tuple(p for p in self.parameters if p not in SHARED_PARAMETERS)

    @property
    def creates(self) -> bool:
        return self.method == "POST" and not self.parameters

    @property
    def lists(self) -> bool:
        return self.method == "GET" and not self.owned_parameters

    def __str__(self) -> str:
        return f"{self.method} {self.resource}"


def registered_routes() -> list[Route]:
    """Every route registered on the API's resolver (its routers' included), read from the resolver itself."""
    registered = [*api.app._static_routes, *api.app._dynamic_routes]
    routes = [Route(r.method, r.openapi_path, *_body_of(r.func)) for r in registered]
    # The resolver's private lists are what it routes by; the generated document must say the same routes,
    # so that a Powertools change that empties them fails here instead of walking nothing.
    documented = {(m.upper(), p) for p, ops in json.loads(api.openapi_json())["paths"].items() for m in ops}
    assert {(r.method, r.resource) for r in routes} == documented
    return routes


def _body_of(func: Callable[..., Any]) -> tuple[type[BaseModel] | None, bool]:
    for hint in get_type_hints(func, include_extras=True).values():
        if get_origin(hint) is Annotated and any(isinstance(m, Body) for m in hint.__metadata__):
            members = get_args(get_args(hint)[0]) or (get_args(hint)[0],)  # Model, or Model | None
            models = [t for t in members if t is not type(None)]
            return models[0], len(models) < len(members)
    return None, True


def body_for(route: Route, caller: Caller, call: Api) -> Any:
    """A body the route accepts from `caller` (None where the body is optional)."""
    if route.body is None or route.body_optional:
        return None
    builders: dict[type[BaseModel], Callable[[], dict[str, Any]]] = {
        SubmitJobRequest: lambda: request_body(name="walk-job"),
        BudgetSpec: lambda: {"name": "walk-budget", "scope": {"kind": "principal", "value": caller.principal}, "amount_usd": 1},
        BudgetPatch: lambda: {"amount_usd": 2},
        OverrideRequest: lambda: {"job_id": "walk-job", "reason": "the walk"},
        RetrainingPolicyRequest: lambda: policy_body(name="walk-policy"),
        SweepRequest: lambda: sweep_body(maxTrials=2, maxParallelTrials=1),
        # a public address literal: the URL guard resolves nothing (no DNS in tests)
        WebhookRequest: lambda: {"url": "https://93.184.215.14/walk", "event_types": ["job.*"]},
        TrainRequest: lambda: {
            "framework": "hf",
            "model_id": "tiny-llama",
            "run_id": RUN_ID,
            "checkpoint_base_uri": f"s3://{call.settings.artifacts_bucket}/data/{principal_key(caller.principal)}/runs",
            "dataset_uri": "s3://trainplane-artifacts/shared/train.jsonl",
        },
    }
    if route.body in builders:
        return builders[route.body]()
    return example_of(route.body)


@cache
def example_of(model: type[BaseModel]) -> Any:
    examples = model.model_json_schema().get("examples")
    assert examples, f"the walk needs a body for {model.__name__} (a builder in body_for, or an example in the model)"
    return examples[0]


@pytest.fixture
def call(aws: Any) -> Iterator[Api]:
    with composed_api(aws, sweep_controller_function="local") as api:
        yield api


class World:
    """What each caller owns: path-parameter name -> the values naming its resources."""

    def __init__(self, call: Api, routes: list[Route]) -> None:
        self.call = call
        self.routes = routes
        self.owned: dict[Caller, dict[str, set[str]]] = {c: defaultdict(set) for c in CALLERS}
        names = {p for r in routes for p in r.parameters}
        self.parameters = names - SHARED_PARAMETERS

    def create_everything(self, caller: Caller) -> None:
        for route in (r for r in self.routes if r.creates):
            reply = self.call.route(route.method, route.resource, caller=caller, body=body_for(route, caller, self.call))
            assert reply.status == 201, (str(route), caller.name, reply.body)
            assert reply.body.get("owner", caller.principal) == caller.principal, (str(route), caller.name, reply.body["owner"])
            for name in self.parameters & set(reply.body):
                self.owned[caller][name].add(reply.body[name])
        for sweep_id in self.owned[caller]["sweep_id"]:
            self.owned[caller]["job_id"] |= trials_of(self.call, caller, sweep_id)

    def shared(self, name: str) -> str:
        if name == "team":
            return "default"  # every caller's team: none of them is in a team an admin defined
        shapes = self.call.route("GET", "/training-shapes", caller=CALLERS[0]).body["shapes"]
        assert name == "name" and shapes, "the deployment has training shapes to read"
        return str(shapes[0]["name"])

    def filling(self, route: Route, owner: Caller) -> dict[str, str]:
        """Path parameters naming one of `owner`'s resources; which one turns with the route (a job of
        POST /jobs, of POST /train, a sweep's trial), so that each kind is walked without walking all."""
        turn = self.routes.index(route)
        values = {}
        for name in route.parameters:
            choices = sorted(self.owned[owner][name]) if name in self.parameters else [self.shared(name)]
            assert choices, (
                f"{route}: no route created a {name} for {owner.name} (a creating route answers it as a field of that name; "
                "a parameter that names no one's resource belongs in SHARED_PARAMETERS)"
            )
            values[name] = choices[turn % len(choices)]
        return values

    def also_owns(self, caller: Caller, parameters: dict[str, str]) -> bool:
        return any(value in self.owned[caller][name] for name, value in parameters.items() if name in self.parameters)

    def unique_ids(self, caller: Caller) -> set[str]:
        """What names the caller's resources and no one else's (the /train run id is everyone's)."""
        mine = {v for values in self.owned[caller].values() for v in values}
        theirs = {v for other in CALLERS if other != caller for values in self.owned[other].values() for v in values}
        return (mine - theirs) | {caller.principal}

    def listings(self, caller: Caller) -> dict[str, Any]:
        return {str(r): self._listing(r, caller).body for r in self.routes if r.lists and not r.parameters}

    def _listing(self, route: Route, caller: Caller) -> Reply:
        reply = self.call.route(route.method, route.resource, caller=caller)
        assert reply.status == 200, (str(route), caller.name, reply.body)
        return reply


def trials_of(call: Api, caller: Caller, sweep_id: str) -> set[str]:
    """Let the sweep controller start the sweep's trials; their job ids, each owned by the sweep's creator."""
    composition.current().sweep_controller.decide(sweep_id)
    trials = call.route("GET", "/sweeps/{sweep_id}", {"sweep_id": sweep_id}, caller=caller).body["trials"]
    job_ids = {t["job_id"] for t in trials if t.get("job_id")}
    assert job_ids, "the controller started trials"
    for job_id in job_ids:
        job = call.route("GET", "/jobs/{job_id}", {"job_id": job_id}, caller=caller)
        assert job.status == 200 and job.body["owner"] == caller.principal, (caller.name, job.status, job.body)
    return job_ids


def test_every_route_shows_each_caller_its_own_and_nothing_of_anyone_elses(call: Api) -> None:
    routes = registered_routes()
    world = World(call, routes)
    assert any(r.resource.startswith("/sweeps") for r in routes) and len(world.parameters) >= 4

    # Given: each caller in turn creates one of everything, and looks at every listing
    alone = {}
    for caller in CALLERS:
        world.create_everything(caller)
        alone[caller] = world.listings(caller)

    # Then: each listing shows the caller nothing of another's, and what it showed before they existed
    before = {caller: world.listings(caller) for caller in CALLERS}
    for caller in CALLERS:
        others = {i for other in CALLERS if other != caller for i in world.unique_ids(other)} | {DASHBOARD_SESSION}
        for listing, body in before[caller].items():
            text = json.dumps(body)
            assert not {i for i in others if i in text}, f"{listing} as {caller.name} shows another's"
            assert body == alone[caller][listing], f"{listing} as {caller.name} changed when others created theirs"
        assert world.unique_ids(caller) & set(json.dumps(before[caller]).split('"')), f"{caller.name} sees its own"

    # When: each caller calls every route that names a resource on each other caller's
    named = [r for r in routes if r.owned_parameters]
    for route, caller, other in itertools.product(named, CALLERS, CALLERS):
        if other == caller:
            continue
        parameters = world.filling(route, other)
        reply = call.route(route.method, route.resource, parameters, caller=caller, body=body_for(route, caller, call))
        where = f"{route} {parameters} of {other.name} as {caller.name}: {reply.status} {reply.body}"
        if world.also_owns(caller, parameters):
            # a name both chose (the /train run id): the caller gets its own, never the other's
            assert not world.unique_ids(other) & set(json.dumps(reply.body).split('"')), where
        else:
            # Then: another's resource does not exist for it
            assert reply.status == 404, where

    # And: a route only admins may call is 403 for every one of them
    admin_only = [r for r in routes if (r.method, r.resource) in ADMIN_ONLY]
    assert len(admin_only) == len(ADMIN_ONLY), "every admin-only route is registered"
    for route, caller in itertools.product(admin_only, CALLERS):
        parameters = world.filling(route, caller)
        reply = call.route(route.method, route.resource, parameters, caller=caller, body=body_for(route, caller, call))
        assert reply.status == 403, f"{route} as {caller.name}: {reply.status} {reply.body}"

    # Then: nothing of anyone's changed
    assert {caller: world.listings(caller) for caller in CALLERS} == before

    # And: the owner does reach its own through every such route but the admins' (reads first, deletes last)
    order = {"GET": 0, "PATCH": 1, "POST": 2, "DELETE": 3}
    for route in sorted((r for r in named if (r.method, r.resource) not in ADMIN_ONLY), key=lambda r: order[r.method]):
        for caller in CALLERS:
            parameters = world.filling(route, caller)
            reply = call.route(route.method, route.resource, parameters, caller=caller, body=body_for(route, caller, call))
            if route.method == "GET":
                assert reply.status == 200, f"{route} {parameters} as its owner {caller.name}: {reply.status} {reply.body}"
            else:  # a status may not allow the action (409); never "not found" or "forbidden"
                assert reply.status not in (403, 404) and reply.status < 500, f"{route} as {caller.name}: {reply.status} {reply.body}"


def test_every_route_refuses_a_request_without_a_caller(call: Api) -> None:
    for route in registered_routes():
        parameters = {p: "job-20260101-0123456789ab" if p == "job_id" else "x1" for p in route.parameters}
        event = route_event(route.method, route.resource, parameters, body=body_for(route, CALLERS[0], call))
        event["requestContext"]["identity"].update(userArn=None, cognitoIdentityId=None)
        reply = call.send(event)
        assert reply.status == 403 and "AWS_IAM" in reply.body["message"], (str(route), reply.status, reply.body)


def test_a_sweeps_trials_belong_to_the_dashboard_user_who_created_it(call: Api) -> None:
    # Given: Ana creates a sweep from the dashboard and the controller starts its trials
    created = call.route("POST", "/sweeps", caller=ANA, body=sweep_body(maxTrials=2, maxParallelTrials=2))
    assert created.status == 201 and created.body["owner"] == ANA.principal
    trials = trials_of(call, ANA, created.body["sweep_id"])
    assert len(trials) == 2

    # Then: the trials are Ana's jobs, not the dashboard role's shared session's; Ben sees neither them nor the sweep
    query = {"labels.sweep_id": created.body["sweep_id"]}
    assert {j["job_id"] for j in call.route("GET", "/jobs", caller=ANA, query=query).body["jobs"]} == trials
    assert call.route("GET", "/jobs", caller=BEN, query=query).body["jobs"] == []
    assert call.route("GET", "/sweeps/{sweep_id}", {"sweep_id": created.body["sweep_id"]}, caller=BEN).status == 404
    assert call.route("GET", "/sweeps", caller=BEN).body["sweeps"] == []
