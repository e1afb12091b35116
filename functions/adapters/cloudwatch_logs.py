"""A job's logs from CloudWatch Logs, every attempt in order, paged, followable with `since`.

Where each engine writes them:
- SageMaker: group /aws/sagemaker/TrainingJobs, one stream per instance, `<training-job-name>/algo-<n>-<epoch>`;
- EC2: settings.trainer_log_group, `<job_id>/<attempt:03d>/trainer` (the user data's awslogs driver).

The same shape as the API's reader of local logs (JobService.logs): `read(job, since=, next_token=,
limit=)` -> LogsResponse; `since` is exclusive (epoch seconds of the last line seen), `next_token`
resumes exactly where a page ended, and the `cursor` every answer carries resumes after its last line
(a follower's bookmark; a line that CloudWatch ingests late with an earlier time than that is not seen).
Lines of a multi-node run's other hosts carry their host name.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from functions.adapters.launchers import ec2, sagemaker
from functions.adapters.launchers.cloud import ClientSource
from functions.catalog import page_tokens
from functions.catalog.job_names import training_job_name
from functions.errors import InvalidRequest
from functions.settings import Settings
from schemas.api import LogLine, LogsResponse
from schemas.job import Job

# FilterLogEvents may return empty pages with a token while it scans; bound the calls per request
# (API Gateway gives a Lambda 29 s) and hand the client a token to go on with.
MAX_CALLS_PER_PAGE = 10
MAX_EVENTS_PER_CALL = 10_000  # FilterLogEvents' own ceiling
MAX_STREAM_NAMES = 100  # FilterLogEvents' limit on logStreamNames
_NO_STREAM = "trainplane-no-stream-yet"  # an attempt without streams yet: a name that matches nothing


@dataclass(frozen=True)
class StreamSet:
    """Where one attempt's lines are: a log group and a stream-name prefix."""

    group: str
    prefix: str


def streams_for(compute: str, job_id: str, attempt: int, trainer_log_group: str) -> StreamSet:
    if compute == "sagemaker":
        return StreamSet(sagemaker.LOG_GROUP, f"{training_job_name(job_id, attempt)}/")
    if compute == "ec2":
        return StreamSet(trainer_log_group, ec2.log_stream_prefix(job_id, attempt))
    raise ValueError(f"no CloudWatch logs for compute {compute!r}")


class CloudWatchLogSource:
    """LogSource for compute 'sagemaker' and 'ec2'."""

    def __init__(self, settings: Settings, clients: ClientSource, *, compute: str | None = None) -> None:
        self._settings = settings
        self._clients = clients
        self._compute = compute or settings.compute

    def read(self, job: Job, *, since: float | None = None, next_token: str | None = None, limit: int = 1000) -> LogsResponse:
        """A page of lines; `cursor` (always set) resumes after the last line handed over: the same
        attempt from that line's millisecond, skipping the events already given there (by eventId)."""
        after = _decode_cursor(next_token) if next_token and next_token.startswith(_CURSOR_MARK) else None
        attempt, cw_token = (after.attempt, None) if after else _decode(next_token) if next_token else (1, None)
        start_ms = math.floor(since * 1000) + 1 if since is not None else None
        mark = after or _Mark(attempt, start_ms or 0, frozenset())
        lines: list[LogLine] = []
        calls = 0
        logs = self._clients.client("logs")
        while attempt <= job.attempt:
            where = streams_for(self._compute, job.job_id, attempt, self._settings.trainer_log_group)
            params: dict[str, Any] = {"logGroupName": where.group, **self._stream_filter(logs, where)}
            resuming = after is not None and attempt == after.attempt
            first_ms = max(after.ms, start_ms or 0) if after is not None and resuming else start_ms
            if first_ms is not None:
                params["startTime"] = first_ms
            while True:
                if len(lines) >= limit or calls >= MAX_CALLS_PER_PAGE:
                    return LogsResponse(lines=lines, next_token=_encode(attempt, cw_token), cursor=mark.encode())
                page = self._filter(logs, {**params, "limit": min(limit - len(lines), MAX_EVENTS_PER_CALL)}, cw_token)
                calls += 1
                for event in page.get("events", []):
                    ms, event_id = int(event.get("timestamp", 0)), str(event.get("eventId", ""))
                    if after is not None and resuming and ms == after.ms and event_id in after.ids:
                        continue  # handed over by the read that made the cursor
                    lines.append(_line(event, attempt, where.prefix))
                    mark = mark.after(attempt, ms, event_id)
                cw_token = page.get("nextToken")
                if not cw_token:
                    break
            attempt, cw_token = attempt + 1, None
        return LogsResponse(lines=lines, next_token=None, cursor=mark.encode())

    @staticmethod
    def _stream_filter(logs: Any, where: StreamSet) -> dict[str, Any]:
        """The attempt's streams by name. FilterLogEvents' own logStreamNamePrefix is used only past
        its 100-name limit: moto ignores that parameter (and would return every job's lines)."""
        from botocore.exceptions import ClientError

        names: list[str] = []
        kwargs: dict[str, Any] = {"logGroupName": where.group, "logStreamNamePrefix": where.prefix}
        try:
            for page in logs.get_paginator("describe_log_streams").paginate(**kwargs):
                names.extend(s["logStreamName"] for s in page.get("logStreams", []))
                if len(names) > MAX_STREAM_NAMES:
                    return {"logStreamNamePrefix": where.prefix}
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") != "ResourceNotFoundException":
                raise
        return {"logStreamNames": names} if names else {"logStreamNames": [_NO_STREAM]}

    @staticmethod
    def _filter(logs: Any, params: dict[str, Any], token: str | None) -> dict[str, Any]:
        from botocore.exceptions import ClientError

        try:
            page: dict[str, Any] = logs.filter_log_events(**params, **({"nextToken": token} if token else {}))
            return page
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") == "ResourceNotFoundException":
                return {"events": []}  # the group appears with the first line ever written to it
            raise


