"""scripts/bench_trainer.py runs on this CPU-only host and prints its figures (and says no GPU was used)."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_the_benchmark_prints_tokens_per_second_mfu_stall_and_the_trainer_ratio(tmp_path: Path, capsys, monkeypatch) -> None:
    # Given the benchmark script, on the CPU with a tiny shape and a named peak (no GPU table on a CPU)
    spec = importlib.util.spec_from_file_location("bench_trainer", REPO / "scripts" / "bench_trainer.py")
    assert spec is not None and spec.loader is not None
    bench = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "bench_trainer", bench)  # dataclasses look their module up there
    spec.loader.exec_module(bench)

    # When it runs
    code = bench.main(
        ["--batch-size", "2", "--seq-len", "32", "--steps", "2", "--warmup", "1", "--peak-tflops", "1", "--json", str(tmp_path / "f.json")]
    )

    # Then it says that no GPU was measured, and prints every figure
    out = capsys.readouterr().out
    assert code == 0
    assert "NO GPU AVAILABLE" in out and "NOT measured" in out
    figures = json.loads((tmp_path / "f.json").read_text())
    full = figures["full_finetune"]
    assert full["tokens_per_second"] > 0 and full["measured_steps"] == 2
    assert full["mfu"] == pytest.approx(6 * full["matmul_params"] * full["tokens_per_second"] / 1e12)
    assert full["async_checkpoint_stall_seconds"] is not None and full["sync_checkpoint_seconds"] > 0
    assert figures["lora_hf_trainer"]["ratio"] == pytest.approx(
        figures["lora"]["tokens_per_second"] / figures["lora_hf_trainer"]["tokens_per_second"]
    )
    assert "MFU" in out and "ratio" in out and "async save stalled training" in out
