"""What a schema-valid request may be refused for, in the API fuzzing (tests/e2e/test_fuzz_api.py's
`accepted_when_valid`): each entry one reason openapi.json cannot state as a JSON Schema constraint, a fact
about the plane's state or its deployment, or a rule across fields (docs/TESTING.md, "Legitimate refusals of
a valid request"). tests/e2e/test_fuzz_rules.py keeps each entry narrow.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Refusal:
    """One legitimate reason to refuse a schema-valid request: a fact about the plane's state or its
    deployment, or a rule across fields, that openapi.json cannot state as a JSON Schema constraint."""

    why: str
    status: int
    operations: tuple[str, ...] = ()  # "METHOD /path" prefixes; () = any
    field: str | None = None  # regex the error's field must match (422 only)
    message: str | None = None  # regex the error's message must match (422 only)
    kind: str | None = None  # the error's type, exactly (422 only)

    def explains(self, operation: str, status: int, error: dict[str, Any] | None) -> bool:
        if status != self.status or (self.operations and not operation.startswith(self.operations)):
            return False
        if error is None:
            return self.field is None and self.message is None and self.kind is None
        return bool(
            (self.kind is None or error.get("type") == self.kind)
            and (self.field is None or re.fullmatch(self.field, str(error.get("field", "")), re.S))
            and (self.message is None or re.search(self.message, str(error.get("message", "")), re.S))
        )


_BY_ID = tuple(
    f"{m} {p}"
    for p, ms in (
        ("/jobs/{job_id}", ("GET", "PATCH", "DELETE", "POST")),
        ("/retraining-policies/{policy_id}", ("GET", "PATCH", "DELETE")),
        ("/sweeps/{sweep_id}", ("GET", "DELETE", "POST")),
        ("/webhooks/{webhook_id}", ("GET", "DELETE", "POST")),
        ("/teams/{team}", ("GET",)),
        ("/budgets/{budget_id}", ("GET", "PATCH", "DELETE", "POST")),
    )
    for m in ms
)
# Operations only admins may perform: alice (the fuzzer) is refused each with a 403, so no real object is reached.
ADMIN_ONLY = ("PUT /teams/{team}", "DELETE /teams/{team}", "POST /budgets/{budget_id}/resume")
_TUNING = r"(hyperParameterTuningConfig|hyperparameter_tuning_config)(\..*)?"
_ISSUE16_OPS = ("POST /jobs", "PATCH /jobs", "POST /retraining-policies", "PATCH /retraining-policies", "POST /train", "POST /sweeps")
LEGITIMATE_REFUSALS = (
    Refusal(
        "a Cognito group name has no whitespace (pattern ^\\S+$): the server's regex reads Unicode whitespace (NEL,"
        " NBSP ...) as whitespace, the fuzzer's pattern engine reads only ASCII's",
        422,
        ("PUT /teams/{team}",),
        r"members\.cognito_groups\.\d+",
        kind="string_pattern_mismatch",
    ),
    Refusal(
        "placement's rules across fields and against the deployment (issue 26, docs/PLACEMENT.md): deadline or"
        " max_wait_seconds, not both, and a deadline in the future that some candidate can meet with an on-demand"
        " fallback; each candidate a GPU type of the instance table, on a platform this deployment launches, able"
        " to keep the global batch and resume the checkpoint on its world size; the top-level GPU fields agree with"
        " candidate 0; zones, affinity labels and capabilities that name known pools, and leave one",
        422,
        _ISSUE16_OPS,
        r"(.*\.)?(new_)?resource_config\.(placement.*|gpu_type|gpu_count|node_count|training_shape|node_affinity.*|node_anti_affinity.*)"
        r"|(.*\.)?scheduling_config\.required_capabilities.*",
    ),
    Refusal(
        "a /train run_id that made no job of the caller's, or a training shape (version) the deployment lacks",
        404,
        ("GET /train/", "GET /training-shapes/"),
    ),
    Refusal(
        "training shapes are the deployment's catalog (issue 16): the name@version must exist, a field the shape owns"
        " may not be set otherwise, the context is bounded by the shape's",
        422,
        _ISSUE16_OPS,
        message=r"training shape",
    ),
    Refusal(
        "rules across fields of issue 16: CUSTOM's command/args, OME's trainer block mapped onto the request,"
        " dataset compression vs format, procs_per_node vs world_size, a deepfinery layout's output_path",
        422,
        _ISSUE16_OPS,
        message=r"command and args are for framework\.type CUSTOM|custom_script_path or command|give custom_script_path or command"
        r"|contradicts compression|procs_per_node|runs as framework CUSTOM|needs trainer\.command|give it once"
        r"|not supported yet|output_path \(the run's root\)|not a (memory|CPU) quantity|not a whole number|not a resource trainplane",
    ),
    Refusal(
        "a job's own container image runs only on compute that runs containers, from the repositories the deployment"
        " allows (docs/SECURITY.md): local mode has no container runtime and refuses every one",
        422,
        _ISSUE16_OPS,
        r"(job_template\.)?(training_config\.image|trainer\.image)|image",
        message=r"no container runtime",
    ),
    Refusal(
        "scheduling_config.on_exceed and its deprecated former name max_cost_on_exceed (still accepted), not both at"
        " once (docs/BUDGETS.md)",
        422,
        _ISSUE16_OPS,
        r"(.*\.)?scheduling_config\.max_cost_on_exceed",
        message=r"send on_exceed only",
    ),
    Refusal(
        "a CUSTOM command's path-like parts are confined like custom_script_path (docs/SECURITY.md)",
        422,
        _ISSUE16_OPS,
        r"(job_template\.)?training_config\.framework\.command\[\d+\]",
    ),
    Refusal(
        "POST /train's payload becomes a job (functions/service/compat/deepfinery.py): what the job's validation refuses is"
        " named by the /train field it came from (paths, GPUs, extra_args, the frameworks not supported yet)",
        422,
        ("POST /train",),
        r"framework|config_path|extra_args\..+|dataset_uri|checkpoint_base_uri|model_id|gpus_per_node|num_nodes|cpus_per_node"
        r"|memory_per_node_gb|run_id|annotations|env(\..+)?|labels(\..+)?|body|training_config.*|data_config.*|resource_config.*"
        r"|output_config.*",
    ),
    Refusal("the id names no object of the caller's: unknown, deleted, or another principal's", 404, _BY_ID),
    Refusal(
        "only the deployment's admins define and delete teams (docs/TEAMS.md) and let a job run over a budget"
        " (docs/BUDGETS.md); the fuzzer is alice",
        403,
        ADMIN_ONLY,
    ),
    Refusal(
        "a non-admin budgets only itself or its own team (docs/BUDGETS.md): a label, the deployment, another principal"
        " or another team is the admins'",
        403,
        ("POST /budgets",),
    ),
    Refusal(
        "a budget's rules across fields (docs/BUDGETS.md): a scope's value by its kind (a team name, an IAM ARN, key=value,"
        " none for the deployment), a custom period's range, each (percent, action) once, a PATCH changes something",
        422,
        ("POST /budgets", "PATCH /budgets"),
        r"body|scope|thresholds",
        r"budget|team name|IAM ARN|label selector|custom period|starts_at|ends_at|\(percent, action\)|amount_usd, thresholds",
    ),
    Refusal(
        "the object's status does not allow the action (cancel a COMPLETED job, ...), a concurrent change, or the first"
        " request with the same Idempotency-Key still running",
        409,
        ("POST ", "PATCH ", "DELETE "),
    ),
    Refusal("the Idempotency-Key was used before with another body", 422, ("POST /jobs",), r"Idempotency-Key"),
    Refusal("next_token is opaque: only a token the API returned is one", 422, ("GET ",), r"next_token", r"not a token this API returned"),
    Refusal(
        "a priority band's bounds across fields: priority_min <= priority_max", 422, ("GET /jobs",), r"priority_min", r"above priority_max"
    ),
    Refusal(
        "a webhook URL must be HTTPS and resolve to public addresses (docs/SECURITY.md): what a host resolves to is"
        " DNS's answer, not its spelling",
        422,
        ("POST /webhooks",),
        r"url",
    ),
    Refusal("a webhook's event_types glob must match an event type the deployment has", 422, ("POST /webhooks",), r"event_types"),
    Refusal(
        "redeliver names an event sent to this webhook in the last 30 days, and until after since",
        422,
        ("POST /webhooks/{webhook_id}/redeliver",),
        r"event_id|until",
    ),
    Refusal(
        "redeliver takes one event or a time range: event_id or since (with an optional until), a rule across fields",
        422,
        ("POST /webhooks/{webhook_id}/redeliver",),
        r"body",
        r"give either event_id or since|until needs since",
    ),
    Refusal(
        "checkpoint_id names no checkpoint of this job", 422, ("POST /jobs/{job_id}/resume", "POST /jobs/{job_id}/retry"), r"checkpoint_id"
    ),
    Refusal(
        "a time zone must exist in the IANA database",
        422,
        ("POST /retraining-policies", "PATCH /retraining-policies"),
        r".*timezone",
        r"time ?zone|IANA",
    ),
    Refusal(
        "the artifacts bucket starts jobs only from objects under datasets/ (the deployment's layout)",
        422,
        ("POST /retraining-policies", "PATCH /retraining-policies"),
        r"trigger\.prefix",
        r"only objects under",
    ),
    Refusal(
        "a schedule expression or an input mapping's target must parse (EventBridge Scheduler's cron()/rate() grammar,"
        " a dotted path into the job request): a grammar, not a JSON Schema pattern",
        422,
        ("POST /retraining-policies", "PATCH /retraining-policies"),
        r"trigger\.schedule\.expression|input_mapping\.\d+",
        r"a schedule is cron|not a valid (cron|rate)|is not a dotted path",
    ),
    Refusal(
        "an EventBridge event pattern must follow EventBridge's grammar (values in non-empty lists, known operators,"
        " numeric in pairs): openapi.json states its outer shape (a non-empty object), not the grammar",
        422,
        ("POST /retraining-policies", "PATCH /retraining-policies"),
        r"trigger\.event\.pattern|trigger\.pattern",
        r"^event pattern .*(must be a non-empty object|an empty list matches nothing|values must be in a list|"
        r"is not a value or an operator|"
        r"unsupported operator|numeric takes pairs|exists takes|(prefix|suffix|wildcard|equals-ignore-case) takes a string|"
        r"anything-but takes values)|^at most \d+ keys and list items in all",
    ),
    Refusal(
        "a path its owner may not use (path confinement, issue 11 point 1, docs/SECURITY.md): whose files a path"
        " names depends on the deployment, the allowed directories and who owns which job, not on its spelling",
        422,
        ("POST /jobs", "PATCH /jobs", "POST /retraining-policies", "PATCH /retraining-policies", "POST /sweeps"),
        r"(job_template\.)?(data_config\.sources\[\d+\]\.path|data_config\.preprocess\.tokenizer|"
        r"training_config\.(base_model\.(model_id|tokenizer_id)|resume_from_checkpoint|framework\.custom_script_path)|"
        r"output_config\.output_path)",
    ),
    Refusal(
        "the options a framework takes depend on framework.type (DEEPSPEED: zero_stage 1-3 only, no ZeRO-Offload, no"
        " float16 across processes), as framework.config's description in openapi.json says",
        422,
        ("POST /jobs", "PATCH /jobs", "POST /retraining-policies", "PATCH /retraining-policies", "POST /sweeps"),
        r"(job_template\.)?training_config(\.framework)?",
        r"DEEPSPEED|ZeRO-Offload|framework\.config\.zero_stage",
    ),
    Refusal(
        "an input mapping's target must name a field of the policy's job template, and labels the policy does not"
        " set itself (a rule across input_mapping and job_template)",
        422,
        ("POST /retraining-policies", "PATCH /retraining-policies"),
        r"input_mapping(\.\d+)?|job_template",
        r"input_mapping\[\d+\]\.target|are set by the policy on every job it starts|jobs would carry \d+ labels",
    ),
    Refusal(
        "a rule of the trainer's checked at submit (issue 11 point 3: error type invalid_config), across fields or"
        " list items (e.g. no data source with split 'train', world_size over the GPUs)",
        422,
        ("POST /jobs", "PATCH /jobs", "POST /retraining-policies", "PATCH /retraining-policies", "POST /sweeps"),
        kind="invalid_config",
    ),
    Refusal(
        "a sweep's parameters obey rules across their fields (min <= max, a log scale from min > 0, a step that divides"
        " the range, whole bounds for an int, distinct values, values or a range, one parameter per target, a grid no"
        " larger than maxTrials and enumerable), docs/SWEEPS.md",
        422,
        ("POST /sweeps",),
        _TUNING,
        r"greater than max|scale log|does not divide|whole number|distinct|values|min and max|takes no step|finite|"
        r"steps|same target|the grid has|a grid needs|not a dotted path|parameter name|rounds the range|round together",
    ),
    Refusal(
        "a sweep's early stopping takes only its own rule's settings, each away from its default only under its rule"
        " (type asha: minResource, reductionFactor; hyperband: maxResource >= minResource, bootstrapCount with"
        " maxResource), docs/SWEEPS.md: a rule across earlyStopping's fields",
        422,
        ("POST /sweeps",),
        _TUNING,
        r"not a setting of early stopping|smaller than minResource|bootstrapCount needs maxResource",
    ),
    Refusal(
        "a sweep's metric must be one its trials can report: our trainer reports eval_* only from validation data"
        " (a rule across the metric and the template's data_config, docs/SWEEPS.md)",
        422,
        ("POST /sweeps",),
        _TUNING,
        r"never report",
    ),
    Refusal(
        "a sweep parameter's target must name a field of the template (or a hyperparameter the trainer knows)",
        422,
        ("POST /sweeps",),
        _TUNING,
        r"no field|index \[\d+\]|whole object|not a hyperparameter|hyperparameter",
    ),
    Refusal(
        "every trial's job (the template with each value a parameter can take, each grid point) must pass POST /jobs's checks,"
        " and the template may not set the labels the sweep sets",
        422,
        ("POST /sweeps",),
        r"job_template(\..*)?",
        r"a trial's job|set by the sweep on every trial|trials carry",
    ),
    Refusal(
        "a hyperparameter's value is a string (seeds/000): openapi.json states each known key's spelling (an integer,"
        " a number, true/false, one of a list), not the number's range (learning_rate > 0, lora_dropout < 1)",
        422,
        ("POST /jobs", "PATCH /jobs", "POST /retraining-policies", "PATCH /retraining-policies", "POST /sweeps"),
        r"(job_template\.)?training_config\.hyperparameters\.[a-z0-9_]+",
        r"^Input should be (greater|less) than",
    ),
    Refusal(
        "a hyperparameter key our trainer does not know: the document allows any key, since a CUSTOM script takes its"
        " own (as --key value); for the other frameworks it is refused, a rule across fields (framework.type) that"
        " hyperparameters' description states (issue 21)",
        422,
        ("POST /jobs", "PATCH /jobs", "POST /retraining-policies", "PATCH /retraining-policies", "POST /sweeps"),
        r"(job_template\.)?training_config\.hyperparameters\..*",  # the empty key too
        message=r"^unknown hyperparameter",  # by its words: PATCH re-validates the merged job, whose error type differs
    ),
    Refusal(
        "two hyperparameters that name one setting must agree (eval_strategy / evaluation_strategy, optim /"
        " optimizer, an alias and its data_config field, warmup_ratio with warmup_steps): a rule across keys",
        422,
        ("POST /jobs", "PATCH /jobs", "POST /retraining-policies", "PATCH /retraining-policies", "POST /sweeps"),
        r"(job_template\.)?training_config\.hyperparameters\.[a-z0-9_]+",
        kind="invalid_hyperparameter",
    ),
    Refusal(
        "local mode's default compute 'local' runs one node: node_count > 1 needs compute ec2 or sagemaker (issue 16)",
        422,
        _ISSUE16_OPS,
        r"(job_template\.)?resource_config\.node_count|num_nodes",
        r"compute 'local' runs one node",
    ),
    Refusal(
        "experiment tracking (docs/TRACKING.md): an MLflow tracking URI is an http(s) server without credentials, query"
        " or fragment, a SageMaker MLflow ARN or a file:/// store; W&B online needs api_key_secret_arn, a secret the"
        " caller may use (trainplane/<principal key>/, this deployment's region), and local mode logs W&B offline only;"
        " a CUSTOM script logs its own runs. openapi.json states a string, not the URI grammar nor who owns a secret",
        422,
        ("POST /jobs", "PATCH /jobs", "POST /retraining-policies", "PATCH /retraining-policies", "POST /sweeps"),
        r"(job_template\.)?output_config\.tracking(\.[a-z_]+)*",
        r"(online mode needs api_key_secret_arn|log W&B offline only|is not one you may use|the trainers read secrets of|"
        r"SageMaker MLflow ARN|file store|scheme|names no host|credentials in the URI|no query or fragment|"
        r"bad port|CUSTOM script logs its own runs)",
    ),
    Refusal(
        "RLHF's rules across fields (docs/TRAINER.md, RLHF): the rlhf block goes with training_type RLHF and needs a"
        " reward; GRPO runs on HF_TRAINER in one process, has no evaluation pass, and a step's completions are whole"
        " groups of num_generations; the hyperparameters GRPO cannot honour are refused by name",
        422,
        ("POST /jobs", "PATCH /jobs", "POST /retraining-policies", "PATCH /retraining-policies", "POST /sweeps", "POST /train"),
        r"(job_template\.)?(training_config\.(rlhf(\.[a-z_]+)?|framework\.type|framework\.distributed\.world_size|"
        r"hyperparameters\.[a-z0-9_]+)|data_config\.(validation_split|sources\[\d+\]\.split)|"
        r"output_config\.checkpoint\.metric_for_best_model)",
        r"(RLHF|rlhf block|reward_|num_generations)",
    ),
    Refusal(
        "a rule across fields: a field required when another has a given value, a training type that needs a GPU,"
        " processes (world_size) the nodes and GPUs asked for cannot hold",
        422,
        (),
        r".*",
        r"(is required when|give exactly one of|needs a GPU|needs \d+ GPUs per node|is not a multiple of resource_config)",
    ),
)
