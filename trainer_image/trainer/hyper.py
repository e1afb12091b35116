"""Hyperparameters as the trainer uses them: the rules are schemas/hyperparameters.py's, shared with
submit (which refuses what this would refuse, with a 422 naming the key); this module turns a refusal
into the trainer's UserError, for runs whose spec did not come through submit (or came with SageMaker
hyperparameters.json overrides merged over it).
"""

from __future__ import annotations

from pydantic import ValidationError

from schemas.configs import TrainingType
from schemas.hyperparameters import Hyperparameters
from trainer.failures import UserError


class Hyper(Hyperparameters):
    @classmethod
    def from_strings(cls, values: dict[str, str], training_type: TrainingType | str) -> Hyper:
        """Parse the string map; raises UserError naming every unknown or invalid key."""
        try:
            return cls.parse(values, training_type)
        except ValidationError as exc:
            errors = exc.errors()
            unknown = sorted(str(e["loc"][0]) for e in errors if e["type"] == "unknown_hyperparameter")
            if unknown:
                known = ", ".join(sorted(cls.model_fields))
                raise UserError(f"unknown hyperparameter(s): {', '.join(unknown)} (known: {known})") from exc
            problems = "; ".join(f"{'.'.join(str(p) for p in err['loc']) or 'hyperparameters'}: {err['msg']}" for err in errors)
            raise UserError(f"invalid hyperparameters: {problems}") from exc
