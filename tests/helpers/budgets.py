"""Budgets in memory (functions/service/budgets.py BudgetRepository): versioned puts, events kept in order."""

from __future__ import annotations

import threading
from collections.abc import Iterable
from datetime import datetime
from typing import Any

from functions.errors import BudgetChanged, BudgetNotFound
from schemas.budgets import Budget, BudgetSpec
from schemas.events import BudgetOverride, BudgetThresholdCrossed


class InMemoryBudgetRepository:
    def __init__(self) -> None:
        self.budgets: dict[str, Budget] = {}
        self.events: list[BudgetThresholdCrossed | BudgetOverride] = []
        self._lock = threading.Lock()

    def get(self, budget_id: str) -> Budget:
        if budget_id not in self.budgets:
            raise BudgetNotFound(budget_id)
        return self.budgets[budget_id]

    def list(self) -> list[Budget]:
        return [self.budgets[k] for k in sorted(self.budgets)]

    def create(self, budget: Budget) -> None:
        with self._lock:
            assert budget.budget_id not in self.budgets
            self.budgets[budget.budget_id] = budget

    def put(self, budget: Budget, expected_version: int, events: Iterable[BudgetThresholdCrossed | BudgetOverride] = ()) -> Budget:
        with self._lock:
            current = self.budgets.get(budget.budget_id)
            if current is None or current.version != expected_version:
                raise BudgetChanged(budget.budget_id)
            stored = budget.model_copy(update={"version": expected_version + 1})
            self.budgets[budget.budget_id] = stored
            self.events.extend(events)
            return stored

    def delete(self, budget_id: str) -> bool:
        with self._lock:
            return self.budgets.pop(budget_id, None) is not None


def budget(budget_id: str, at: datetime, **spec: Any) -> Budget:
    """A stored budget as BudgetService.create makes it: budget("b1", T0, amount_usd=1, scope={"kind": "deployment"})."""
    given = BudgetSpec.model_validate({"name": budget_id, "period": "lifetime", **spec})
    return Budget(
        budget_id=budget_id,
        **given.model_dump(),
        created_by="arn:aws:iam::123456789012:user/admin",
        created_at=at,
        updated_at=at,
        period_start=at,
    )
