"""Trainer benchmark: prints tokens/s and model FLOPs utilisation of the trainplane training loop.

    python scripts/bench_trainer.py                      # auto: llama-1b on a CUDA GPU, cpu-tiny otherwise
    python scripts/bench_trainer.py --preset llama-1b --batch-size 8 --seq-len 2048 --steps 20
    python scripts/bench_trainer.py --peak-tflops 989    # MFU against a peak you name

What it measures, each with the real trainer code (trainer.loop.TrainingLoop, trainer.models):
  1. full fine-tune: tokens/s and MFU = 6 * N * tokens/s / peak FLOP/s, where N counts every weight
     that takes part in a matmul (all parameters but the input embedding table). On a GPU the preset
     is a 1.1B Llama-style model (TinyLlama's shape) in bf16. Peak: the dense bf16 figure of the GPU
     from PEAK_BF16_TFLOPS, or --peak-tflops.
  2. LoRA: our loop vs the plain transformers Trainer with its defaults, on the same model, adapter,
     data, batch and precision, side by side in one run; prints both tokens/s and the ratio.
  3. checkpoint stall: one asynchronous checkpoint in the middle of run 1; prints how long training
     stood still for it, and how long the synchronous save of the same state took.
Synthetic data (random byte-token sequences of exactly --seq-len) so that only the training is timed.
Throughput is measured over whole logging windows after --warmup steps, each ending in a sync.
"""

from __future__ import annotations

import argparse
import io
import json
import math
import sys
import tempfile
import time
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO), str(REPO / "trainer_image")]

import torch  # noqa: E402

if TYPE_CHECKING:
    from transformers import PreTrainedModel

from schemas.configs import (  # noqa: E402
    BaseModelSpec,
    CheckpointConfig,
    DataConfig,
    DataSource,
    DType,
    ModelSource,
    OutputConfig,
    ResourceConfig,
    TrainingConfig,
    TrainingType,
)
from schemas.trainer import RunSpec, TrainerEvent, TrainerEventKind  # noqa: E402

# Dense (no sparsity) bf16 tensor-core peaks, TFLOP/s, from the vendors' datasheets. Matched against
# torch.cuda.get_device_name() in this order (the first substring that matches wins).
PEAK_BF16_TFLOPS: list[tuple[str, float]] = [
    ("H100 PCIe", 756.0),
    ("H100 NVL", 835.0),
    ("H100", 989.0),  # SXM
    ("H200", 989.0),
    ("GH200", 989.0),
    ("B200", 2250.0),
    ("A100", 312.0),
    ("L40S", 362.0),
    ("L4", 121.0),
    ("A10G", 70.0),
    ("A10", 125.0),
]


@dataclass(frozen=True)
class Preset:
    name: str
    model_kwargs: dict[str, Any]
    batch_size: int
    seq_len: int
    steps: int
    warmup: int


PRESETS = {
    # TinyLlama-1.1B's shape: 22 layers, hidden 2048, GQA 32/4 heads, vocab 32000.
    "llama-1b": Preset(
        "llama-1b",
        {
            "architecture": "llama",
            "hidden_size": 2048,
            "intermediate_size": 5632,
            "num_hidden_layers": 22,
            "num_attention_heads": 32,
            "num_key_value_heads": 4,
            "vocab_size": 32000,
            "max_position_embeddings": 4096,
        },
        batch_size=8,
        seq_len=2048,
        steps=20,
        warmup=5,
    ),
    "cpu-tiny": Preset(
        "cpu-tiny",
        {
            "architecture": "llama",
            "hidden_size": 64,
            "intermediate_size": 128,
            "num_hidden_layers": 2,
            "num_attention_heads": 4,
            "num_key_value_heads": 2,
            "max_position_embeddings": 256,
        },
        batch_size=4,
        seq_len=64,
        steps=12,
        warmup=4,
    ),
}


