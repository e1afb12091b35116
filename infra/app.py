"""The CDK app: `python infra/app.py` (what cdk.json runs) synthesizes the stack for one stage.

Context: `-c stage=dev|prod` plus the fields of infra.config.StageConfig (see docs/DEPLOY.md).
Checks run during synthesis: cdk-nag's AwsSolutions pack, where any finding without an
acknowledgment (its reason beside the resource) fails the synth.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

# Run as a script (cdk.json, make synth), Python puts infra/ first on sys.path, where infra/constructs
# would shadow the `constructs` library: the repository root goes there instead.
HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path[:] = [str(ROOT)] + [p for p in sys.path if Path(p or ".").resolve() not in (HERE, ROOT)]
os.environ.setdefault("JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION", "20")

import json  # noqa: E402

import aws_cdk as cdk  # noqa: E402
from cdk_nag import AwsSolutionsChecks  # noqa: E402

from infra.bundling import LambdaBundle, build_bundle  # noqa: E402
from infra.config import StageConfig  # noqa: E402
from infra.stack import TrainplaneStack  # noqa: E402


def stack_name(config: StageConfig) -> str:
    return f"Trainplane-{config.stage}"


def cdk_json_context() -> dict[str, object]:
    """cdk.json's context, for runs without the CDK CLI (which would otherwise pass it in CDK_CONTEXT_JSON)."""
    if os.environ.get("CDK_CONTEXT_JSON"):
        return {}
    return dict(json.loads((ROOT / "cdk.json").read_text(encoding="utf-8")).get("context", {}))


def add_stack(app: cdk.App, config: StageConfig, bundle: LambdaBundle, sweeps_bundle: LambdaBundle | None = None) -> TrainplaneStack:
    account = config.account or os.environ.get("CDK_DEFAULT_ACCOUNT")
    region = config.region or os.environ.get("CDK_DEFAULT_REGION")
    env = cdk.Environment(account=account, region=region) if account or region else None
    stack = TrainplaneStack(app, stack_name(config), config=config, bundle=bundle, sweeps_bundle=sweeps_bundle, env=env)
    cdk.Tags.of(stack).add("application", "trainplane")
    cdk.Tags.of(stack).add("stage", config.stage)
    return stack


def check(app: cdk.App) -> None:
    """cdk-nag's AwsSolutions pack: any finding without an acknowledgment fails `app.synth()`."""
    cdk.Validations.of(app).add_plugins(AwsSolutionsChecks(app))


def build_app(context: dict[str, object] | None = None, outdir: str | None = None) -> tuple[cdk.App, TrainplaneStack]:
    """The app with its one stack (the stage named by the context) and the checks registered."""
    app = cdk.App(context={**cdk_json_context(), **(context or {})}, outdir=outdir)
    config = StageConfig.from_context(app.node.try_get_context)
    bundle = build_bundle()
    print(bundle.report(), file=sys.stderr)
    sweeps_bundle = build_bundle(sweeps=True)  # the sweep controller's: Optuna, never in the API's bundle
    print("sweep controller " + sweeps_bundle.report(), file=sys.stderr)
    stack = add_stack(app, config, bundle, sweeps_bundle)
    check(app)
    return app, stack


def parse_args(argv: list[str]) -> tuple[dict[str, object], str | None]:
    """`--outdir DIR` and `-c key=value` (as the CDK CLI takes them) for runs without the CLI."""
    context: dict[str, object] = {}
    outdir = None
    args = iter(argv)
    for arg in args:
        if arg == "--outdir":
            outdir = next(args)
        elif arg in ("-c", "--context"):
            key, _, value = next(args).partition("=")
            context[key] = value
        else:
            raise SystemExit(f"unknown argument {arg!r}: use --outdir DIR and -c key=value")
    return context, outdir


def main(argv: list[str] | None = None) -> None:
    started = time.perf_counter()
    context, outdir = parse_args(sys.argv[1:] if argv is None else argv)
    app, stack = build_app(context, outdir=outdir)
    app.synth()
    # The synth's own figure (goal: under a minute offline); the load says how busy the machine was.
    load = os.getloadavg()[0]
    print(f"synthesized {stack.stack_name} in {time.perf_counter() - started:.1f} s (load average {load:.1f})", file=sys.stderr)


if __name__ == "__main__":
    main()
