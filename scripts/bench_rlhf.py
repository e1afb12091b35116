"""RLHF benchmark: tokens/s of trainplane's RLHF (the trainer entry point, trainer/rlhf.py) against plain trl
GRPOTrainer, the same model, prompts, reward and GRPOConfig defaults, side by side in one run.

    python scripts/bench_rlhf.py                         # tiny llama on the CPU (a small one on a CUDA GPU)
    python scripts/bench_rlhf.py --steps 10 --rounds 3 --completion-length 64 --json out.json

Tokens: what trl counts as `num_tokens` (state.num_input_tokens_seen): the prompt tokens plus the completion
tokens of every sampled completion (padding excluded), i.e. the tokens generation and the policy's
forward/backward process. Time: the wall time between trl's consecutive per-step log calls (logging_steps
1), i.e. generation + reward + loss + optimizer + whatever runs between steps (our checkpoint cadence and
stop checks included), after --warmup steps. tokens/s = sum of the steps' tokens / sum of their windows.

Both sides: the model saved once to a directory and loaded from it, the byte tokenizer, the same prompts, the
same reward function (a file, as a job ships it), per_device_train_batch_size, num_generations,
max_completion_length, max_steps, seed, logging_steps=1, no checkpoints during the timed steps; every other
setting is GRPOConfig's default on both (learning_rate 1e-6, beta 0, gradient_checkpointing as GRPOConfig
sets it, ...), except that bf16 is off on a CPU (trainplane never autocasts on a CPU). Ours builds its own
AdamW (foreach on a CPU, fused on CUDA) where trl's default is adamw_torch_fused. The sides alternate for
--rounds rounds on a shared host; the best round of each is compared (the least disturbed).
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import io
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO), str(REPO / "trainer_image")]

import torch  # noqa: E402

REWARD_SCRIPT = '''
import string

LETTERS = set(string.ascii_letters + " ")


def letters(prompts, completions, **columns):
    """The share of ASCII letters and spaces in each completion."""
    return [sum(ch in LETTERS for ch in text) / max(1, len(text)) for text in completions]
'''
PRESETS: dict[str, dict[str, Any]] = {
    "cpu-tiny": {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2},
    "gpu-small": {
        "hidden_size": 768,
        "intermediate_size": 2048,
        "num_hidden_layers": 12,
        "num_attention_heads": 12,
        "num_key_value_heads": 4,
    },
}


def build_model(directory: Path, preset: dict[str, Any]) -> None:
    """A random llama with the byte tokenizer, saved as a Hugging Face model directory (both sides load it)."""
    from trainer.tokenizer import ByteTokenizer
    from transformers import LlamaConfig, LlamaForCausalLM

    tokenizer = ByteTokenizer()
    torch.manual_seed(0)
    config = LlamaConfig(
        **preset,
        vocab_size=len(tokenizer),
        max_position_embeddings=2048,
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
    )
    LlamaForCausalLM(config).save_pretrained(directory)
    tokenizer.save_pretrained(directory)


class Windows:
    """At each per-step log call: the tokens since the last one, the wall time and this process's CPU time."""

    def __init__(self) -> None:
        self.rows: list[tuple[float, float, float]] = []
        self.start()

    def start(self) -> None:
        self.wall, self.cpu, self.seen = time.perf_counter(), time.process_time(), 0.0

    def mark(self, seen: float) -> None:
        wall, cpu = time.perf_counter(), time.process_time()
        self.rows.append((seen - self.seen, wall - self.wall, cpu - self.cpu))
        self.wall, self.cpu, self.seen = wall, cpu, seen

    def throughput(self, warmup: int) -> dict[str, Any]:
        """The steps after the first `warmup`: tokens per wall second, and per CPU second of this process."""
        timed = self.rows[warmup:]
        tokens, wall, cpu = (sum(row[i] for row in timed) for i in range(3))
        return {
            "tokens": tokens,
            "steps": len(timed),
            "wall_seconds": wall,
            "cpu_seconds": cpu,
            "tokens_per_second": tokens / wall if wall > 0 else 0.0,
            "tokens_per_cpu_second": tokens / cpu if cpu > 0 else 0.0,
        }


