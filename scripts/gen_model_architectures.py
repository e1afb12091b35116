"""Write schemas/model_architectures.json: the causal language models the installed transformers builds.

`base_model.model_kwargs.architecture` (source "config") may be spelt as the model type (`llama`) or as
the class name a config.json's `architectures` lists (`LlamaForCausalLM`). Submit checks it against
this list, since the API Lambda must not import transformers; tests/unit/test_model_architectures.py
checks the committed file against the installed transformers, so an upgrade that changes the list
fails until this script is run again:

    python scripts/gen_model_architectures.py            # or: make architectures
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

OUTPUT = Path(__file__).resolve().parents[1] / "schemas" / "model_architectures.json"


def architectures() -> dict[str, Any]:
    import transformers
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    model_types = {str(model_type): str(name) for model_type, name in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES.items()}
    types_of: dict[str, list[str]] = defaultdict(list)
    for model_type, name in model_types.items():
        types_of[name].append(model_type)
    classes: dict[str, str] = {}
    for name, candidates in sorted(types_of.items()):
        if len(candidates) == 1:
            classes[name] = candidates[0]
        else:
            # One class serves several model types (LlamaForCausalLM: llama, internlm3, ...): the class's
            # own config decides, as a config.json naming only the class would be read.
            classes[name] = str(getattr(transformers, name).config_class.model_type)
    return {
        "transformers_version": transformers.__version__,
        "model_types": dict(sorted(model_types.items())),
        "classes": dict(sorted(classes.items())),
    }


def render() -> str:
    return json.dumps(architectures(), indent=1, sort_keys=False) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if the committed file differs from the installed transformers")
    args = parser.parse_args(argv)
    text = render()
    if args.check:
        if OUTPUT.read_text() != text:
            print(f"{OUTPUT} is out of date: run python scripts/gen_model_architectures.py", file=sys.stderr)
            return 1
        return 0
    OUTPUT.write_text(text)
    print(f"wrote {OUTPUT}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