def log_source_for(settings: Settings, clients: ClientSource) -> CloudWatchLogSource | None:
    """The log source of settings.compute: CloudWatch for the cloud engines, None for local files."""
    return CloudWatchLogSource(settings, clients) if settings.compute in {"sagemaker", "ec2"} else None


def _line(event: dict[str, Any], attempt: int, prefix: str) -> LogLine:
    message = str(event.get("message", "")).rstrip("\n")
    stream = str(event.get("logStreamName", ""))
    host = stream[len(prefix) :] if stream.startswith(prefix) else stream
    if host and not host.startswith(("algo-1-", "trainer")) and host != "algo-1":
        message = f"[{host.rsplit('-', 1)[0]}] {message}"
    return LogLine(timestamp=int(event.get("timestamp", 0)) / 1000.0, attempt=attempt, message=message)


_CURSOR_MARK = "c."


@dataclass(frozen=True)
class _Mark:
    """Where a reader stands: the attempt and millisecond of the last event given, and the ids of the
    events given at that millisecond (CloudWatch stamps to the ms: several lines may share one)."""

    attempt: int
    ms: int
    ids: frozenset[str]

    def after(self, attempt: int, ms: int, event_id: str) -> _Mark:
        same = attempt == self.attempt and ms == self.ms
        return _Mark(attempt, ms, (self.ids | {event_id}) if same else frozenset({event_id}))

    def encode(self) -> str:
        return _CURSOR_MARK + page_tokens.encode([self.attempt, self.ms, sorted(self.ids)])


def _decode_cursor(token: str) -> _Mark:
    try:
        attempt, ms, ids = page_tokens.decode(token[len(_CURSOR_MARK) :])
        if not isinstance(attempt, int) or attempt < 1 or not isinstance(ms, int) or not isinstance(ids, list):
            raise ValueError(token)
        return _Mark(attempt, ms, frozenset(str(i) for i in ids))
    except (ValueError, TypeError) as exc:
        raise InvalidRequest("next_token", page_tokens.NOT_OURS) from exc


def _encode(attempt: int, token: str | None) -> str:
    return page_tokens.encode([attempt, token])


def _decode(token: str) -> tuple[int, str | None]:
    try:
        attempt, cw_token = page_tokens.decode(token)
        if not isinstance(attempt, int) or attempt < 1 or not (cw_token is None or isinstance(cw_token, str)):
            raise ValueError(token)
        return attempt, cw_token
    except (ValueError, TypeError) as exc:
        raise InvalidRequest("next_token", page_tokens.NOT_OURS) from exc
