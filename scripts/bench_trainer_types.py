"""Tokens/s of each training type: trainplane's trainer against plain transformers Trainer / trl, side by side.

    python scripts/bench_trainer_types.py                         # every type, 3 interleaved repeats
    python scripts/bench_trainer_types.py --types SFT,DPO --repeats 5 --json out.json

Issue 17's Measure: for each training type the trainer runs on a CPU, the same model, data, tokenizer,
batch size, sequence length, epochs and optimizer through
  ours:      the trainer's real entry point (trainer.__main__.main, what `python -m trainer` and the image
             run; a run spec in TRAINPLANE_RUN_SPEC, the paths the LocalLauncher sets), with our defaults
             for everything the row does not name;
  baseline:  plain transformers.Trainer (FULL_FINETUNE, CONTINUED_PRETRAIN, LORA with peft, HF_TRAINER),
             trl.SFTTrainer (SFT) and trl.DPOTrainer (DPO), with their defaults for everything the row does
             not name (logging every 500 / 10 steps, tqdm on, saves every 500 steps...).
Each run is a fresh process. Goal: ours >= 0.95x the baseline on every row.

What is set alike on both sides (the rest are each side's defaults):
  - the model: a llama built from a config (no download), float32, seed 42, the built-in byte tokenizer;
  - the data: JSONL records of varied lengths, the same records; each side tokenizes them its own way
    (ours: BOS + text + EOS; trl: its own rules), which is why tokens are counted on each side;
  - batch size, max sequence length, number of epochs, learning rate, the optimizer (optim=adamw_torch:
    the torch.optim.AdamW ours builds on a CPU; Trainer's own default is adamw_torch_fused), seed, and
    report_to="none"; the schedule, clipping, warmup and weight decay are both sides' defaults (the same),
    or the HF_TRAINER row's TrainingArguments on both;
  - trl's configs default to gradient_checkpointing=True and bf16=True: both are set False here (our
    trainer refuses bf16 on a CPU, and recomputing activations would compare different work).
RLHF is not measured here: scripts/bench_rlhf.py measures it against trl on its own.

How tokens/s is counted (the same way on both sides): non-padding input tokens (attention-mask sum; for
DPO chosen + rejected) processed per second of the training loop, after a warm-up epoch, model and data
loading excluded. The runs are whole epochs (every example once per epoch), so the timed window is
epochs 2..N. Ours: the window is the time between the METRICS events of the last warm-up step and of the
last step (each event is stamped when it is written, after the step's own reporting), and the tokens are
the trainer's own count (trainer_state.json `tokens_seen` of the final checkpoint, times the timed share
of the epochs); the trainer's stdout is a stream that stamps each line with wall and process CPU time.
Baseline: a TrainerCallback stamps the same two steps' ends, and a wrapper around the
baseline's data collator sums the attention mask of every batch it builds, in order.
Repeats are interleaved (ours then the baseline, the order alternating each repeat) to cancel machine
drift; the table shows the median tok/s of each side and the median of the per-repeat ratios, of wall time
and of process CPU time (one torch thread per run by default, so CPU time is the work done: the steadier
figure on a shared host). The load
average is printed with the figures: this benchmark shares its CPU with whatever else runs.
"""

from __future__ import annotations

import argparse
import copy
import io
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO), str(REPO / "trainer_image")]

GOAL = 0.95
THREADS: int | None = None  # --threads
SEED = 42
RLHF_NOTE = "RLHF: not measured here (scripts/bench_rlhf.py measures it against trl's trainer on its own)"


@dataclass(frozen=True)
class Row:
    """One line of the table: a training type of ours, the baseline that does the same job."""

    name: str
    training_type: str
    data: str  # text | prompt_completion | dpo
    baseline: str  # transformers.Trainer | transformers.Trainer + peft | trl.SFTTrainer | trl.DPOTrainer
    # Hyperparameters given to both sides (ours as strings, the baseline's as TrainingArguments).
    shared: dict[str, Any] = field(default_factory=dict)


