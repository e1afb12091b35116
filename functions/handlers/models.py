"""A router's request and response models, imported on the route's first request instead of at the API's import.

Cold start (docs/BENCHMARKS.md): creating a module's pydantic classes costs milliseconds even with
`defer_build`, and the API Lambda's import paid it for every router it includes. Powertools reads a route's
annotations (strings, under `from __future__ import annotations`) only when the route is first resolved or
the OpenAPI document is generated, so a router may name its models through a `LazyModels`:

    if TYPE_CHECKING:
        from schemas import sweeps as models
    else:
        models = LazyModels("schemas.sweeps")

    def create_sweep(body: Annotated[models.SweepRequest, Body()]) -> models.Sweep: ...

and `schemas.sweeps` is imported the first time an attribute of `models` is read (importlib's import lock:
two first requests at once import it once). The collection routes (collection.py) take their models as
"module:Name" references, resolved the same way. The rule, tested by tests/unit/test_cold_start.py: the API's
import creates the models of the job routes (api.py) and the shared error answers only.
"""

from __future__ import annotations

import importlib
from typing import Any


class LazyModels:
    """The module `name`, imported on first attribute access."""

    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        self.name = name

    def __getattr__(self, attr: str) -> Any:
        if attr.startswith("__"):  # copy, pickle and inspect probe dunders: never import for those
            raise AttributeError(attr)
        return getattr(importlib.import_module(self.name), attr)

    def __repr__(self) -> str:
        return f"LazyModels({self.name!r})"


def models_of(module: str) -> LazyModels:
    return LazyModels(module)


def annotation(reference: str) -> str:
    """A "module:Name" reference as an annotation string that resolves in a namespace holding `models_of`."""
    module, _, name = reference.partition(":")
    if not module or not name.isidentifier():
        raise ValueError(f"a model reference is 'module:Name', not {reference!r}")
    return f"models_of({module!r}).{name}"
