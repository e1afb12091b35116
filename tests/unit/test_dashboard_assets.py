"""The committed dashboard build matches its source, is complete, self-contained and small."""

from __future__ import annotations

import gzip
import re
from pathlib import Path

import dashboard_assets
from dashboard_assets import STATIC_DIR, built_hash, source_hash

REPO = Path(__file__).resolve().parents[2]
SOURCE = REPO / "dashboard"
GZIP_BUDGET = 300 * 1024  # issue 14: at most 300 KB gzipped, charts included


def test_the_committed_build_matches_the_source() -> None:
    assert built_hash() == source_hash(SOURCE), (
        "dashboard_assets/static is stale: run `make dashboard` (npm ci && npm run build in dashboard/) and commit the result"
    )


def test_the_page_names_only_assets_that_ship_and_loads_nothing_from_elsewhere() -> None:
    html = (STATIC_DIR / "index.html").read_text()
    referenced = re.findall(r'(?:src|href)="(/assets/[^"]+)"', html)
    assert any(r.endswith(".js") for r in referenced) and any(r.endswith(".css") for r in referenced)
    shipped = {f"/assets/{p.name}" for p in (STATIC_DIR / "assets").iterdir()}
    assert set(referenced) <= shipped
    assert not re.search(r'(?:src|href)="(?:https?:)?//', html)  # no CDN
    for path in (STATIC_DIR / "assets").iterdir():
        assert not re.search(r"https?://(?:cdn|unpkg|fonts)\.", path.read_text()), path.name


def test_the_shipped_bytes_fit_the_budget() -> None:
    total = sum(len(gzip.compress(p.read_bytes(), 9)) for p in [STATIC_DIR / "index.html", *(STATIC_DIR / "assets").iterdir()])
    assert total <= GZIP_BUDGET, f"{total} bytes gzipped"


def test_the_package_data_carries_the_build() -> None:
    pyproject = (REPO / "pyproject.toml").read_text()
    assert '"dashboard_assets"' in pyproject and "static/assets/*" in pyproject
    assert Path(dashboard_assets.__file__).parent / "static" == STATIC_DIR
