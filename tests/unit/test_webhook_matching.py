"""Which events go to which webhook (functions/service/webhooks.py `matches`): only what the owner may
see, then through every filter. Each guard is tested by an event that only it refuses."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from functions.service.webhooks import matches
from schemas.webhooks import Webhook

ALICE = "arn:aws:iam::123456789012:user/alice"
ADMIN = "arn:aws:iam::123456789012:user/admin"


def hook(**changes: Any) -> Webhook:
    base: dict[str, Any] = {
        "webhook_id": "wh-1",
        "owner": ALICE,
        "url": "https://x.example/h",
        "event_types": ["*"],
        "created_at": datetime.now(UTC),
    }
    return Webhook(**{**base, **changes})


def detail(**changes: Any) -> dict[str, Any]:
    return {"owner": ALICE, "labels": {"team": "nlp", "sweep_id": "swp-1"}, "job_id": "job-1", **changes}


def test_an_event_of_another_owner_never_matches_unless_the_webhook_sees_everything() -> None:
    assert matches(hook(), "job.status_changed", detail(), sees_everything=False)
    assert not matches(hook(), "job.status_changed", detail(owner=ADMIN), sees_everything=False)
    assert matches(hook(owner=ADMIN), "job.status_changed", detail(), sees_everything=True)


@pytest.mark.parametrize(
    ("changes", "event_type", "event"),
    [
        ({"event_types": ["sweep.*"]}, "job.status_changed", {}),
        ({"labels": {"team": "cv"}}, "job.status_changed", {}),
        ({"labels": {"team": "nlp", "env": "prod"}}, "job.status_changed", {}),
        ({"job_ids": ["job-2"]}, "job.status_changed", {}),
        ({"sweep_ids": ["swp-2"]}, "job.status_changed", {}),
        ({"enabled": False}, "job.status_changed", {}),
    ],
)
def test_each_filter_refuses_what_it_does_not_select(changes: dict[str, Any], event_type: str, event: dict[str, Any]) -> None:
    assert not matches(hook(**changes), event_type, detail(**event), sees_everything=True)


def test_filters_select_what_they_name() -> None:
    assert matches(
        hook(event_types=["job.*"], labels={"team": "nlp"}, job_ids=["job-1"]), "job.checkpoint_saved", detail(), sees_everything=False
    )
    # a sweep's own event by its sweep_id, and its trials' by their sweep_id label
    assert matches(hook(sweep_ids=["swp-1"]), "sweep.status_changed", {"owner": ALICE, "sweep_id": "swp-1"}, sees_everything=False)
    assert matches(hook(sweep_ids=["swp-1"]), "job.status_changed", detail(), sees_everything=False)