ROWS: dict[str, Row] = {
    row.name: row
    for row in (
        Row("FULL_FINETUNE", "FULL_FINETUNE", "text", "transformers.Trainer"),
        Row("CONTINUED_PRETRAIN", "CONTINUED_PRETRAIN", "text", "transformers.Trainer (packed blocks)"),
        Row("SFT", "SFT", "prompt_completion", "trl.SFTTrainer"),
        Row("LORA", "LORA", "prompt_completion", "transformers.Trainer + peft"),
        Row("DPO", "DPO", "dpo", "trl.DPOTrainer"),
        # Every row runs with framework HF_TRAINER (our default). This one also passes the TrainingArguments
        # names users type (issue 17 point 2) to both sides: a cosine schedule with warmup, weight decay,
        # gradient accumulation, logging every 2 steps.
        Row(
            "HF_TRAINER",
            "FULL_FINETUNE",
            "text",
            "transformers.Trainer (same TrainingArguments)",
            {
                "lr_scheduler_type": "cosine",
                "warmup_ratio": 0.1,
                "weight_decay": 0.01,
                "gradient_accumulation_steps": 2,
                "logging_steps": 2,
            },
        ),
    )
}


@dataclass(frozen=True)
class Setup:
    model_kwargs: dict[str, Any]
    records: int
    batch_size: int
    seq_len: int
    epochs: int  # the first is the warm-up
    lora: dict[str, Any] = field(default_factory=lambda: {"r": 8, "lora_alpha": 16, "target_modules": ["q_proj", "v_proj"]})


PRESETS: dict[str, Setup] = {
    # ~0.13M parameters, 64-token sequences: a CPU step is tens of milliseconds even on a busy 2-core host,
    # so a per-step overhead of ours shows, and 36 runs fit in minutes.
    "cpu-small": Setup(
        {
            "architecture": "llama",
            "hidden_size": 64,
            "intermediate_size": 176,
            "num_hidden_layers": 2,
            "num_attention_heads": 4,
            "num_key_value_heads": 2,
            "max_position_embeddings": 256,
        },
        records=96,
        batch_size=8,
        seq_len=64,
        epochs=3,
    ),
    # For the test: seconds.
    "cpu-tiny": Setup(
        {
            "architecture": "llama",
            "hidden_size": 32,
            "intermediate_size": 64,
            "num_hidden_layers": 2,
            "num_attention_heads": 4,
            "num_key_value_heads": 2,
            "max_position_embeddings": 256,
        },
        records=16,
        batch_size=4,
        seq_len=48,
        epochs=2,
    ),
}


# --- data --------------------------------------------------------------------------------------------

_WORDS = (
    "the",
    "quick",
    "brown",
    "fox",
    "jumps",
    "over",
    "a",
    "lazy",
    "dog",
    "while",
    "seven",
    "wizards",
    "quietly",
    "mix",
    "jam",
    "in",
    "boxes",
)


def make_records(kind: str, n: int, seq_len: int) -> list[dict[str, str]]:
    """n deterministic records of varied lengths (so that batches carry padding, as real data does).

    Prompt + completion (and prompt + either answer) fit in seq_len byte tokens with BOS and EOS: the
    libraries truncate differently (ours drops a record whose prompt fills the window, trl and a plain
    Trainer keep it), and the benchmark must not compare different data. Text records run past seq_len
    and are cut at it, by both sides alike."""
    rng = random.Random(SEED)
    half = seq_len // 2 - 2

    def words(low: int, high: int, limit: int | None = None) -> str:
        text = " ".join(rng.choice(_WORDS) for _ in range(rng.randint(low, high)))
        return text[:limit] if limit else text

    records = []
    for i in range(n):
        if kind == "text":
            records.append({"text": f"{i}: {words(6, 40)}."})
        elif kind == "prompt_completion":
            records.append({"prompt": f"Q{i}: {words(2, 12, half - 8)}?\nA:", "completion": f" {words(2, 12, half - 2)}."})
        elif kind == "dpo":
            prompt = f"Q{i}: {words(2, 10, half - 8)}?\nA:"
            records.append({"prompt": prompt, "chosen": f" {words(2, 12, half - 2)}.", "rejected": f" {words(1, 10, half - 2)}!"})
        else:
            raise ValueError(kind)
    return records