def peak_tflops(device: torch.device, override: float | None) -> tuple[float | None, str]:
    if override:
        return override, "--peak-tflops"
    if device.type != "cuda":
        return None, "no peak for a CPU (pass --peak-tflops)"
    name = torch.cuda.get_device_name(device)
    for key, value in PEAK_BF16_TFLOPS:
        if key in name:
            return value, f"{name}: dense bf16 datasheet peak"
    return None, f"{name} is not in PEAK_BF16_TFLOPS (pass --peak-tflops)"


def matmul_params(model: torch.nn.Module) -> int:
    # The trainer builds transformers models; their input embedding is an nn.Embedding.
    embedding = cast("torch.nn.Embedding | None", cast("PreTrainedModel", model).get_input_embeddings())
    skip = {id(p) for p in embedding.parameters()} if embedding is not None else set()
    tied = getattr(model.config, "tie_word_embeddings", False)
    count = sum(p.numel() for p in model.parameters() if id(p) not in skip)
    if tied and embedding is not None:
        count += embedding.weight.numel()  # the tied head still multiplies
    return count


def synthetic_examples(n: int, seq_len: int, seed: int = 0) -> list[dict[str, list[int]]]:
    generator = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, 256, (n, seq_len), generator=generator).tolist()
    return [{"input_ids": row, "labels": row} for row in ids]


def make_spec(
    preset: Preset, training_type: TrainingType, hyper: dict[str, str], root: Path, device: torch.device, save_steps: int
) -> RunSpec:
    return RunSpec(
        job_id="bench",
        attempt=1,
        training_config=TrainingConfig(
            training_type=training_type,
            base_model=BaseModelSpec(
                model_id=f"bench-{preset.name}",
                source=ModelSource.CONFIG,
                tokenizer_id="byte",
                dtype=DType.BFLOAT16 if device.type == "cuda" else DType.FLOAT32,
                model_kwargs=preset.model_kwargs,
            ),
            hyperparameters=hyper,
        ),
        data_config=DataConfig(
            sources=[DataSource(path=str(root / "synthetic"))], max_seq_length=preset.seq_len, batch_size=preset.batch_size
        ),
        output_config=OutputConfig(checkpoint=CheckpointConfig(save_steps=save_steps, save_total_limit=1)),
        resource_config=ResourceConfig(gpu_count=1 if device.type == "cuda" else 0),
        checkpoint_uri=str(root / "checkpoints"),
    )