def run_ours(
    work: Path, model_dir: Path, data: Path, reward: Path, args: argparse.Namespace, gradient_checkpointing: bool
) -> dict[str, Any]:
    import trainer.rlhf
    from trainer.__main__ import main

    root = Path(tempfile.mkdtemp(prefix="ours-", dir=work))
    cuda = torch.cuda.is_available()
    spec = {
        "job_id": "bench-rlhf",
        "attempt": 1,
        "training_config": {
            "training_type": "RLHF",
            "base_model": {"model_id": str(model_dir), "source": "local", "dtype": "bfloat16" if cuda else "float32"},
            "hyperparameters": {
                "max_steps": str(args.steps),
                "learning_rate": "1e-6",  # GRPOConfig's default
                "logging_steps": "1",
                "gradient_checkpointing": "true" if gradient_checkpointing else "false",
                "seed": "42",
            },
            "rlhf": {
                "reward_script_path": str(reward),
                "reward_functions": ["letters"],
                "num_generations": args.num_generations,
                "max_completion_length": args.completion_length,
            },
        },
        "data_config": {"sources": [{"path": str(data)}], "batch_size": args.batch_size, "max_seq_length": 2048},
        "output_config": {"checkpoint": {"save_steps": 10**8, "save_total_limit": 1}},
        "resource_config": {"gpu_count": 1 if cuda else 0},
        "checkpoint_uri": str(root / "checkpoints"),
        "metrics_uri": str(root / "metrics.jsonl"),
    }
    (root / "run.json").write_text(json.dumps(spec), encoding="utf-8")
    env = {
        "TRAINPLANE_RUN_SPEC": str(root / "run.json"),
        "SM_MODEL_DIR": str(root / "model"),
        "TRAINPLANE_CHECKPOINT_DIR": str(root / "staging"),
        "SM_OUTPUT_DATA_DIR": str(root / "output"),
        "TRAINPLANE_FAILURE_FILE": str(root / "failure"),
        "SM_INPUT_CONFIG_DIR": str(root / "config"),
    }
    saved = {key: os.environ.get(key) for key in env}
    os.environ.update(env)
    windows = Windows()
    original_report = trainer.rlhf.report

    def timed_report(events: Any, metrics: Any, point: Any, progress: Any) -> None:
        # Called from our callback's on_log, where plain trl's side marks its windows too.
        if point.step == 1:
            windows.rows.clear()
        windows.mark(float((point.model_extra or {})["tokens_seen"]))
        original_report(events, metrics, point, progress)

    trainer.rlhf.report = timed_report
    try:
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()) as err:
            code = main([])
    finally:
        trainer.rlhf.report = original_report
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
    if code != 0:
        raise SystemExit(f"our RLHF run failed with exit code {code}:\n{err.getvalue()[-3000:]}")
    return windows.throughput(args.warmup)


