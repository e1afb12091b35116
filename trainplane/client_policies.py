"""The SDK's retraining methods, mixed into trainplane.Client: /retraining-policies, and custom events.

    policy = client.create_policy({"name": "nightly", "trigger": {"type": "schedule", "expression": "cron(0 3 * * ? *)"},
                                   "job_template": {...}})
    client.put_event("Drift detected", {"model": "support-bot", "score": 0.42})   # source trainplane.retraining

`put_event` puts the event on the default EventBridge bus: in local mode the emulated one (endpoint.json's
aws_endpoint_url, signed with the same principal's keys), in AWS the account's, with the caller's credentials
(events:PutEvents). Policies whose event pattern matches it start their jobs.
"""

from __future__ import annotations

import builtins
import json
from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from pydantic import BaseModel

from schemas.retraining import CUSTOM_EVENT_SOURCE, RetrainingPolicy, RetrainingPolicyPatch, RetrainingPolicyRequest
from trainplane.errors import TrainplaneError

if TYPE_CHECKING:
    from botocore.credentials import Credentials

    from trainplane.endpoint import ResolvedEndpoint

PolicyRequest = RetrainingPolicyRequest | Mapping[str, Any]
PolicyChanges = RetrainingPolicyPatch | Mapping[str, Any]
COLLECTION = "/retraining-policies"


class PolicyMethods:
    """Relies on the Client's `_call`, `resolved`, `region` and `_credentials`."""

    resolved: ResolvedEndpoint
    region: str
    _credentials: Credentials
    _call: Callable[..., Any]

    def create_policy(self, request: PolicyRequest) -> RetrainingPolicy:
        return RetrainingPolicy.model_validate(self._call("POST", COLLECTION, body=_body(request)))

    def get_policy(self, policy_id: str) -> RetrainingPolicy:
        return RetrainingPolicy.model_validate(self._call("GET", _policy_path(policy_id)))

    def list_policies_page(
        self, *, limit: int | None = None, next_token: str | None = None
    ) -> tuple[builtins.list[RetrainingPolicy], str | None]:
        body = self._call("GET", COLLECTION, params={"limit": limit, "next_token": next_token})
        return [RetrainingPolicy.model_validate(p) for p in body.get("policies", [])], body.get("next_token")

    def list_policies(self, *, page_size: int | None = None) -> Iterator[RetrainingPolicy]:
        """Every policy the caller may see, newest first, fetched a page at a time."""
        token: str | None = None
        while True:
            policies, token = self.list_policies_page(limit=page_size, next_token=token)
            yield from policies
            if not token:
                return

    def update_policy(self, policy_id: str, changes: PolicyChanges) -> RetrainingPolicy:
        return RetrainingPolicy.model_validate(self._call("PATCH", _policy_path(policy_id), body=_body(changes)))

    def delete_policy(self, policy_id: str) -> None:
        self._call("DELETE", _policy_path(policy_id))

    def put_event(
        self,
        detail_type: str,
        detail: Mapping[str, Any],
        *,
        source: str = CUSTOM_EVENT_SOURCE,
        resources: builtins.list[str] | None = None,
    ) -> str:
        """Put one event on the default bus; returns its id (what jobs it starts carry as trigger_event_id)."""
        import boto3  # the one SDK call that is not the HTTP API

        local = self.resolved.local
        frozen = self._credentials.get_frozen_credentials()
        events = boto3.client(
            "events",
            region_name=self.region,
            endpoint_url=local.aws_endpoint_url if local is not None else None,
            aws_access_key_id=frozen.access_key,
            aws_secret_access_key=frozen.secret_key,
            aws_session_token=frozen.token,
        )
        entry = {"Source": source, "DetailType": detail_type, "Detail": json.dumps(dict(detail)), "Resources": resources or []}
        result = events.put_events(Entries=[entry])["Entries"][0]
        if "EventId" not in result:
            raise TrainplaneError(None, f"EventBridge refused the event: {result.get('ErrorCode')}: {result.get('ErrorMessage')}")
        return str(result["EventId"])


def _body(request: BaseModel | Mapping[str, Any]) -> dict[str, Any]:
    if isinstance(request, BaseModel):
        # exclude_unset keeps a patch to what was given; reveal_secrets sends the template's hub token, not its mask.
        return request.model_dump(mode="json", exclude_unset=True, context={"reveal_secrets": True})
    return dict(request)


def _policy_path(policy_id: str) -> str:
    if not policy_id or "/" in policy_id:
        raise ValueError(f"not a policy id: {policy_id!r}")
    return f"{COLLECTION}/{quote(policy_id, safe='')}"