def run_ours(preset: Preset, training_type: TrainingType, device: torch.device, *, stall_probe: bool) -> dict[str, Any]:
    """Our loop: warmup window, measured windows, then (stall_probe) one async checkpoint and the final save."""
    from trainer import data, models
    from trainer.checkpoint import CheckpointManager
    from trainer.events import Events
    from trainer.hyper import Hyper
    from trainer.loop import TrainingLoop, TrainInputs
    from trainer.metrics import MetricsLog
    from trainer.runtime import Runtime
    from trainer.signals import StopRequest

    windows = math.ceil(preset.steps / preset.warmup)
    measured_steps = windows * preset.warmup
    total = preset.warmup + measured_steps + (2 if stall_probe else 0)
    save_at = preset.warmup + measured_steps + 1 if stall_probe else 10**8
    hyper_strings = {"max_steps": str(total), "logging_steps": str(preset.warmup), "learning_rate": "1e-4", "async_checkpoint": "true"}
    with tempfile.TemporaryDirectory(prefix="bench-trainer-") as scratch:
        root = Path(scratch)
        spec = make_spec(preset, training_type, hyper_strings, root, device, save_at)
        hyper = Hyper.from_strings(hyper_strings, training_type)
        loaded = models.load_model_and_tokenizer(spec.training_config, hyper, device, seed=0)
        n_matmul = matmul_params(loaded.model)
        trainable = sum(p.numel() for p in loaded.model.parameters() if p.requires_grad)
        examples = synthetic_examples(preset.batch_size * total, preset.seq_len)
        inputs = TrainInputs(
            model=loaded.model,
            is_adapter=loaded.is_adapter,
            train=examples,
            validation=[],
            collate=partial(data.collate, pad_id=loaded.tokenizer.pad_token_id),
            reference_model=loaded.reference_model,
        )
        stream = io.StringIO()
        events = Events(stream)
        checkpoints = CheckpointManager(
            spec.checkpoint_uri,
            root / "staging",
            spec.output_config.checkpoint,
            job_id="bench",
            attempt=1,
            training_type=training_type.value,
        )
        loop = TrainingLoop(
            spec,
            hyper,
            inputs,
            runtime=Runtime(device),
            checkpoints=checkpoints,
            events=events,
            metrics=MetricsLog(root / "metrics.jsonl", None, attempt=1),
            stop=StopRequest(),
        )
        result = loop.run(None)
        final_save_seconds = checkpoints.last_save_seconds
    points = [
        e.data for line in stream.getvalue().splitlines() if (e := TrainerEvent.from_line(line)) and e.kind == TrainerEventKind.METRICS
    ]
    timed = [p for p in points if preset.warmup < p["step"] <= preset.warmup + measured_steps and p.get("tokens_per_second")]
    tokens_per_window = preset.warmup * preset.batch_size * preset.seq_len
    seconds = sum(tokens_per_window / p["tokens_per_second"] for p in timed)
    tokens_per_second = tokens_per_window * len(timed) / seconds
    del loop, inputs, loaded
    if device.type == "cuda":
        torch.cuda.empty_cache()
    return {
        "tokens_per_second": tokens_per_second,
        "measured_steps": len(timed) * preset.warmup,
        "matmul_params": n_matmul,
        "trainable_params": trainable,
        "async_checkpoint_stall_seconds": result.checkpoint_stall_seconds[0] if result.checkpoint_stall_seconds else None,
        "sync_checkpoint_seconds": final_save_seconds if stall_probe else None,
        "final_loss": result.losses.get(result.step),
    }


def run_hf_trainer(preset: Preset, device: torch.device) -> dict[str, Any]:
    """The same LoRA setup through transformers.Trainer with its default TrainingArguments (only the
    batch, the step count, the learning rate and the precision set to match, logging/saving off)."""
    from trainer import models
    from trainer.hyper import Hyper
    from transformers import Trainer, TrainerCallback, TrainingArguments, default_data_collator

    total = preset.warmup + preset.steps
    hyper = Hyper.from_strings({"learning_rate": "1e-4"}, TrainingType.LORA)
    with tempfile.TemporaryDirectory(prefix="bench-hf-") as scratch:
        spec = make_spec(preset, TrainingType.LORA, {}, Path(scratch), device, 10**8)
        loaded = models.load_model_and_tokenizer(spec.training_config, hyper, device, seed=0)
        rows = [{**e, "attention_mask": [1] * preset.seq_len} for e in synthetic_examples(preset.batch_size * total, preset.seq_len)]

        class Timing(TrainerCallback):
            started = ended = 0.0

            def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
                if state.global_step in (preset.warmup, total):
                    if device.type == "cuda":
                        torch.cuda.synchronize()
                    if state.global_step == preset.warmup:
                        Timing.started = time.perf_counter()
                    else:
                        Timing.ended = time.perf_counter()

        args = TrainingArguments(
            output_dir=scratch,
            per_device_train_batch_size=preset.batch_size,
            max_steps=total,
            learning_rate=1e-4,
            bf16=device.type == "cuda",
            use_cpu=device.type != "cuda",
            save_strategy="no",
            report_to=[],
            logging_strategy="no",
            disable_tqdm=True,
        )
        trainer = Trainer(model=loaded.model, args=args, train_dataset=rows, data_collator=default_data_collator, callbacks=[Timing()])
        trainer.train()
        tokens = preset.steps * preset.batch_size * preset.seq_len
        del trainer, loaded
    if device.type == "cuda":
        torch.cuda.empty_cache()
    return {"tokens_per_second": tokens / (Timing.ended - Timing.started), "measured_steps": preset.steps}


