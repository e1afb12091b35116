"""One home for who the caller is: nothing in functions/ reads the request's identity but
functions/handlers/errors.py `signed_caller` (routes ask `principal_of`, which asks `caller_of`).

The sweeps router once read `identity.user_arn` itself: every dashboard user, one role session, became one
sweeps principal. This scan fails on such a copy, however it is spelt (the data class's attributes, the
raw event's keys, or a route calling `caller_arn` on its own).
"""

from __future__ import annotations

import ast
import textwrap
from pathlib import Path

FUNCTIONS = Path(__file__).resolve().parents[2] / "functions"
HOME = (FUNCTIONS / "handlers" / "errors.py", "signed_caller")

# APIGatewayProxyEvent's identity accessors, and the raw event's keys for the same values.
IDENTITY_ATTRIBUTES = {
    "request_context",
    "identity",
    "user_arn",
    "cognito_identity_id",
    "cognito_authentication_type",
    "cognito_authentication_provider",
    "caller",
}
IDENTITY_KEYS = {
    "requestContext",
    "identity",
    "userArn",
    "cognitoIdentityId",
    "cognitoAuthenticationType",
    "cognitoAuthenticationProvider",
    "caller",
    "user",
}
READERS = {"caller_arn"}


def identity_reads(source: str) -> list[tuple[int, str, str | None]]:
    """(line, what, enclosing function) for each read of the request's identity in `source`."""
    tree = ast.parse(source)
    keys = _keys(tree)
    found: list[tuple[int, str, str | None]] = []

    def visit(node: ast.AST, function: str | None) -> None:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            function = node.name
        if isinstance(node, ast.Attribute) and node.attr in IDENTITY_ATTRIBUTES:
            found.append((node.lineno, f".{node.attr}", function))
        elif isinstance(node, ast.Call) and _called(node) in READERS:
            found.append((node.lineno, f"{_called(node)}(...)", function))
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in IDENTITY_KEYS and id(node) in keys:
            found.append((node.lineno, repr(node.value), function))
        for child in ast.iter_child_nodes(node):
            visit(child, function)

    visit(tree, None)
    return found


def _called(call: ast.Call) -> str:
    func = call.func
    return func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else ""


def _keys(tree: ast.Module) -> set[int]:
    """The string constants used as a subscript or a .get()/.pop() key (not prose), by id."""
    keys = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant):
            keys.add(id(node.slice))
        elif isinstance(node, ast.Call) and _called(node) in {"get", "pop", "setdefault"} and node.args:
            keys.add(id(node.args[0]))
    return keys


def test_only_caller_of_reads_the_request_identity() -> None:
    strays = []
    for path in sorted(FUNCTIONS.rglob("*.py")):
        for line, what, function in identity_reads(path.read_text()):
            if (path, function) != HOME:
                strays.append(f"{path.relative_to(FUNCTIONS.parent)}:{line} {what} in {function or 'module'}")
    assert not strays, "read the caller through functions.handlers.errors.principal_of (or caller_of) only:\n" + "\n".join(strays)


def test_the_home_itself_is_seen_reading() -> None:
    # The scan is not blind: it finds caller_of's own reads (and only allows them there).
    path, function = HOME
    assert {(what, where) for _, what, where in identity_reads(path.read_text())} >= {
        (".request_context", function),
        ("caller_arn(...)", function),
    }


def test_the_old_sweeps_copy_and_its_variants_are_caught() -> None:
    # The sweeps router's own reader before issue 21, and the other spellings of the same mistake.
    copies = {
        "sweeps": """
            def _principal(sweep_id=None):
                arn = cast("APIGatewayProxyEvent", router.current_event).request_context.identity.user_arn
                return composition.sweep_service().principal(arn)
        """,
        "caller_arn": """
            def _signed():
                identity = router.current_event.request_context.identity
                return caller_arn(identity.user_arn, identity.cognito_identity_id, identity.cognito_authentication_type)
        """,
        "raw event": """
            def _who(event):
                return event["requestContext"]["identity"].get("userArn")
        """,
    }
    for name, source in copies.items():
        assert identity_reads(textwrap.dedent(source)), f"the {name} copy went unnoticed"
    # Prose is not a read
    assert not identity_reads('"""The caller is requestContext.identity.userArn."""\nx = "userArn is the caller"\n')
