"""The built-in byte-level tokenizer (`tokenizer_id: "byte"`): needs no download, covers any text.

Ids 0-255 are the UTF-8 bytes themselves, then three special tokens (PAD_ID, BOS_ID, EOS_ID). It is a
real Hugging Face fast tokenizer (a `tokenizers` BPE model with the 256 byte symbols and no merges), so
`save_pretrained` writes a plain `tokenizer.json` + `tokenizer_config.json` that `AutoTokenizer` loads
back without trainplane installed: an exported model stays self-contained.
"""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import Any

from tokenizers import Tokenizer, decoders, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast

BYTE_TOKENIZER_ID = "byte"
NUM_BYTES = 256
PAD_TOKEN, BOS_TOKEN, EOS_TOKEN = "<pad>", "<s>", "</s>"
PAD_ID, BOS_ID, EOS_ID = NUM_BYTES, NUM_BYTES + 1, NUM_BYTES + 2
BYTE_VOCAB_SIZE = NUM_BYTES + 3

# "<|role|>\n" + content + "</s>" per message. The assistant's turn ends with EOS so a model trained on it
# learns to stop; the generation prompt is exactly the header of an assistant turn, which makes every
# rendering of messages[:i] + prompt a prefix of messages[:i+1] (what formatting.py relies on).
BYTE_CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|' + message['role'] + '|>\\n' + message['content'] + eos_token }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|assistant|>\\n' }}{% endif %}"
)


@cache
def _byte_symbols() -> tuple[str, ...]:
    """GPT-2's reversible byte -> printable unicode map (what the ByteLevel pre-tokenizer emits), by byte value."""
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    symbols: dict[int, str] = {b: chr(b) for b in printable}
    extra = 0
    for b in range(NUM_BYTES):
        if b not in symbols:
            symbols[b] = chr(NUM_BYTES + extra)
            extra += 1
    return tuple(symbols[b] for b in range(NUM_BYTES))


def _build_backend() -> Tokenizer:
    vocab = {symbol: byte for byte, symbol in enumerate(_byte_symbols())}
    backend = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    # No regex split and no prefix space: every byte of the input becomes exactly one id.
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    backend.decoder = decoders.ByteLevel()
    # Added in id order so the ids are fixed: PAD_ID, BOS_ID, EOS_ID.
    backend.add_special_tokens([PAD_TOKEN, BOS_TOKEN, EOS_TOKEN])
    return backend


class ByteTokenizer(PreTrainedTokenizerFast):
    """A byte-level tokenizer: `ByteTokenizer()` builds it; `ByteTokenizer.from_pretrained(dir)` reloads a saved one."""

    def __init__(self, **kwargs: Any) -> None:
        if "tokenizer_object" not in kwargs and "tokenizer_file" not in kwargs:
            kwargs["tokenizer_object"] = _build_backend()
        kwargs.setdefault("pad_token", PAD_TOKEN)
        kwargs.setdefault("bos_token", BOS_TOKEN)
        kwargs.setdefault("eos_token", EOS_TOKEN)
        kwargs.setdefault("chat_template", BYTE_CHAT_TEMPLATE)
        kwargs.setdefault("model_max_length", 1_000_000)
        super().__init__(**kwargs)

    def save_pretrained(self, save_directory: Any, *args: Any, **kwargs: Any) -> tuple[str, ...]:
        files = super().save_pretrained(save_directory, *args, **kwargs)
        # transformers records the class name; a generic fast tokenizer class keeps the export loadable with
        # plain AutoTokenizer, and the marker lets load_tokenizer give back a ByteTokenizer here.
        config_path = Path(save_directory) / "tokenizer_config.json"
        config = json.loads(config_path.read_text(encoding="utf-8"))
        config["tokenizer_class"] = "PreTrainedTokenizerFast"
        config["trainplane_tokenizer"] = BYTE_TOKENIZER_ID
        config_path.write_text(json.dumps(config, indent=2, sort_keys=True) + "\n", encoding="utf-8")
        return tuple(files)


def is_saved_byte_tokenizer(directory: str | Path) -> bool:
    """True when `directory` holds a tokenizer written by ByteTokenizer.save_pretrained."""
    config_path = Path(directory) / "tokenizer_config.json"
    if not config_path.is_file():
        return False
    try:
        config = json.loads(config_path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return config.get("trainplane_tokenizer") == BYTE_TOKENIZER_ID
