"""The SDK's budget calls and the dry run (issue 25; docs/BUDGETS.md), mixed into trainplane.Client and
trainplane.AsyncClient: each call is written once as steps, made a method (synced) or a coroutine (asynced).

    client.create_budget({"name": "research-nov", "scope": {"kind": "team", "value": "research"}, "amount_usd": 500})
    client.raise_budget(budget_id, 800)          # PATCH amount_usd: resumes the jobs it paused
    client.forecast(request).total_high_usd      # POST /jobs?dry_run=true: nothing is created
    client.forecast_accuracy().shapes            # GET /forecast-accuracy: the forecast's error per shape
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any
from urllib.parse import quote

from schemas.budgets import BudgetList, BudgetPatch, BudgetSpec, BudgetView, Forecast, ForecastAccuracy
from trainplane.operations import JobRequest, request_body
from trainplane.transport import Requester, Steps, asynced, synced

BudgetRequest = BudgetSpec | Mapping[str, Any]


def budget_path(budget_id: str) -> str:
    if not budget_id or "/" in budget_id:
        raise ValueError(f"not a budget id: {budget_id!r}")
    return f"/budgets/{quote(budget_id, safe='')}"


def create_budget(api: Requester, spec: BudgetRequest) -> Steps[BudgetView]:
    """A budget over a team, a principal, a label or the deployment (non-admins: themselves or their own team)."""
    body = spec.model_dump(mode="json", exclude_unset=True) if isinstance(spec, BudgetSpec) else dict(spec)
    return BudgetView.model_validate((yield from api._request("POST", "/budgets", body=body)))


def list_budgets(api: Requester) -> Steps[list[BudgetView]]:
    """The budgets the caller may see (every budget for admins)."""
    return BudgetList.model_validate((yield from api._request("GET", "/budgets"))).budgets


def get_budget(api: Requester, budget_id: str) -> Steps[BudgetView]:
    return BudgetView.model_validate((yield from api._request("GET", budget_path(budget_id))))


def update_budget(api: Requester, budget_id: str, amount_usd: float | None = None, thresholds: Any = None) -> Steps[BudgetView]:
    """A new amount and/or thresholds; raising the amount resumes the jobs the budget paused."""
    body = BudgetPatch.model_validate({"amount_usd": amount_usd, "thresholds": thresholds}).model_dump(mode="json", exclude_none=True)
    return BudgetView.model_validate((yield from api._request("PATCH", budget_path(budget_id), body=body)))


def raise_budget(api: Requester, budget_id: str, amount_usd: float) -> Steps[BudgetView]:
    return (yield from update_budget(api, budget_id, amount_usd=amount_usd))


def delete_budget(api: Requester, budget_id: str) -> Steps[None]:
    yield from api._request("DELETE", budget_path(budget_id))


def override_budget(api: Requester, budget_id: str, job_id: str, reason: str) -> Steps[BudgetView]:
    """Admins: let one job run over the budget, for a reason (it resumes; a budget.override event records it)."""
    body = {"job_id": job_id, "reason": reason}
    return BudgetView.model_validate((yield from api._request("POST", budget_path(budget_id) + "/resume", body=body)))


def forecast(api: Requester, request: JobRequest) -> Steps[Forecast]:
    """POST /jobs?dry_run=true: the same checks as a submit (the same errors), then the forecast; nothing is created."""
    return Forecast.model_validate((yield from api._request("POST", "/jobs", body=request_body(request), params={"dry_run": "true"})))


def forecast_accuracy(api: Requester) -> Steps[ForecastAccuracy]:
    """GET /forecast-accuracy: per shape, the completed jobs learned from and the forecast's median absolute % error."""
    return ForecastAccuracy.model_validate((yield from api._request("GET", "/forecast-accuracy")))


class BudgetMethods:
    """The budget calls as Client's methods."""

    create_budget = synced(create_budget)
    list_budgets = synced(list_budgets)
    get_budget = synced(get_budget)
    update_budget = synced(update_budget)
    raise_budget = synced(raise_budget)
    delete_budget = synced(delete_budget)
    override_budget = synced(override_budget)
    forecast = synced(forecast)
    forecast_accuracy = synced(forecast_accuracy)


class AsyncBudgetMethods:
    """The same calls as AsyncClient's coroutines."""

    create_budget = asynced(create_budget)
    list_budgets = asynced(list_budgets)
    get_budget = asynced(get_budget)
    update_budget = asynced(update_budget)
    raise_budget = asynced(raise_budget)
    delete_budget = asynced(delete_budget)
    override_budget = asynced(override_budget)
    forecast = asynced(forecast)
    forecast_accuracy = asynced(forecast_accuracy)