def write_data(root: Path, row: Row, setup: Setup) -> Path:
    path = root / "data" / f"{row.data}.jsonl"
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("".join(json.dumps(r) + "\n" for r in make_records(row.data, setup.records, setup.seq_len)), encoding="utf-8")
    return path


# --- ours: the real entry point ------------------------------------------------------------------------


def learning_rate(row: Row) -> float:
    # Our defaults (schemas/hyperparameters.py): 2e-4 for adapters, 5e-5 otherwise; the baseline gets the same.
    return 2e-4 if row.training_type == "LORA" else 5e-5


def our_spec(row: Row, setup: Setup, root: Path, data_file: Path) -> dict[str, Any]:
    hyper = {"num_train_epochs": str(setup.epochs), **{k: str(v) for k, v in row.shared.items()}}
    if row.training_type == "LORA":
        hyper |= {"lora_rank": str(setup.lora["r"]), "lora_alpha": str(setup.lora["lora_alpha"])}
    return {
        "job_id": f"bench-{row.name.lower()}",
        "attempt": 1,
        "training_config": {
            "training_type": row.training_type,
            "base_model": {
                "model_id": "bench-llama",
                "source": "config",
                "tokenizer_id": "byte",
                "dtype": "float32",
                "model_kwargs": setup.model_kwargs,
            },
            "hyperparameters": hyper,
            "framework": {"type": "HF_TRAINER"},
        },
        "data_config": {"sources": [{"path": str(data_file)}], "max_seq_length": setup.seq_len, "batch_size": setup.batch_size},
        "output_config": {},
        "resource_config": {"gpu_count": 0},
        "checkpoint_uri": str(root / "checkpoints"),
    }


def _python_env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), str(REPO / "trainer_image"), env.get("PYTHONPATH", "")])
    env.pop("COV_CORE_SOURCE", None)  # no coverage in the children (a test may run this under pytest-cov)
    env["TOKENIZERS_PARALLELISM"] = "false"
    if THREADS:
        env["OMP_NUM_THREADS"] = str(THREADS)  # torch's intra-op threads, on both sides alike
    return env


def run_ours(row: Row, setup: Setup, workdir: Path) -> dict[str, Any]:
    return _worker("ours", row, setup, workdir)


def run_baseline(row: Row, setup: Setup, workdir: Path) -> dict[str, Any]:
    return _worker("baseline", row, setup, workdir)