def _count(n: int) -> str:
    for unit, size in (("B", 1e9), ("M", 1e6), ("K", 1e3)):
        if n >= size:
            return f"{n / size:.2f}{unit}"
    return str(n)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--preset", choices=["auto", *PRESETS], default="auto")
    parser.add_argument("--batch-size", type=int)
    parser.add_argument("--seq-len", type=int)
    parser.add_argument("--steps", type=int, help="measured steps (rounded up to whole logging windows)")
    parser.add_argument("--warmup", type=int, help="steps before timing starts (also the logging window)")
    parser.add_argument("--peak-tflops", type=float, help="peak FLOP/s of the device, in TFLOP/s, for MFU")
    parser.add_argument("--skip-lora", action="store_true")
    parser.add_argument("--skip-hf-trainer", action="store_true")
    parser.add_argument("--json", type=Path, help="also write the figures to this file")
    args = parser.parse_args(argv)

    cuda = torch.cuda.is_available()
    device = torch.device("cuda", 0) if cuda else torch.device("cpu")
    name = args.preset if args.preset != "auto" else ("llama-1b" if cuda else "cpu-tiny")
    base = PRESETS[name]
    preset = Preset(
        name,
        base.model_kwargs,
        batch_size=args.batch_size or base.batch_size,
        seq_len=args.seq_len or base.seq_len,
        steps=args.steps or base.steps,
        warmup=args.warmup or base.warmup,
    )
    device_name = torch.cuda.get_device_name(device) if cuda else "CPU"
    print(f"trainplane trainer benchmark | torch {torch.__version__} | device: {device_name} | preset {preset.name}")
    if not cuda:
        print("NO GPU AVAILABLE: ran the tiny CPU config. The GPU figures (1B bf16 MFU, LoRA vs Trainer, stall) were NOT measured.")
    tokens = preset.batch_size * preset.seq_len
    print(f"batch {preset.batch_size} x seq {preset.seq_len} = {tokens} tokens/step; warmup {preset.warmup}, measured {preset.steps} steps")
    figures: dict[str, Any] = {"device": device_name, "torch": torch.__version__, "preset": preset.__dict__, "gpu": cuda}

    full = run_ours(preset, TrainingType.FULL_FINETUNE, device, stall_probe=True)
    peak, peak_source = peak_tflops(device, args.peak_tflops)
    flops = 6 * full["matmul_params"] * full["tokens_per_second"]
    mfu = flops / (peak * 1e12) if peak else None
    figures["full_finetune"] = {**full, "model_tflops": flops / 1e12, "peak_tflops": peak, "peak_source": peak_source, "mfu": mfu}
    print(
        f"[full fine-tune] params in matmuls {_count(full['matmul_params'])} | {full['tokens_per_second']:,.0f} tokens/s"
        f" | {flops / 1e12:.3f} model TFLOP/s"
    )
    print(
        f"[full fine-tune] MFU {mfu:.1%} of {peak:.0f} TFLOP/s ({peak_source})"
        if mfu is not None
        else f"[full fine-tune] MFU: n/a ({peak_source})"
    )
    stall, sync = full["async_checkpoint_stall_seconds"], full["sync_checkpoint_seconds"]
    print(f"[checkpoint] async save stalled training {stall:.3f} s; a synchronous save of the same state took {sync:.3f} s")

    if not args.skip_lora:
        lora = run_ours(preset, TrainingType.LORA, device, stall_probe=False)
        figures["lora"] = lora
        line = f"[lora] trainplane loop {lora['tokens_per_second']:,.0f} tokens/s (trainable {_count(lora['trainable_params'])})"
        if not args.skip_hf_trainer:
            hf = run_hf_trainer(preset, device)
            ratio = lora["tokens_per_second"] / hf["tokens_per_second"]
            figures["lora_hf_trainer"] = {**hf, "ratio": ratio}
            line += f" | transformers Trainer defaults {hf['tokens_per_second']:,.0f} tokens/s | ratio {ratio:.2f}x"
        print(line)
    if args.json:
        args.json.write_text(json.dumps(figures, indent=1, default=str))
        print(f"figures written to {args.json}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
