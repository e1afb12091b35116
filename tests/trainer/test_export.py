"""The EXPORTING phase: Hugging Face format to output_path, LoRA merge, push_to_hub to a stand-in hub."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from pydantic import SecretStr
from safetensors.torch import load_file
from trainer import export
from trainer.failures import UserError
from trainer.hyper import Hyper
from trainer.models import load_model_and_tokenizer

from schemas.configs import OutputConfig, TrainingConfig
from schemas.trainer import ExitCode
from tests.trainer.hub_standin import HubStandIn
from tests.trainer.runs import make_spec, run_in_process


@pytest.fixture
def hub(monkeypatch):
    standin = HubStandIn().start()
    monkeypatch.setenv("HF_ENDPOINT", standin.endpoint)
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    yield standin
    standin.stop()


def _logits(model: torch.nn.Module) -> torch.Tensor:
    ids = torch.tensor([[257, 81, 58, 32, 119, 104, 97, 116]])
    with torch.no_grad():
        return model(input_ids=ids).logits


def test_lora_merge_exports_a_plain_model_equal_to_base_plus_adapter(tmp_path: Path, monkeypatch, capsys, hub) -> None:
    # Given a LoRA job that asks for the adapter merged, exported to output_path and pushed to the hub
    spec = make_spec(
        tmp_path,
        "LORA",
        hyperparameters={"max_steps": "4", "learning_rate": "5e-2"},
        output_config={
            "merge_lora": True,
            "output_path": str(tmp_path / "exported"),
            "push_to_hub": True,
            "hub_repo_id": "team/tiny-merged",
            "hub_token": "hf_secret",
        },
    )

    # When it runs
    outcome = run_in_process(tmp_path, spec, monkeypatch, capsys)
    assert outcome.code == ExitCode.COMPLETED, outcome.stdout[-3000:]

    # Then output_path holds a plain transformers model (no LoRA weights) with its tokenizer
    out = tmp_path / "exported"
    weights = load_file(str(out / "model.safetensors"))
    assert weights and not any("lora_" in k for k in weights)
    assert (out / "tokenizer.json").exists() and json.loads((out / "trainplane_export.json").read_text())["merged_lora"] is True
    from transformers import AutoModelForCausalLM

    merged = AutoModelForCausalLM.from_pretrained(str(out))

    # and it computes what the base model plus the trained adapter computes
    tc = TrainingConfig.model_validate(spec["training_config"])
    base = load_model_and_tokenizer(tc, Hyper.from_strings(tc.hyperparameters, tc.training_type), torch.device("cpu"), seed=42).model
    from peft import set_peft_model_state_dict

    set_peft_model_state_dict(base, load_file(str(tmp_path / "checkpoints" / "step-000004" / "adapter_model.safetensors")))
    torch.testing.assert_close(_logits(merged), _logits(base), atol=1e-5, rtol=1e-4)
    with base.disable_adapter():
        assert not torch.allclose(_logits(base), _logits(merged), atol=1e-4)  # the adapter did change the model

    # and the same files went to the hub, as one commit, with the job's token
    assert hub.repos == {"team/tiny-merged"}
    assert set(hub.files["team/tiny-merged"]) == {p.name for p in out.iterdir()}
    assert hub.files["team/tiny-merged"]["model.safetensors"] == (out / "model.safetensors").read_bytes()
    assert all(call.authorization == "Bearer hf_secret" for call in hub.calls)
    assert [c.path.split("?")[0] for c in hub.calls if c.method == "POST"] == [
        "/api/repos/create",
        "/api/models/team/tiny-merged/preupload/main",
        "/api/models/team/tiny-merged/commit/main",
    ]


def test_an_unmerged_adapter_exports_as_a_peft_adapter(tmp_path: Path, monkeypatch, capsys) -> None:
    spec = make_spec(tmp_path, "LORA", hyperparameters={"max_steps": "2"})
    outcome = run_in_process(tmp_path, spec, monkeypatch, capsys)
    assert outcome.code == ExitCode.COMPLETED
    model_dir = tmp_path / "model"  # SM_MODEL_DIR: SageMaker uploads it as model.tar.gz
    assert (model_dir / "adapter_model.safetensors").exists() and (model_dir / "adapter_config.json").exists()
    assert not (model_dir / "model.safetensors").exists()
    assert json.loads((model_dir / "trainplane_export.json").read_text())["is_adapter"] is True


def test_pytorch_export_format_and_output_uri(tmp_path: Path, monkeypatch, capsys) -> None:
    out_uri = str(tmp_path / "out-uri")
    spec = make_spec(tmp_path, hyperparameters={"max_steps": "2"}, output_config={"export_format": "pytorch"}, output_uri=out_uri)
    outcome = run_in_process(tmp_path, spec, monkeypatch, capsys)
    assert outcome.code == ExitCode.COMPLETED
    assert (tmp_path / "out-uri" / "pytorch_model.bin").exists() and not (tmp_path / "out-uri" / "model.safetensors").exists()
    from transformers import AutoModelForCausalLM

    reloaded = AutoModelForCausalLM.from_pretrained(out_uri)
    final = load_file(str(tmp_path / "checkpoints" / "step-000002" / "model.safetensors"))
    assert all(torch.equal(reloaded.state_dict()[k], v) for k, v in final.items())


def test_push_to_hub_refused_token_is_a_user_error(tmp_path: Path, hub) -> None:
    # Given a hub that rejects the token
    hub.refuse_token = "hf_wrong"
    folder = tmp_path / "m"
    folder.mkdir()
    (folder / "config.json").write_text("{}")
    output = OutputConfig(push_to_hub=True, hub_repo_id="team/x", hub_token=SecretStr("hf_wrong"))

    # When pushing, Then the error says what to fix
    with pytest.raises(UserError, match=r"refused hub_token for team/x \(HTTP 401\)"):
        export.push_to_hub(folder, output)


def test_push_to_hub_needs_a_token(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.delenv("HF_TOKEN", raising=False)
    with pytest.raises(UserError, match="hub_token"):
        export.push_to_hub(tmp_path, OutputConfig(push_to_hub=True, hub_repo_id="team/x"))
