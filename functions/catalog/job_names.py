"""What names a cloud run, and how a run's name, tags and files lead back to its job and attempt.

The launchers write these names (functions/adapters/launchers/), the events service and the log reader
read them back, local mode's emulated compute answers to them: one grammar for all.
"""

from __future__ import annotations

import hashlib
import re

from functions import constants

# Tags on every training job / instance: the events handler finds the job and attempt from them.
TAG_JOB_ID = "trainplane:job-id"
TAG_ATTEMPT = "trainplane:attempt"
TAG_OWNER = "trainplane:owner"
TAG_LABEL_PREFIX = "trainplane:label:"
# EC2 only: the control plane's requests to the instance's watcher (see ec2.py and user_data.sh).
TAG_STOP = "trainplane:stop"
TAG_INTERRUPTED = "trainplane:interrupted"
# SageMaker tag values: letters, digits, spaces and _ . : / = + - @ (EC2 is laxer; one rule for both).
_TAG_VALUE_BAD = re.compile(r"[^\w\s.:/=+\-@]")

# Training job names: [a-zA-Z0-9](-*[a-zA-Z0-9]){0,62}. Ours read tp-<job id>-a<attempt> when the id
# fits; otherwise a hashed, irreversible form (the job id and attempt are in the tags anyway).
_NAME_PREFIX = "tp-"
_MAX_NAME = 63
_NAME_RE = re.compile(r"^tp-(?P<job_id>[A-Za-z0-9](?:-*[A-Za-z0-9])*)-a(?P<attempt>\d+)$")


def training_job_name(job_id: str, attempt: int) -> str:
    suffix = f"-a{attempt}"
    name = f"{_NAME_PREFIX}{job_id}{suffix}"
    if len(name) <= _MAX_NAME and _NAME_RE.match(name):
        return name
    digest = hashlib.sha256(job_id.encode()).hexdigest()[:10]
    room = _MAX_NAME - len("tpx-") - len(digest) - 1 - len(suffix)
    safe = re.sub(r"[^A-Za-z0-9]+", "-", job_id).strip("-")[:room].strip("-")
    return f"tpx-{safe}-{digest}{suffix}" if safe else f"tpx-{digest}{suffix}"


def parse_training_job_name(name: str) -> tuple[str, int] | None:
    """(job_id, attempt) for names made by training_job_name from a fitting id; None otherwise."""
    match = _NAME_RE.match(name)
    return (match.group("job_id"), int(match.group("attempt"))) if match else None


def tag_value(value: str) -> str:
    return _TAG_VALUE_BAD.sub("_", value)[:256]


def job_ref_from_tags(tags: dict[str, str]) -> tuple[str, int] | None:
    """(job_id, attempt) from a resource's tags, None when they are not ours."""
    job_id, attempt = tags.get(TAG_JOB_ID), tags.get(TAG_ATTEMPT)
    if job_id and attempt and attempt.isdigit():
        return job_id, int(attempt)
    return None


def exit_status_key(job_id: str, attempt: int, node: int = 0) -> str:
    """Where the user data of node `node` writes the trainer's exit status for one attempt."""
    return node_exit_status_key(f"{constants.job_prefix(job_id)}runs/{attempt:03d}/exit.json", node)


def node_exit_status_key(node0_key: str, node: int) -> str:
    """Node 0's key (exit.json, as for a single instance) -> node `node`'s (exit-node<k>.json)."""
    return node0_key if node == 0 else f"{node0_key.removesuffix('.json')}-node{node}.json"
