"""The EXPORTING phase: the trained model in Hugging Face format, where the job asked for it.

- export_format "safetensors" (default) or "pytorch" (pytorch_model.bin), with the tokenizer beside it,
  so `AutoModelForCausalLM.from_pretrained(dir)` loads it with no trainplane installed;
- an adapter run exports the adapter (adapter_model.safetensors + adapter_config.json), or, with
  merge_lora, the base model with the adapter merged in;
- always written to the model directory (SM_MODEL_DIR: SageMaker uploads it as model.tar.gz), then
  copied to output_config.output_path, else run_spec.output_uri, when one is set (s3:// or local); with
  output_config.layout 'deepfinery' (output_path is a run's root) to run_spec.output_uri, its model/;
- push_to_hub: huggingface_hub's HfApi against HF_ENDPOINT (the public hub by default) with hub_token.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from torch import nn

from schemas.configs import ExportFormat, OutputConfig
from trainer import storage
from trainer.events import log
from trainer.failures import UserError

EXPORT_INFO_FILE = "trainplane_export.json"


@dataclass
class ExportResult:
    local_dir: Path
    uri: str | None
    merged: bool
    is_adapter: bool
    hub_commit_url: str | None = None


def export_model(
    model: nn.Module,
    tokenizer: Any,
    *,
    is_adapter: bool,
    output: OutputConfig,
    model_dir: Path,
    output_uri: str | None,
    info: dict[str, Any],
    claim: Callable[[str], None] | None = None,
) -> ExportResult:
    safe = output.export_format == ExportFormat.SAFETENSORS
    merged = False
    if is_adapter and output.merge_lora:
        merge = getattr(model, "merge_and_unload", None)
        if merge is None:
            raise UserError("merge_lora: the trained model has no LoRA adapter to merge")
        model = merge()  # the adapter folded into the base weights: a plain transformers model
        merged = True
    if model_dir.exists():
        # SageMaker's model dir starts empty; a local rerun may find an older export there.
        shutil.rmtree(model_dir)
    model_dir.mkdir(parents=True, exist_ok=True)
    if is_adapter and not merged:
        model.save_pretrained(str(model_dir), safe_serialization=safe)  # peft still offers both formats
    else:
        model.save_pretrained(str(model_dir))
        if not safe:
            _to_pytorch_bin(model, model_dir)
    if tokenizer is not None:
        tokenizer.save_pretrained(str(model_dir))
    exported_is_adapter = is_adapter and not merged
    manifest = {**info, "merged_lora": merged, "is_adapter": exported_is_adapter, "export_format": output.export_format.value}
    (model_dir / EXPORT_INFO_FILE).write_text(json.dumps(manifest, indent=1, sort_keys=True), encoding="utf-8")
    # A deepfinery layout's output_path is the run's root: the model goes to its model/ (run_spec.output_uri).
    destination = output_uri if output.layout == "deepfinery" else (output.output_path or output_uri)
    if destination:
        if claim is not None:
            claim(destination)  # never over another principal's export (trainer/access.py)
        storage.upload_dir(model_dir, destination)
        log(f"exported the model to {destination}")
    result = ExportResult(local_dir=model_dir, uri=destination, merged=merged, is_adapter=exported_is_adapter)
    if output.push_to_hub:
        result.hub_commit_url = push_to_hub(model_dir, output)
    return result


def _to_pytorch_bin(model: nn.Module, model_dir: Path) -> None:
    """transformers 5 writes only safetensors; export_format "pytorch" asks for pytorch_model.bin."""
    import torch

    for path in list(model_dir.glob("*.safetensors")) + list(model_dir.glob("*.safetensors.index.json")):
        path.unlink()
    state = {k: v.detach().to("cpu").contiguous() for k, v in model.state_dict().items()}
    torch.save(state, model_dir / "pytorch_model.bin")


def push_to_hub(folder: Path, output: OutputConfig) -> str:
    """Create the repository (if needed) and upload the folder as one commit; returns the commit URL."""
    from huggingface_hub import HfApi  # lazy: only runs that push need it

    if not output.hub_repo_id:
        raise UserError("output_config.hub_repo_id is required when push_to_hub is true")
    token = output.hub_token.get_secret_value() if output.hub_token else os.environ.get("HF_TOKEN")
    if not token:
        raise UserError("push_to_hub needs output_config.hub_token (or HF_TOKEN in training_config.environment)")
    endpoint = os.environ.get("HF_ENDPOINT") or None
    api = HfApi(endpoint=endpoint, token=token)
    try:
        api.create_repo(output.hub_repo_id, private=True, exist_ok=True)
        info = api.upload_folder(
            repo_id=output.hub_repo_id,
            folder_path=str(folder),
            commit_message=f"trainplane: {output.output_model_name or output.hub_repo_id}",
        )
    except Exception as exc:
        status = getattr(getattr(exc, "response", None), "status_code", None)
        if status in (401, 403):
            raise UserError(f"push_to_hub: the hub refused hub_token for {output.hub_repo_id} (HTTP {status})") from exc
        raise
    url = str(getattr(info, "commit_url", info))
    log(f"pushed the model to {output.hub_repo_id}: {url}")
    return url
