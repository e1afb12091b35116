"""The web dashboard's built assets, shipped inside the Python distribution.

`dashboard/` (the TypeScript source, npm lockfile) builds into `static/` here with `npm run build`
(`make dashboard`; `make install` runs it when node is present). The build is committed, so a
`pip install` without node still carries the page; tests/unit/test_dashboard_assets.py checks that it
matches the source (static/source-hash.txt is the sha256 of every input the build reads).

Local mode's front door serves `static/` at `/` and `/assets/...`; the cloud stack uploads it to the
assets bucket behind CloudFront.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

STATIC_DIR = Path(__file__).resolve().parent / "static"
SOURCE_HASH_FILE = "source-hash.txt"
# What the build reads, besides everything under src/ (dashboard/scripts/stamp.mjs lists the same).
BUILD_INPUTS = ("index.html", "package.json", "package-lock.json", "tsconfig.json", "vite.config.ts")


def source_hash(source_dir: Path) -> str:
    """The sha256 that dashboard/scripts/stamp.mjs writes into static/source-hash.txt at build time."""
    paths = list(BUILD_INPUTS)
    paths += [p.relative_to(source_dir).as_posix() for p in sorted((source_dir / "src").rglob("*")) if p.is_file()]
    digest = hashlib.sha256()
    for path in sorted(paths):
        digest.update(path.encode() + b"\0")
        digest.update((source_dir / path).read_bytes())
        digest.update(b"\0")
    return digest.hexdigest()


def built_hash() -> str | None:
    try:
        return (STATIC_DIR / SOURCE_HASH_FILE).read_text().strip()
    except FileNotFoundError:
        return None
