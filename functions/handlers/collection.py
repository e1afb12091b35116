"""The routes every collection of owned resources has, declared once: a page of them, one of them, delete one.

policies.py, sweeps.py and webhooks.py name their paths, models, summaries and service calls; what each of
these routes does (the caller through `ResourceRules.principal`, the page parameters, another principal's
resource is the service's 404, a 204 without a body) is written here, and the rules it follows are errors.py's.

Each route is an ordinary function on the router whose signature (the path parameter named as in the path,
the page parameters, the answer's model) is what Powertools validates and documents: the OpenAPI entry is
the one a hand-written route would have (schemas/openapi.json did not change when the routers moved here).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from typing import Any

from functions.handlers.errors import PAGE_PARAMS, PageLimit, PageToken, ResourceRules, no_content
from functions.handlers.models import annotation
from functions.handlers.models import models_of as models_of  # the routes' annotations resolve through it

_KEYWORD = inspect.Parameter.POSITIONAL_OR_KEYWORD


def _declare(route: Callable[..., Any], name: str, parameters: dict[str, tuple[Any, Any]], returns: Any) -> Callable[..., Any]:
    """`route` under its own name with the signature Powertools reads (parameter -> (type, default))."""
    route.__name__ = route.__qualname__ = name
    signature = [inspect.Parameter(p, _KEYWORD, annotation=t, default=d) for p, (t, d) in parameters.items()]
    route.__signature__ = inspect.Signature(signature, return_annotation=returns)  # type: ignore[attr-defined]
    route.__annotations__ = {p: t for p, (t, _) in parameters.items()} | ({} if returns is inspect.Signature.empty else {"return": returns})
    return route


def add_collection(
    rules: ResourceRules,
    path: str,
    *,
    service: Callable[[], Any],
    names: tuple[str, str],
    models: tuple[str, str | None],
    id_type: Any,
    summaries: Mapping[str, str],
    tags: list[str],
    get_errors: tuple[int, ...] = (404, 422),
    delete_errors: tuple[int, ...] = (404, 409, 422),
) -> None:
    """The collection at `path` and its items at `path/<id_key>`: a page (GET `path`, where `models` has a page
    model), one (GET, 404 for another principal's) and delete (DELETE, 204 without a body).

    `names`: (singular, plural), which name the routes (`list_<plural>`, `get_<singular>`, `delete_<singular>`)
    and the service's calls (`service().list_<plural>(principal, limit=, next_token=)`, `.get(id, principal)`,
    `.delete(id, principal)`); `models`: (the item's, the page's or None) as "module:Name" references, imported
    on the routes' first request, not at the API's import (models.py); `summaries`: each route's, by "list",
    "get" and "delete"; `get_errors`, `delete_errors`: the codes those two answer besides 403/405/500."""
    singular, plural = names
    item, page = annotation(models[0]), (annotation(models[1]) if models[1] is not None else None)
    item_path = f"{path}/<{rules.id_key}>"
    if page is not None:
        _add_page(rules, path, f"list_{plural}", summaries["list"], (page, f"A page of {plural}"), service, plural, tags)
    _add_get(rules, item_path, f"get_{singular}", summaries["get"], (item, f"The {singular}"), get_errors, id_type, service, tags)
    _add_delete(rules, item_path, f"delete_{singular}", summaries["delete"], delete_errors, id_type, service, tags)


def _add_page(
    rules: ResourceRules,
    path: str,
    name: str,
    summary: str,
    answer: tuple[str, str],
    service: Callable[[], Any],
    plural: str,
    tags: list[str],
) -> None:
    model, description = answer

    def route(**page: Any) -> Any:
        return getattr(service(), f"list_{plural}")(rules.principal(params=PAGE_PARAMS), **page)

    parameters = {"limit": (PageLimit, 50), "next_token": (PageToken, None)}
    rules.router.get(path, summary=summary, responses=rules.responses(200, description, 422), tags=tags)(
        _declare(route, name, parameters, model)
    )


def _add_get(
    rules: ResourceRules,
    path: str,
    name: str,
    summary: str,
    answer: tuple[str, str],
    errors: tuple[int, ...],
    id_type: Any,
    service: Callable[[], Any],
    tags: list[str],
) -> None:
    model, description = answer

    def route(**values: Any) -> Any:
        resource_id = values[rules.id_key]
        return service().get(resource_id, rules.principal(resource_id))

    rules.router.get(path, summary=summary, responses=rules.responses(200, description, *errors), tags=tags)(
        _declare(route, name, {rules.id_key: (id_type, inspect.Parameter.empty)}, model)
    )


def _add_delete(
    rules: ResourceRules,
    path: str,
    name: str,
    summary: str,
    errors: tuple[int, ...],
    id_type: Any,
    service: Callable[[], Any],
    tags: list[str],
) -> None:
    def route(**values: Any) -> Any:
        resource_id = values[rules.id_key]
        service().delete(resource_id, rules.principal(resource_id))
        return no_content()

    responses = rules.responses(204, "Deleted", *errors, content=False)
    rules.router.delete(path, status_code=204, summary=summary, responses=responses, tags=tags)(
        _declare(route, name, {rules.id_key: (id_type, inspect.Parameter.empty)}, inspect.Signature.empty)
    )
