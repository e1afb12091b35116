"""Slack-format webhooks (issue 23.5): readable messages, at most one per second per webhook, a burst
coalesced into one message ("3 trainplane events: 2 FAILED, 1 COMPLETED" and a line each).

The worker (functions/service/webhook_delivery.py) gathers the due deliveries of a Slack webhook into
one post; an event is in one message only, and its delivery is finished with that post's outcome.
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from collections.abc import Sequence
from datetime import timedelta

from schemas.webhook_records import HeldEvent

MIN_INTERVAL = timedelta(seconds=1)  # Slack's incoming webhooks allow about one message per second
MAX_LINES = 10


def event_line(held: HeldEvent) -> tuple[str, str]:
    """One event as a line of mrkdwn, and the state it reached (for the burst's summary)."""
    data = json.loads(held.body).get("data", {})
    name = data.get("job_name") or data.get("sweep_name") or data.get("policy_name") or data.get("webhook_id") or ""
    subject = data.get("job_id") or data.get("sweep_id") or data.get("policy_id") or data.get("webhook_id") or ""
    state = str(data.get("state") or held.event_type)
    if held.event_type == "job.checkpoint_saved":
        what = f"saved checkpoint {data.get('checkpoint_id')} at step {data.get('step')}"
        state = "CHECKPOINT"
    elif held.event_type == "webhook.test":
        what = state = "test delivery from trainplane"
    else:
        previous = data.get("previous_state")
        what = f"{previous} -> {state}" if previous else state
    reason = data.get("error_message") or data.get("reason") or ""
    link = data.get("dashboard_url")
    label = f"<{link}|{escape(name)}>" if link else escape(name)
    return f"*{label}* `{subject}`: {escape(what)}" + (f"\n> {escape(reason)}" if reason else ""), state


def message(events: Sequence[HeldEvent]) -> str:
    """The Slack message for one event, or for a burst of them."""
    lines = [event_line(e) for e in events]
    if len(lines) == 1:
        text = lines[0][0]
    else:
        counts = Counter(state for _, state in lines)
        summary = ", ".join(f"{n} {escape(state)}" for state, n in counts.most_common())
        shown = [line for line, _ in lines[:MAX_LINES]]
        more = [f"... and {len(lines) - MAX_LINES} more"] if len(lines) > MAX_LINES else []
        text = "\n".join([f"*{len(lines)} trainplane events*: {summary}", *shown, *more])
    return json.dumps({"text": text.strip()}, separators=(",", ":"))


def message_id(events: Sequence[HeldEvent]) -> str:
    """The webhook-id of a post: the event's own id, or one derived from the burst's ids (stable on retry)."""
    if len(events) == 1:
        return events[0].event_id
    return "msg_" + hashlib.sha256("|".join(sorted(e.event_id for e in events)).encode()).hexdigest()[:26]


def escape(text: str) -> str:
    # Slack's mrkdwn: &, < and > are the only characters to escape
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
