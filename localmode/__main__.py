"""`python -m localmode`: local mode without the CLI's dependencies (typer/rich); same as `trainplane up`."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from localmode.up import COMPUTE_CHOICES, DEFAULT_API_HANDLER, run_up


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m localmode", description="Serve the trainplane control plane locally.")
    parser.add_argument("--host", default="127.0.0.1", help="interface to listen on (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=8080, help="0 picks a free port (see endpoint.json)")
    parser.add_argument("--state-dir", type=Path, default=Path(".state"), help="where jobs, history and objects persist")
    parser.add_argument("--compute", choices=COMPUTE_CHOICES, default="local", help="where training runs")
    parser.add_argument(
        "--allow-dir",
        type=Path,
        action="append",
        default=[],
        help="a directory whose files jobs may name (repeatable; also TRAINPLANE_LOCAL_ALLOWED_DIRS); never the state dir",
    )
    parser.add_argument(
        "--capacity-pools", type=Path, default=None, help="with --compute ec2: each pool's free units and interruptions (docs/PLACEMENT.md)"
    )
    parser.add_argument("--gpus", default="", help="emulated GPUs (H100=4,A100=8): a job holds its units, trains on the CPU")
    parser.add_argument(
        "--principal", action="append", default=[], help="a principal to serve besides admin and alice (repeatable), e.g. bob"
    )
    parser.add_argument(
        "--dashboard-user",
        action="append",
        default=[],
        help="a person signed in to the dashboard, in groups of the emulated user pool (repeatable), e.g. ana:ml-research,vision",
    )
    # For tests of the front door itself, before/without the real API: module:function.
    parser.add_argument("--api-handler", default=DEFAULT_API_HANDLER, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if not 0 <= args.port <= 65535:
        parser.error("--port: must be between 0 and 65535")
    try:
        run_up(
            args.host,
            args.port,
            args.state_dir,
            args.compute,
            api_handler=args.api_handler,
            allow_dirs=args.allow_dir,
            capacity_pools=args.capacity_pools,
            gpus=args.gpus,
            principals=args.principal,
            dashboard_users=args.dashboard_user,
        )
    except (RuntimeError, ValueError) as exc:  # refusals with a message for people: busy port, state dir in use ...
        print(f"error: {exc}", file=sys.stderr)
        raise SystemExit(1) from None


if __name__ == "__main__":
    main()