def _worker(side: str, row: Row, setup: Setup, workdir: Path) -> dict[str, Any]:
    """One run in a fresh process of its own (this script with --worker), its figures as a JSON line."""
    data_file = write_data(workdir, row, setup)
    command = [sys.executable, str(Path(__file__).resolve()), "--worker", row.name, "--side", side, "--workdir", str(workdir)]
    command += ["--setup", json.dumps(asdict(setup)), "--data", str(data_file)]
    done = subprocess.run(command, env=_python_env(), cwd=workdir, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        who = "our trainer" if side == "ours" else f"the {row.baseline} baseline"
        raise RuntimeError(f"{who} ({row.name}) exited {done.returncode}:\n{done.stderr[-3000:]}")
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


class StampedLines(io.TextIOBase):
    """sys.stdout for the trainer: keeps every line it prints with the wall and process CPU time it was written at."""

    def __init__(self) -> None:
        self.lines: list[tuple[float, float, str]] = []
        self._pending = ""

    def writable(self) -> bool:
        return True

    def write(self, text: str) -> int:
        wall, cpu = time.time(), time.process_time()
        self._pending += text
        while "\n" in self._pending:
            line, self._pending = self._pending.split("\n", 1)
            self.lines.append((wall, cpu, line))
        return len(text)


def ours_worker(row: Row, setup: Setup, data_file: Path, workdir: Path) -> dict[str, Any]:
    """The trainer's entry point (trainer.__main__.main: what `python -m trainer` and the image run) on a run
    spec in TRAINPLANE_RUN_SPEC, with the paths the LocalLauncher sets; its stdout (the events) stamped."""
    from trainer.__main__ import main as trainer_main

    from schemas.trainer import (
        ENV_CHECKPOINT_DIR,
        ENV_FAILURE_FILE,
        ENV_INPUT_CONFIG_DIR,
        ENV_MODEL_DIR,
        ENV_OUTPUT_DATA_DIR,
        ENV_RUN_SPEC,
        TrainerEvent,
        TrainerEventKind,
    )

    with tempfile.TemporaryDirectory(prefix="ours-", dir=workdir) as scratch:
        root = Path(scratch)
        spec_file = root / "config" / "run.json"
        spec_file.parent.mkdir(parents=True)
        spec_file.write_text(json.dumps(our_spec(row, setup, root, data_file)), encoding="utf-8")
        os.environ.update(
            {
                ENV_RUN_SPEC: str(spec_file),
                ENV_MODEL_DIR: str(root / "model"),
                ENV_CHECKPOINT_DIR: str(root / "staging"),
                ENV_OUTPUT_DATA_DIR: str(root / "output" / "data"),
                ENV_FAILURE_FILE: str(root / "output" / "failure"),
                ENV_INPUT_CONFIG_DIR: str(root / "config"),
            }
        )
        stamped, real_stdout = StampedLines(), sys.stdout
        sys.stdout = stamped
        try:
            code = trainer_main([])
        finally:
            sys.stdout = real_stdout
        if code != 0:
            raise RuntimeError(f"our trainer exited {code}")
        points = []
        for wall, cpu, line in stamped.lines:
            event = TrainerEvent.from_line(line)
            if event is not None and event.kind == TrainerEventKind.METRICS and event.data.get("loss") is not None:
                points.append((wall, cpu, event.data))
        checkpoints = sorted((root / "checkpoints").glob("step-*"))
        state = json.loads((checkpoints[-1] / "trainer_state.json").read_text(encoding="utf-8"))
    warm = next(p for p in points if p[2]["epoch"] >= 1 - 1e-9)  # the last step of the warm-up epoch
    last = points[-1]
    tokens = state["tokens_seen"] * (setup.epochs - 1) / setup.epochs
    return _figures(tokens, last[0] - warm[0], last[1] - warm[1], last[2]["step"] - warm[2]["step"], last[2]["loss"])


def _figures(tokens: float, seconds: float, cpu_seconds: float, steps: int, loss: float) -> dict[str, Any]:
    return {
        "tokens_per_second": tokens / seconds,
        "tokens_per_cpu_second": tokens / cpu_seconds,
        "tokens": tokens,
        "seconds": seconds,
        "cpu_seconds": cpu_seconds,
        "steps": steps,
        "final_loss": loss,
    }


# --- the baseline: plain transformers / trl -----------------------------------------------------------


def _tokenizer() -> Any:
    from trainer.tokenizer import ByteTokenizer

    return ByteTokenizer()


def _model(setup: Setup, tokenizer: Any) -> Any:
    """The same llama ours builds from the config (trainer.models._build_from_config), with plain transformers."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    kwargs = dict(setup.model_kwargs)
    architecture = kwargs.pop("architecture")
    config = AutoConfig.for_model(
        architecture,
        vocab_size=len(tokenizer),
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        **kwargs,
    )
    torch.manual_seed(SEED)
    return AutoModelForCausalLM.from_config(config, dtype=torch.float32)


def _lm_examples(records: list[dict[str, Any]], tokenizer: Any, setup: Setup, *, pack: bool) -> list[dict[str, list[int]]]:
    """Text records as a user of the plain Trainer would feed them: BOS + text + EOS, cut at seq_len, or
    (continued pretraining) joined and cut into seq_len blocks, the short tail kept."""
    sequences = [
        [tokenizer.bos_token_id, *tokenizer(r["text"], add_special_tokens=False)["input_ids"], tokenizer.eos_token_id] for r in records
    ]
    if not pack:
        return [{"input_ids": s[: setup.seq_len]} for s in sequences]
    stream = [token for s in sequences for token in s]
    return [{"input_ids": stream[i : i + setup.seq_len]} for i in range(0, len(stream), setup.seq_len)]


def _prompt_completion_examples(records: list[dict[str, Any]], tokenizer: Any, setup: Setup) -> list[dict[str, list[int]]]:
    examples = []
    for r in records:
        prompt = [tokenizer.bos_token_id, *tokenizer(r["prompt"], add_special_tokens=False)["input_ids"]]
        completion = [*tokenizer(r["completion"], add_special_tokens=False)["input_ids"], tokenizer.eos_token_id]
        ids = (prompt + completion)[: setup.seq_len]
        labels = ([-100] * len(prompt) + completion)[: setup.seq_len]
        examples.append({"input_ids": ids, "attention_mask": [1] * len(ids), "labels": labels})
    return examples


class CountingCollator:
    """The baseline's own collator, plus the non-padding input tokens of every batch it builds, in order."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.tokens: list[int] = []

    def __call__(self, features: list[dict[str, Any]]) -> Any:
        batch = self.inner(features)
        mask = batch.get("attention_mask")
        self.tokens.append(int(mask.sum()) if mask is not None else int(batch["input_ids"].numel()))
        return batch


def baseline_worker(row: Row, setup: Setup, data_file: Path, workdir: Path) -> dict[str, Any]:
    from datasets import Dataset
    from transformers import DataCollatorForLanguageModeling, DataCollatorForSeq2Seq, Trainer, TrainerCallback, TrainingArguments

    records = [json.loads(line) for line in data_file.read_text(encoding="utf-8").splitlines() if line.strip()]
    tokenizer = _tokenizer()
    model = _model(setup, tokenizer)
    stamps: list[tuple[int, float, float, float]] = []  # (global step, epoch, wall time, CPU time) at every step's end

    class Stamp(TrainerCallback):
        def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            stamps.append((state.global_step, float(state.epoch or 0.0), time.time(), time.process_time()))

    # Fields both sides share; the rest are the baseline's defaults. The same AdamW as ours on a CPU
    # (torch.optim.AdamW, foreach): adamw_torch.
    common: dict[str, Any] = {
        "output_dir": str(workdir / "baseline-out"),
        "per_device_train_batch_size": setup.batch_size,
        "num_train_epochs": setup.epochs,
        "learning_rate": learning_rate(row),
        "optim": "adamw_torch",
        "seed": SEED,
        "use_cpu": True,
        "report_to": "none",  # trackers installed in this venv would otherwise add work ours does not do
        # transformers 5 spells warmup_ratio as a fraction given to warmup_steps.
        **{("warmup_steps" if key == "warmup_ratio" else key): value for key, value in row.shared.items()},
    }
    trainer: Any
    with tempfile.TemporaryDirectory(prefix="baseline-", dir=workdir) as scratch:
        common["output_dir"] = scratch
        if row.name == "SFT":
            from trl import SFTConfig, SFTTrainer

            sft = SFTConfig(**common, max_length=setup.seq_len, gradient_checkpointing=False, bf16=False)
            trainer = SFTTrainer(model=model, args=sft, train_dataset=Dataset.from_list(records), processing_class=tokenizer)
        elif row.name == "DPO":
            from trl import DPOConfig, DPOTrainer

            reference = copy.deepcopy(model).eval().requires_grad_(False)  # ours: the same frozen copy
            dpo = DPOConfig(**common, max_length=setup.seq_len, gradient_checkpointing=False, bf16=False)
            trainer = DPOTrainer(
                model=model, ref_model=reference, args=dpo, train_dataset=Dataset.from_list(records), processing_class=tokenizer
            )
        elif row.name == "LORA":
            from peft import LoraConfig, TaskType, get_peft_model

            lora = LoraConfig(**setup.lora, lora_dropout=0.0, bias="none", task_type=TaskType.CAUSAL_LM)
            examples = Dataset.from_list(_prompt_completion_examples(records, tokenizer, setup))
            collator: Any = DataCollatorForSeq2Seq(tokenizer, label_pad_token_id=-100)
            trainer = Trainer(
                model=get_peft_model(model, lora), args=TrainingArguments(**common), train_dataset=examples, data_collator=collator
            )
        else:  # FULL_FINETUNE, CONTINUED_PRETRAIN, HF_TRAINER: causal LM on text
            examples = Dataset.from_list(_lm_examples(records, tokenizer, setup, pack=row.training_type == "CONTINUED_PRETRAIN"))
            collator = DataCollatorForLanguageModeling(tokenizer, mlm=False)
            trainer = Trainer(model=model, args=TrainingArguments(**common), train_dataset=examples, data_collator=collator)
        counting = CountingCollator(trainer.data_collator)
        trainer.data_collator = counting
        trainer.add_callback(Stamp())
        result = trainer.train()
    if len(counting.tokens) % setup.epochs:
        raise RuntimeError(f"{len(counting.tokens)} batches over {setup.epochs} epochs: the epochs are not whole")
    per_epoch = len(counting.tokens) // setup.epochs
    warm = next(s for s in stamps if s[1] >= 1 - 1e-6)
    tokens = sum(counting.tokens[per_epoch:])
    last = stamps[-1]
    return _figures(tokens, last[2] - warm[2], last[3] - warm[3], last[0] - warm[0], result.training_loss)


# --- the table ---------------------------------------------------------------------------------------


def _load() -> float:
    return os.getloadavg()[0]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--types", default=",".join(ROWS), help=f"comma-separated rows, of {', '.join(ROWS)}")
    parser.add_argument("--preset", choices=list(PRESETS), default="cpu-small")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--epochs", type=int, help="epochs per run, the first one a warm-up (>= 2)")
    parser.add_argument("--threads", type=int, default=1, help="torch threads in every run (OMP_NUM_THREADS); 0: torch's own choice")
    parser.add_argument("--json", type=Path, help="also write the figures to this file")
    parser.add_argument("--worker", choices=list(ROWS), help=argparse.SUPPRESS)  # internal: one run
    parser.add_argument("--side", choices=["ours", "baseline"], help=argparse.SUPPRESS)
    parser.add_argument("--workdir", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--setup", help=argparse.SUPPRESS)
    parser.add_argument("--data", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)

    global THREADS
    THREADS = args.threads
    if args.worker:
        setup = Setup(**json.loads(args.setup))
        worker = ours_worker if args.side == "ours" else baseline_worker
        print(json.dumps(worker(ROWS[args.worker], setup, args.data, args.workdir)), flush=True)
        return 0

    unknown = [t for t in args.types.split(",") if t not in ROWS]
    if "RLHF" in unknown:
        print(RLHF_NOTE)
        unknown.remove("RLHF")
    if unknown:
        parser.error(f"unknown type(s) {', '.join(unknown)}; choose from {', '.join(ROWS)}")
    rows = [ROWS[t] for t in args.types.split(",") if t in ROWS]
    base = PRESETS[args.preset]
    setup = Setup(base.model_kwargs, base.records, base.batch_size, base.seq_len, args.epochs or base.epochs, base.lora)
    if setup.epochs < 2:
        parser.error("--epochs must be >= 2 (the first epoch is the warm-up)")

    import platform

    import torch
    import transformers
    import trl

    print(
        f"trainplane training types vs plain transformers/trl | {platform.machine()}, {os.cpu_count()} CPU cores, "
        f"torch {torch.__version__} ({args.threads or torch.get_num_threads()} threads per run), "
        f"transformers {transformers.__version__}, trl {trl.__version__}"
    )
    print(
        f"preset {args.preset}: llama {setup.model_kwargs['hidden_size']}x{setup.model_kwargs['num_hidden_layers']} (byte tokenizer), "
        f"{setup.records} records, batch {setup.batch_size}, max seq {setup.seq_len}, {setup.epochs} epochs (1 warm-up), "
        f"{args.repeats} interleaved repeats"
    )
    print(RLHF_NOTE)
    figures: dict[str, Any] = {"setup": asdict(setup), "preset": args.preset, "repeats": args.repeats, "rows": {}}
    loads = [_load()]
    started = time.time()
    results: dict[str, dict[str, list[dict[str, Any]]]] = {row.name: {"ours": [], "baseline": []} for row in rows}
    with tempfile.TemporaryDirectory(prefix="bench-types-") as scratch:
        workdir = Path(scratch)
        for repeat in range(args.repeats):
            for row in rows:
                order = ("ours", "baseline") if repeat % 2 == 0 else ("baseline", "ours")
                for side in order:
                    run = run_ours if side == "ours" else run_baseline
                    outcome = run(row, setup, workdir)
                    outcome["load"] = _load()
                    results[row.name][side].append(outcome)
                    loads.append(outcome["load"])
                ours_steps, their_steps = (results[row.name][side][-1]["steps"] for side in ("ours", "baseline"))
                if ours_steps != their_steps:
                    raise RuntimeError(f"{row.name}: ours timed {ours_steps} steps, the baseline {their_steps}: not the same data")
                print(
                    f"  repeat {repeat + 1}/{args.repeats} {row.name:<18} ours {results[row.name]['ours'][-1]['tokens_per_second']:>9,.0f}"
                    f" | baseline {results[row.name]['baseline'][-1]['tokens_per_second']:>9,.0f} tok/s | load {loads[-1]:.2f}",
                    flush=True,
                )

    print()
    print(f"load average (1 min) during the run: {min(loads):.2f} .. {max(loads):.2f}; {time.time() - started:.0f} s in all")
    cells = ["type", "baseline", "ours tok/s", "baseline tok/s", "ratio", f"goal >= {GOAL}x", "ratio (CPU time)"]
    widths = [18, 44, 10, 14, 6, 13, 16]
    print("| " + " | ".join(c.ljust(w) for c, w in zip(cells, widths, strict=True)) + " |")
    print("|" + "|".join("-" * (w + 2) for w in widths) + "|")
    all_met = True
    for row in rows:
        ours, theirs = results[row.name]["ours"], results[row.name]["baseline"]
        ours_tps = statistics.median(r["tokens_per_second"] for r in ours)
        theirs_tps = statistics.median(r["tokens_per_second"] for r in theirs)
        ratio = statistics.median(o["tokens_per_second"] / t["tokens_per_second"] for o, t in zip(ours, theirs, strict=True))
        cpu_ratio = statistics.median(o["tokens_per_cpu_second"] / t["tokens_per_cpu_second"] for o, t in zip(ours, theirs, strict=True))
        met = ratio >= GOAL
        all_met &= met
        line = [row.name, row.baseline, f"{ours_tps:,.0f}", f"{theirs_tps:,.0f}", f"{ratio:.2f}x", "met" if met else "NOT met"]
        line.append(f"{cpu_ratio:.2f}x")
        print("| " + " | ".join(c.rjust(w) if c[0].isdigit() else c.ljust(w) for c, w in zip(line, widths, strict=True)) + " |")
        figures["rows"][row.name] = {
            "baseline": row.baseline,
            "ours_tokens_per_second": ours_tps,
            "baseline_tokens_per_second": theirs_tps,
            "ratio": ratio,
            "cpu_time_ratio": cpu_ratio,
            "goal_met": met,
            "runs": results[row.name],
        }
    rlhf = ["RLHF", "not measured here: scripts/bench_rlhf.py", "", "", "", "", ""]
    print("| " + " | ".join(c.ljust(w) for c, w in zip(rlhf, widths, strict=True)) + " |")
    print(f"ratio: the median of the {args.repeats} per-repeat ratios of wall-clock tok/s (ours / baseline); goal met on all: {all_met}")
    print("ratio (CPU time): the same with each run's process CPU time instead of wall time (steadier on a shared host)")
    figures["load_average"] = {"min": min(loads), "max": max(loads)}
    if args.json:
        args.json.write_text(json.dumps(figures, indent=1, default=str))
        print(f"figures written to {args.json}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
