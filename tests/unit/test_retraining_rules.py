"""Schedule expressions, event patterns and policy validation: the rules a retraining policy is checked by."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from pydantic import ValidationError

from schemas.event_pattern import matches, validate_pattern
from schemas.retraining import RetrainingPolicyRequest, set_target
from schemas.schedule_expr import Cron, Rate, next_fire, parse_schedule_expression

T0 = datetime(2026, 11, 22, 13, 7, tzinfo=UTC)  # a Sunday


@pytest.mark.parametrize(
    ("expression", "after", "expected"),
    [
        ("cron(0 12 ? * MON-FRI *)", T0, datetime(2026, 11, 23, 12, 0, tzinfo=UTC)),
        ("cron(*/15 * * * ? *)", T0, datetime(2026, 11, 22, 13, 15, tzinfo=UTC)),
        ("cron(30 2 1 * ? *)", T0, datetime(2026, 12, 1, 2, 30, tzinfo=UTC)),
        ("cron(0 0 ? * SUN *)", T0, datetime(2026, 11, 29, 0, 0, tzinfo=UTC)),
        ("cron(0 9 29 FEB ? 2028)", T0, datetime(2028, 2, 29, 9, 0, tzinfo=UTC)),
    ],
)
def test_cron_next_fire(expression: str, after: datetime, expected: datetime) -> None:
    # Given a cron expression / When asking for the next firing after a time / Then it is the expected minute
    schedule = parse_schedule_expression(expression)
    assert isinstance(schedule, Cron)
    assert next_fire(schedule, after) == expected


def test_cron_in_the_past_never_fires() -> None:
    assert next_fire(parse_schedule_expression("cron(0 0 1 1 ? 2020)"), T0) is None


def test_rate_counts_from_its_anchor() -> None:
    schedule = parse_schedule_expression("rate(5 minutes)")
    assert schedule == Rate(300)
    anchor = datetime(2026, 11, 22, 13, 0, tzinfo=UTC)
    assert next_fire(schedule, T0, anchor) == datetime(2026, 11, 22, 13, 10, tzinfo=UTC)
    assert next_fire(parse_schedule_expression("rate(1 day)"), T0, anchor) == datetime(2026, 11, 23, 13, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    ("expression", "message"),
    [
        ("cron(0 12 * * * *)", "exactly one of day-of-month and day-of-week"),
        ("cron(0 25 ? * * *)", "hours: 25 is outside 0-23"),
        ("cron(0 12 * *)", "needs 6 fields"),
        ("cron(0 12 L * ? *)", "not supported"),
        ("cron(5-1 * * * ? *)", "runs backwards"),
        ("rate(1 minutes)", "singular"),
        ("rate(0 minutes)", "at least 1"),
        ("rate(5 weeks)", "rate must look like"),
        ("daily", "cron(...) or rate(...)"),
    ],
)
def test_bad_schedule_expressions_say_what_is_wrong(expression: str, message: str) -> None:
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        parse_schedule_expression(expression)


S3_EVENT = {
    "id": "e-1",
    "source": "aws.s3",
    "detail-type": "Object Created",
    "detail": {"bucket": {"name": "data"}, "object": {"key": "fresh/part-1.jsonl", "size": 120}},
}


@pytest.mark.parametrize(
    ("pattern", "expected"),
    [
        ({"source": ["aws.s3"]}, True),
        ({"source": ["aws.ec2"]}, False),
        ({"detail": {"object": {"key": [{"prefix": "fresh/"}]}}}, True),
        ({"detail": {"object": {"key": [{"suffix": ".csv"}]}}}, False),
        ({"detail": {"object": {"size": [{"numeric": [">", 100, "<=", 200]}]}}}, True),
        ({"detail": {"object": {"size": [{"numeric": [">", 500]}]}}}, False),
        ({"detail": {"bucket": {"name": [{"anything-but": ["logs"]}]}}}, True),
        ({"detail": {"bucket": {"name": [{"anything-but": {"prefix": "da"}}]}}}, False),
        ({"detail": {"object": {"etag": [{"exists": False}]}}}, True),
        ({"detail": {"object": {"etag": [{"exists": True}]}}}, False),
        ({"detail": {"object": {"etag": [{"anything-but": ["x"]}]}}}, False),
        ({"detail-type": [{"equals-ignore-case": "object created"}]}, True),
        ({"detail": {"object": {"key": [{"wildcard": "fresh/*.jsonl"}]}}}, True),
        ({"source": ["aws.s3"], "detail": {"bucket": {"name": ["other"]}}}, False),
    ],
)
def test_event_pattern_matching_agrees_with_eventbridge(pattern: dict, expected: bool) -> None:
    validate_pattern(pattern)
    assert matches(pattern, S3_EVENT) is expected


@pytest.mark.parametrize(
    ("pattern", "message"),
    [
        ({}, "non-empty object"),
        ({"source": "aws.s3"}, "must be in a list"),
        ({"source": []}, "matches nothing"),
        ({"source": [{"regex": ".*"}]}, "unsupported operator"),
        ({"detail": {"size": [{"numeric": [">"]}]}}, "numeric takes pairs"),
        ({"detail": {"size": [{"exists": "yes"}]}}, "exists takes true or false"),
        # Operator arguments of the wrong type: refused at create, never a failure at dispatch
        ({"detail": {"key": [{"prefix": 5}]}}, "prefix takes a string"),
        ({"detail": {"key": [{"prefix": {"suffix": "x"}}]}}, "prefix takes a string"),
        ({"detail": {"key": [{"suffix": ["a"]}]}}, "suffix takes a string"),
        ({"detail": {"key": [{"wildcard": None}]}}, "wildcard takes a string"),
        ({"detail": {"key": [{"equals-ignore-case": 3}]}}, "equals-ignore-case takes a string"),
        ({"detail": {"key": [{"anything-but": {"suffix": "x"}}]}}, "anything-but takes values"),
        ({"detail": {"key": [{"anything-but": [{"a": 1}]}]}}, "anything-but takes values"),
        ({"detail": {"key": [{"anything-but": []}]}}, "anything-but takes values"),
    ],
)
def test_bad_event_patterns_are_refused(pattern: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        validate_pattern(pattern)


TEMPLATE = {
    "name": "nightly",
    "training_config": {
        "training_type": "LORA",
        "base_model": {"model_id": "tiny", "source": "config", "model_kwargs": {"architecture": "llama"}},
    },
    "data_config": {"sources": [{"path": "s3://data/seed.jsonl"}]},
}


def _policy(**overrides: object) -> dict:
    body: dict = {"name": "p", "trigger": {"type": "s3", "prefix": "fresh/"}, "job_template": TEMPLATE}
    body.update(overrides)
    return body


def test_policy_with_valid_mapping_is_accepted() -> None:
    policy = RetrainingPolicyRequest.model_validate(
        _policy(
            input_mapping=[
                {"template": "s3://{detail.bucket.name}/{detail.object.key}", "target": "data_config.sources[0].path"},
                {"source": "id", "target": "labels.source_event"},
                {"source": "detail.object.size", "target": "training_config.hyperparameters.max_steps"},
            ]
        )
    )
    assert policy.input_mapping[0].source_paths() == ["detail.bucket.name", "detail.object.key"]


@pytest.mark.parametrize(
    ("mapping", "message"),
    [
        ({"source": "id", "target": "data_config.sources[2].path"}, "index \\[2\\] does not exist"),
        ({"source": "id", "target": "training_config.no_such_field"}, "no field 'no_such_field'"),
        ({"source": "id", "target": "data_config"}, "whole object"),
        ({"source": "id", "template": "{id}", "target": "labels.x"}, "exactly one of source or template"),
        ({"source": "id", "target": "Not A Path"}, "not a dotted path"),
        # The trainer refuses hyperparameters it does not know: so does the policy, at creation
        ({"source": "id", "target": "training_config.hyperparameters.rows"}, "'rows' is not a hyperparameter the trainer knows"),
        # A sweep's reserved labels (a policy's job is no trial)
        ({"source": "id", "target": "labels.sweep_id"}, "label 'sweep_id' is reserved: a sweep sets it"),
        ({"source": "id", "target": "labels.trial"}, "label 'trial' is reserved: a sweep sets it"),
    ],
)
def test_mapping_that_points_at_no_field_is_refused(mapping: dict, message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        RetrainingPolicyRequest.model_validate(_policy(input_mapping=[mapping]))


def test_invalid_template_and_bad_cron_are_refused_at_creation() -> None:
    with pytest.raises(ValidationError, match=r"job_template\.training_config\.training_type"):
        RetrainingPolicyRequest.model_validate(_policy(job_template={**TEMPLATE, "training_config": {"training_type": "NOPE"}}))
    with pytest.raises(ValidationError, match="hours: 99"):
        RetrainingPolicyRequest.model_validate(_policy(trigger={"type": "schedule", "expression": "cron(0 99 ? * * *)"}))
    with pytest.raises(ValidationError, match="training_type RLHF needs the rlhf block"):
        bad = {**TEMPLATE, "training_config": {**TEMPLATE["training_config"], "training_type": "RLHF"}}
        RetrainingPolicyRequest.model_validate(_policy(job_template=bad))


def test_set_target_writes_nested_fields() -> None:
    document = {"data_config": {"sources": [{"path": "a"}]}, "labels": {}}
    set_target(document, "data_config.sources[0].path", "s3://b/k")
    set_target(document, "labels.dataset", "v2")
    assert document == {"data_config": {"sources": [{"path": "s3://b/k"}]}, "labels": {"dataset": "v2"}}
