"""schemas/sweeps.py: OME's hyperParameterTuningConfig in camelCase and snake_case, every parameter form,
every validation error naming its field, grid enumeration; and the API handler never imports Optuna."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import pytest
from pydantic import ValidationError

from schemas.sweeps import ParameterSpec, SweepRequest, TuningConfig
from tests.helpers.sweeps import sweep_body

METRIC = {"name": "accuracy", "goal": "maximize"}


def _tuning(**fields: Any) -> dict[str, Any]:
    return {"method": "random", "maxTrials": 10, "metric": METRIC, "parameters": {"lr": {"type": "double", "min": 0.1, "max": 1}}, **fields}


def _error(data: dict[str, Any]) -> tuple[str, str]:
    with pytest.raises(ValidationError) as caught:
        TuningConfig.model_validate(data)
    first = caught.value.errors()[0]
    return ".".join(str(p) for p in first["loc"]), first["msg"]


def test_omes_seed_example_is_accepted_verbatim() -> None:
    # seeds/002: int given as values, double without scale
    seed = {
        "method": "random",
        "maxTrials": 10,
        "metric": {"name": "accuracy", "goal": "maximize"},
        "parameters": {
            "learning_rate": {"type": "double", "min": 0.0001, "max": 0.01},
            "batch_size": {"type": "int", "values": [8, 16, 32]},
        },
    }
    config = TuningConfig.model_validate(seed)
    assert config.max_trials == 10 and config.parameters["batch_size"].grid_values() == [8, 16, 32]


def test_camel_case_and_snake_case_are_the_same_config() -> None:
    camel = _tuning(maxParallelTrials=3, earlyStopping={"type": "median", "warmupSteps": 2}, completionCriteria={"targetValue": 0.9})
    snake = {
        "method": "random",
        "max_trials": 10,
        "metric": METRIC,
        "parameters": {"lr": {"type": "double", "min": 0.1, "max": 1}},
        "max_parallel_trials": 3,
        "early_stopping": {"type": "median", "warmup_steps": 2},
        "completion_criteria": {"target_value": 0.9},
    }
    assert TuningConfig.model_validate(camel) == TuningConfig.model_validate(snake)
    body = sweep_body()
    config = body.pop("hyperParameterTuningConfig")
    snake_body = {**body, "hyperparameter_tuning_config": config}
    assert SweepRequest.model_validate(snake_body).hyperparameter_tuning_config.seed == 7


@pytest.mark.parametrize(
    ("spec", "values"),
    [
        ({"type": "int", "min": 1, "max": 7, "step": 3}, [1, 4, 7]),
        ({"type": "int", "min": 2, "max": 4}, [2, 3, 4]),
        ({"type": "int", "min": 1, "max": 4, "scale": "log"}, [1, 2, 3, 4]),
        ({"type": "int", "values": [8, 16]}, [8, 16]),
        ({"type": "double", "min": 0.0, "max": 1.0, "step": 0.25}, [0.0, 0.25, 0.5, 0.75, 1.0]),
        ({"type": "double", "values": [0.1, 0.3]}, [0.1, 0.3]),
        ({"type": "double", "min": 0.001, "max": 0.1, "scale": "log"}, None),
        ({"type": "double", "min": 0.1, "max": 0.9}, None),
        ({"type": "categorical", "values": ["adamw", "sgd", True, 3]}, ["adamw", "sgd", True, 3]),
    ],
)
def test_every_parameter_form_and_its_grid(spec: dict[str, Any], values: list[Any] | None) -> None:
    assert ParameterSpec.model_validate(spec).grid_values() == values


@pytest.mark.parametrize(
    ("parameter", "message"),
    [
        ({"type": "double", "min": 2, "max": 1}, "min (2) is greater than max (1)"),
        ({"type": "double", "min": 0, "max": 1, "scale": "log"}, "scale log needs min > 0"),
        ({"type": "int", "min": 0, "max": 10, "step": 3}, "step 3 does not divide the range 0..10"),
        ({"type": "double", "min": 0, "max": 1, "step": 0.3}, "step 0.3 does not divide the range"),
        ({"type": "int", "min": 0.5, "max": 3}, "must be a whole number"),
        ({"type": "int", "values": [1, 2.5]}, "whole numbers"),
        ({"type": "categorical"}, "needs values"),
        ({"type": "categorical", "values": ["a", "a"]}, "distinct"),
        ({"type": "double", "max": 1}, "needs min and max"),
        ({"type": "int", "values": [1], "min": 0}, "either values or min/max/step"),
        ({"type": "double", "min": 0, "max": 1, "target": "Bad Path"}, "not a dotted path"),
        ({"type": "double", "min": 0.1, "max": 1, "scale": "log", "step": 0.1}, "takes no step"),
        ({"type": "double", "min": -1e308, "max": 1e308, "step": 1}, "finite range"),
        ({"type": "double", "min": 0, "max": 1e300, "step": 1}, "more than 1,000,000,000 steps"),
    ],
)
def test_each_invalid_parameter_is_refused_naming_it(parameter: dict[str, Any], message: str) -> None:
    where, why = _error(_tuning(parameters={"lr": parameter}))
    assert where == "parameters.lr" and message in why


def test_config_errors_name_their_field() -> None:
    assert _error(_tuning(method="hill-climb"))[0] == "method"
    assert _error(_tuning(maxTrials=0))[0] == "maxTrials"
    assert _error(_tuning(metric={"name": "acc", "goal": "up"}))[0] == "metric.goal"
    assert _error(_tuning(earlyStopping="bohb"))[0] == "earlyStopping.type"
    assert _error(_tuning(parameters={}))[0] == "parameters"
    assert _error(_tuning(parameters={"9x": {"type": "int", "min": 1, "max": 2}}))[0] == "parameters"
    b = "training_config.hyperparameters.b"
    same = {"a": {"type": "int", "min": 1, "max": 2, "target": b}, "b": {"type": "int", "min": 1, "max": 2}}
    assert "same target" in _error(_tuning(parameters=same))[1]


def test_a_grid_larger_than_max_trials_is_refused_and_a_smaller_one_caps_the_trials() -> None:
    grid = {"a": {"type": "int", "min": 1, "max": 3}, "b": {"type": "categorical", "values": ["x", "y"]}}
    _, why = _error(_tuning(method="grid", maxTrials=5, parameters=grid))
    assert "maxTrials: the grid has 6 points, more than maxTrials=5" in why
    config = TuningConfig.model_validate(_tuning(method="grid", maxTrials=50, parameters=grid))
    assert config.grid_size() == 6 and config.effective_max_trials() == 6
    # A grid of 10^18 points is refused by arithmetic, never listed
    huge = {"a": {"type": "int", "min": 0, "max": 999_999_999}, "b": {"type": "int", "min": 0, "max": 999_999_999}}
    assert "the grid has 1000000000000000000 points" in _error(_tuning(method="grid", parameters=huge))[1]
    continuous = {"lr": {"type": "double", "min": 0.1, "max": 1}}
    assert "a grid needs every parameter enumerable" in _error(_tuning(method="grid", parameters=continuous))[1]


def test_the_template_may_not_set_the_sweeps_labels() -> None:
    body = sweep_body()
    body["job_template"]["labels"] = {"sweep_id": "mine"}
    with pytest.raises(ValidationError, match="label 'sweep_id' is reserved: a sweep sets it on its trials' jobs"):
        SweepRequest.model_validate(body)


def test_importing_the_api_handler_does_not_import_optuna() -> None:
    modules = "functions.handlers.api, functions.service.sweeps.service, functions.service.sweeps.hooks"
    code = f"import sys, {modules}; print('optuna' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


@pytest.mark.parametrize(
    ("stopping", "field", "message"),
    [
        ({"type": "hyperband", "minResource": 4, "maxResource": 2}, "earlyStopping.maxResource", "smaller than minResource (4)"),
        ({"type": "hyperband", "maxResource": 0}, "earlyStopping.maxResource", "greater than or equal to 1"),
        ({"type": "hyperband", "bootstrapCount": 2}, "earlyStopping.bootstrapCount", "needs maxResource"),
        ({"type": "hyperband", "reductionFactor": 1}, "earlyStopping.reductionFactor", "greater than or equal to 2"),
        ({"type": "hyperband", "startupTrials": 3}, "earlyStopping.startupTrials", "not a setting of early stopping 'hyperband'"),
        ({"type": "asha", "maxResource": 9}, "earlyStopping.maxResource", "not a setting of early stopping 'asha'"),
        ({"type": "median", "minResource": 2}, "earlyStopping.minResource", "(it takes: startupTrials, warmupSteps)"),
        ({"type": "none", "warmupSteps": 5}, "earlyStopping.warmupSteps", "(it takes: nothing)"),
    ],
)
def test_early_stopping_settings_are_checked_against_their_rule(stopping: dict[str, Any], field: str, message: str) -> None:
    where, why = _error(_tuning(earlyStopping=stopping))
    assert where == field and message in why


def test_hyperband_settings_are_accepted_and_a_sweep_read_back_validates_again() -> None:
    tuning = TuningConfig.model_validate(
        _tuning(earlyStopping={"type": "hyperband", "minResource": 2, "maxResource": 32, "reductionFactor": 2, "bootstrapCount": 1})
    )
    stopping = tuning.early_stopping
    assert (stopping.min_resource, stopping.max_resource, stopping.reduction_factor, stopping.bootstrap_count) == (2, 32, 2, 1)
    # The API echoes every setting, defaults of the other rules included: the echo is a valid config
    for echoed in (tuning.model_dump(mode="json", by_alias=True), tuning.model_dump(mode="json")):
        assert TuningConfig.model_validate(echoed) == tuning
    assert TuningConfig.model_validate(_tuning(earlyStopping="hyperband")).early_stopping.max_resource is None