def run_plain(work: Path, model_dir: Path, prompts: list[dict[str, Any]], reward: Any, args: argparse.Namespace) -> dict[str, Any]:
    from datasets import Dataset
    from transformers import AutoTokenizer, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    cuda = torch.cuda.is_available()
    windows = Windows()

    class Marks(TrainerCallback):
        def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            windows.start()

        def on_log(self, args: Any, state: Any, control: Any, logs: dict[str, Any] | None = None, **kwargs: Any) -> None:
            if logs and "reward" in logs:
                windows.mark(float(state.num_input_tokens_seen))

    config = GRPOConfig(
        output_dir=str(Path(tempfile.mkdtemp(prefix="plain-", dir=work))),
        use_cpu=not cuda,
        bf16=cuda,
        max_steps=args.steps,
        per_device_train_batch_size=args.batch_size,
        num_generations=args.num_generations,
        max_completion_length=args.completion_length,
        logging_steps=1,
        save_strategy="no",
        report_to="none",
        disable_tqdm=True,
        seed=42,
    )
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        trainer = GRPOTrainer(
            model=str(model_dir),
            reward_funcs=[reward],
            args=config,
            train_dataset=Dataset.from_list(prompts),
            processing_class=AutoTokenizer.from_pretrained(str(model_dir)),
            callbacks=[Marks()],
        )
        trainer.train()
    return windows.throughput(args.warmup)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--preset", choices=["auto", *PRESETS], default="auto")
    parser.add_argument("--steps", type=int, default=8, help="optimizer steps per run (the first --warmup are not timed)")
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=8, help="completions per step (per_device_train_batch_size)")
    parser.add_argument("--num-generations", type=int, default=4)
    parser.add_argument("--completion-length", type=int, default=32, help="max_completion_length")
    parser.add_argument("--rounds", type=int, default=2, help="runs of each side, alternating; the best of each is compared")
    parser.add_argument(
        "--threads",
        type=int,
        default=1,
        help="torch intra-op threads for both sides (default 1: on a shared host a second thread spin-waits for a "
        "descheduled sibling, which makes both wall and CPU figures noisy); 0 keeps torch's default",
    )
    parser.add_argument("--json", type=Path, help="also write the figures to this file")
    args = parser.parse_args(argv)
    if args.threads > 0:
        torch.set_num_threads(args.threads)
    if args.warmup < 1 or args.steps <= args.warmup:
        parser.error("--warmup must be >= 1 (the first window holds the set-up) and --steps larger than it")

    import trl
    from trl import GRPOConfig

    cuda = torch.cuda.is_available()
    preset_name = args.preset if args.preset != "auto" else ("gpu-small" if cuda else "cpu-tiny")
    device = torch.cuda.get_device_name(0) if cuda else "CPU"
    print(
        f"trainplane RLHF benchmark | torch {torch.__version__} | trl {trl.__version__} | device: {device} | preset {preset_name}"
        f" | torch threads {torch.get_num_threads()}"
    )
    print(
        f"{args.steps} steps ({args.warmup} untimed) x {args.batch_size} completions ({args.batch_size // args.num_generations} prompts"
        f" x {args.num_generations} generations), max_completion_length {args.completion_length}; tokens = prompt + completion"
    )
    gradient_checkpointing = bool(GRPOConfig(output_dir=tempfile.gettempdir(), use_cpu=True).gradient_checkpointing)
    with tempfile.TemporaryDirectory(prefix="bench-rlhf-") as scratch:
        work = Path(scratch)
        model_dir = work / "model"
        build_model(model_dir, PRESETS[preset_name])
        prompts = [{"prompt": f"Write a few words about thing number {i}:"} for i in range(64)]
        data = work / "prompts.jsonl"
        data.write_text("".join(json.dumps(p) + "\n" for p in prompts), encoding="utf-8")
        reward_file = work / "rewards.py"
        reward_file.write_text(REWARD_SCRIPT, encoding="utf-8")
        module_spec = importlib.util.spec_from_file_location("bench_rewards", reward_file)
        assert module_spec is not None and module_spec.loader is not None
        rewards = importlib.util.module_from_spec(module_spec)
        module_spec.loader.exec_module(rewards)

        ours_runs, plain_runs = [], []
        for round_no in range(1, args.rounds + 1):
            ours_runs.append(run_ours(work, model_dir, data, reward_file, args, gradient_checkpointing))
            plain_runs.append(run_plain(work, model_dir, prompts, rewards.letters, args))
            o, p = ours_runs[-1], plain_runs[-1]
            print(
                f"round {round_no}: ours {o['tokens_per_second']:,.1f} tokens/s ({o['tokens_per_cpu_second']:,.1f} per CPU s)"
                f" | plain trl GRPOTrainer {p['tokens_per_second']:,.1f} tokens/s ({p['tokens_per_cpu_second']:,.1f} per CPU s)"
            )
    figures_of: dict[str, Any] = {}
    for key, unit in (("tokens_per_second", "tokens/s (wall)"), ("tokens_per_cpu_second", "tokens per CPU second")):
        ours_best = max(r[key] for r in ours_runs)
        plain_best = max(r[key] for r in plain_runs)
        ratio = ours_best / plain_best if plain_best else 0.0
        figures_of[key] = {"ours": ours_best, "plain_trl": plain_best, "ratio": ratio}
        print(
            f"[RLHF] {unit}, best of {args.rounds}: ours {ours_best:,.1f} | plain trl GRPOTrainer {plain_best:,.1f}"
            f" | ratio {ratio:.3f}x (goal >= 0.95x) {'MET' if ratio >= 0.95 else 'NOT MET'}"
        )
    print(f"load average now: {', '.join(f'{x:.1f}' for x in os.getloadavg())} ({os.cpu_count()} cores): wall figures need a quiet host")
    figures = {
        "device": device,
        "torch": torch.__version__,
        "trl": trl.__version__,
        "preset": preset_name,
        "gradient_checkpointing": gradient_checkpointing,
        "threads": torch.get_num_threads(),
        "settings": {k: v for k, v in vars(args).items() if k != "json"},
        "best": figures_of,
        "rounds": {"ours": ours_runs, "plain_trl": plain_runs},
    }
    if args.json:
        args.json.write_text(json.dumps(figures, indent=1, default=str), encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
