"""scripts/bench_trainer_types.py runs end to end (ours through `python -m trainer`, the baseline through
transformers / trl) in its tiny configuration and prints its table. It times nothing: the figures are
whatever this busy host gives; only their presence and consistency are checked."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_the_types_benchmark_prints_ours_against_the_baseline(tmp_path: Path, capsys, monkeypatch) -> None:
    # Given the benchmark script, the tiny preset, one repeat, one row (every row costs two processes' start-up)
    spec = importlib.util.spec_from_file_location("bench_trainer_types", REPO / "scripts" / "bench_trainer_types.py")
    assert spec is not None and spec.loader is not None
    bench = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "bench_trainer_types", bench)  # dataclasses look their module up there
    spec.loader.exec_module(bench)

    # When it runs
    code = bench.main(["--preset", "cpu-tiny", "--repeats", "1", "--types", "LORA", "--json", str(tmp_path / "f.json")])

    # Then it prints the table with the row and says RLHF is measured elsewhere
    out = capsys.readouterr().out
    assert code == 0
    assert "| type" in out and "ours tok/s" in out and "baseline tok/s" in out and "ratio" in out
    assert "| LORA" in out and "transformers.Trainer + peft" in out
    assert "RLHF" in out and "scripts/bench_rlhf.py" in out
    assert "load average" in out
    figures = json.loads((tmp_path / "f.json").read_text())
    row = figures["rows"]["LORA"]
    ours, theirs = row["runs"]["ours"][0], row["runs"]["baseline"][0]
    # the timed window is the epochs after the warm-up one: the same steps on both sides
    assert ours["steps"] == theirs["steps"] > 0
    # LoRA's baseline tokenizes as ours does (BOS + prompt + completion + EOS): both count the same tokens
    assert ours["tokens"] == theirs["tokens"] > 0
    assert row["ratio"] == pytest.approx(ours["tokens_per_second"] / theirs["tokens_per_second"])
    assert row["goal_met"] == (row["ratio"] >= 0.95)
