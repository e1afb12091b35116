"""Speed-ups of moto's hot paths for local mode. Part of moto_hooks' reach into moto (pinned to 5.2.5,
installed and removed with it); tests/integration/test_moto_inprocess.py proves each one gives
byte-for-byte what moto's own code gives (test_item_serializer_writes_exactly_what_moto_writes,
test_a_definition_is_parsed_once_and_every_execution_gets_a_fresh_program).

1. DynamoDB item values. moto serialises every response through its model-driven serializer, which
   walks each AttributeValue member by member (ten members, each looked up through a value picker
   with aliases): for the job item (~60 attributes) that is ~75% of a GetItem's CPU in moto. An
   AttributeValue is already DynamoDB JSON in moto's result (`dynamo_to_dict`), so it is written
   out directly; anything not of the expected shape falls back to moto's code.
2. Step Functions definitions. moto parses the state machine's ASL with an ANTLR parser at the start
   of EVERY execution (~80 ms of CPU for the lifecycle's definition, ~16% of a job submission's CPU in
   local mode). The syntax tree depends on the definition text only, so it is kept per definition
   (a few of them) and only moto's cheap Preprocessor pass runs per execution, building fresh
   evaluation components each time as before. Syntax errors are not cached: they raise every time.
3. EventBridge targets. For every event and every target of a matching rule (local mode's bus always has
   one: its archive's), moto's EventTemplateParser parses each JSONPath of the input paths map (8 of
   them by default) with `jsonpath_ng.ext.parse`, which builds a new PLY parser each call: ~1.7 ms a path,
   ~13 ms per event per target, 12% of `trainplane up`'s CPU with 100 jobs running. The parsed paths are
   kept per expression text (a bounded cache: the same objects, which `find` only reads).
4. SQS. SendMessage (so every EventBridge delivery to a queue: the EVENTS.md recipe's rule) reads
   ContentBasedDeduplication, and ReceiveMessage reads MessageRetentionPeriod FOR EACH MESSAGE it looks at,
   through `Queue.attributes`, which computes them all: three passes over every message in the queue
   (visibility and delay, a clock reading each), so a receive was quadratic in the queue's length. With
   ~1,000 events in a queue that was 19-28% of `trainplane up`'s CPU. While one of the two runs, the
   queue's `attributes` answers those two as the full dict would and computes the full dict for any other.
"""

from __future__ import annotations

import base64
import functools
import threading
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

import jsonpath_ng.ext
from moto.core.serialize import BaseJSONSerializer
from moto.sqs.models import Queue, SQSBackend
from moto.stepfunctions.parser.asl.parse.asl_parser import AmazonStateLanguageParser
from moto.stepfunctions.parser.asl.parse.preprocessor import Preprocessor

_ATTRIBUTE_VALUE = "AttributeValue"
_STRING_KINDS = frozenset({"S", "N"})
_STRING_SET_KINDS = frozenset({"SS", "NS"})

_original_serialize: Callable[..., None] | None = None
_original_parse: Any = None
_ASL_TREES_KEPT = 8
_asl_trees: OrderedDict[str, Any] = OrderedDict()
_asl_lock = threading.Lock()
_original_jsonpath_parse: Any = None
_JSONPATHS_KEPT = 256
_CBD = "ContentBasedDeduplication"
_sqs_originals: dict[str, Any] = {}
_in_use = threading.local()  # .queue: the queue of the SendMessage or ReceiveMessage running on this thread
# The attributes SendMessage and ReceiveMessage read, and the Queue field each is (the full dict's own mapping).
_LIGHT = {_CBD: "content_based_deduplication", "MessageRetentionPeriod": "message_retention_period"}


class NotPlain(Exception):
    """A value this fast path does not handle exactly like moto: moto's serializer takes it."""


def install() -> None:
    global _original_serialize
    if _original_serialize is not None:
        return
    if "_serialize" in BaseJSONSerializer.__dict__:
        raise RuntimeError("moto's BaseJSONSerializer now defines _serialize: re-verify localmode/moto_speedups.py")
    original = BaseJSONSerializer._serialize

    def _serialize(self: BaseJSONSerializer, serialized: Any, value: Any, shape: Any, key: str) -> None:
        if shape.name == _ATTRIBUTE_VALUE and key and isinstance(value, dict):
            try:
                serialized[self.get_serialized_name(shape, key)] = attribute_value(value)
                return
            except NotPlain:
                pass
        original(self, serialized, value, shape, key)

    _original_serialize = original
    BaseJSONSerializer._serialize = _serialize  # type: ignore[method-assign,assignment]
    _install_asl_cache()
    _install_jsonpath_cache()
    _install_sqs_send()


def uninstall() -> None:
    global _original_serialize, _original_parse
    if _original_serialize is not None:
        del BaseJSONSerializer._serialize  # the inherited ResponseSerializer._serialize again
        _original_serialize = None
    if _original_parse is not None:
        AmazonStateLanguageParser.parse = _original_parse  # type: ignore[method-assign]
        _original_parse = None
        with _asl_lock:
            _asl_trees.clear()
    _uninstall_jsonpath_cache()
    for name, original_attr in _sqs_originals.items():
        setattr(Queue if name == "attributes" else SQSBackend, name, original_attr)
    _sqs_originals.clear()


def _install_asl_cache() -> None:
    global _original_parse
    original = AmazonStateLanguageParser.__dict__["parse"]  # the staticmethod object itself
    if not isinstance(original, staticmethod):
        raise RuntimeError("moto's AmazonStateLanguageParser.parse is no longer a staticmethod: re-verify moto_speedups")
    parse_uncached = original.__func__

    def parse(definition: str) -> tuple[Any, Any]:
        with _asl_lock:
            tree = _asl_trees.get(definition)
            if tree is not None:
                _asl_trees.move_to_end(definition)
        if tree is None:
            program, tree = parse_uncached(definition)  # raises ASLParserException on a syntax error
            with _asl_lock:
                _asl_trees[definition] = tree
                while len(_asl_trees) > _ASL_TREES_KEPT:
                    _asl_trees.popitem(last=False)
            return program, tree
        # What moto's parse does after the syntax tree: a fresh program from it.
        return Preprocessor().visit(tree), tree

    _original_parse = original
    AmazonStateLanguageParser.parse = staticmethod(parse)  # type: ignore[method-assign]


def _install_jsonpath_cache() -> None:
    # moto.events.utils.EventTemplateParser.parse imports `parse` from jsonpath_ng.ext at each call.
    global _original_jsonpath_parse
    if _original_jsonpath_parse is not None:
        return
    _original_jsonpath_parse = jsonpath_ng.ext.parse
    jsonpath_ng.ext.parse = functools.lru_cache(maxsize=_JSONPATHS_KEPT)(_original_jsonpath_parse)


def _uninstall_jsonpath_cache() -> None:
    global _original_jsonpath_parse
    if _original_jsonpath_parse is not None:
        jsonpath_ng.ext.parse = _original_jsonpath_parse
        _original_jsonpath_parse = None


class _QueueAttributesInUse:
    """Queue.attributes as SendMessage and ReceiveMessage read it (`in`, `.get`, `[]`): the plain fields they
    ask for (_LIGHT) read alone; any other name computes the full dict."""

    def __init__(self, queue: Queue, full: Callable[[Queue], dict[str, Any]]) -> None:
        self._queue = queue
        self._full = full

    def _light(self, name: str) -> bool:
        # In the full dict: every base attribute; the FIFO attributes only for a FIFO queue.
        return name in _LIGHT and (name in Queue.BASE_ATTRIBUTES or self._queue.fifo_queue)

    def _value(self, name: str) -> Any:
        value = getattr(self._queue, _LIGHT[name])
        return str(value).lower() if isinstance(value, bool) else value  # as the full dict converts

    def __contains__(self, name: str) -> bool:
        return self._light(name) or (name not in _LIGHT and name in self._full(self._queue))

    def get(self, name: str, default: Any = None) -> Any:
        if name in _LIGHT:
            return self._value(name) if self._light(name) else default
        return self._full(self._queue).get(name, default)

    def __getitem__(self, name: str) -> Any:
        if name in _LIGHT and self._light(name):
            return self._value(name)
        return self._full(self._queue)[name]


def _install_sqs_send() -> None:
    if _sqs_originals:
        return
    full = Queue.__dict__["attributes"]
    if not isinstance(full, property) or full.fget is None or _CBD not in Queue.FIFO_ATTRIBUTES:
        raise RuntimeError("moto's sqs Queue.attributes changed: re-verify localmode/moto_speedups.py")
    compute: Callable[[Queue], dict[str, Any]] = full.fget

    def attributes(queue: Queue) -> Any:
        if getattr(_in_use, "queue", None) is queue:
            return _QueueAttributesInUse(queue, compute)
        return compute(queue)

    def using_queue(method: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(method)
        def wrapper(self: SQSBackend, queue_name: str, *args: Any, **kwargs: Any) -> Any:
            previous, _in_use.queue = getattr(_in_use, "queue", None), self.queues.get(queue_name)
            try:
                return method(self, queue_name, *args, **kwargs)
            finally:
                _in_use.queue = previous

        return wrapper

    _sqs_originals["attributes"] = full
    Queue.attributes = property(attributes)  # type: ignore[assignment,method-assign]
    for name in ("send_message", "receive_message"):
        _sqs_originals[name] = SQSBackend.__dict__[name]
        setattr(SQSBackend, name, using_queue(_sqs_originals[name]))


def installed() -> bool:
    return _original_serialize is not None


def attribute_value(value: dict[str, Any]) -> dict[str, Any]:
    """One AttributeValue as moto's JSON serializer writes it (one member set; None members dropped)."""
    if len(value) != 1:
        raise NotPlain
    ((kind, raw),) = value.items()
    if raw is None:
        raise NotPlain  # moto drops a None member: an empty structure, rare enough for the slow path
    if kind in _STRING_KINDS:
        return {kind: _string(raw)}
    if kind == "BOOL" or kind == "NULL":
        return {kind: raw}
    if kind == "M":
        if not isinstance(raw, dict):
            raise NotPlain
        # Keys as they are (moto's map serializer does not convert them); an empty key is special there.
        return {"M": {k: attribute_value(v) if k and isinstance(v, dict) else _not_plain() for k, v in raw.items()}}
    if kind == "L":
        if not isinstance(raw, list):
            raise NotPlain
        return {"L": [attribute_value(v) if isinstance(v, dict) else _not_plain() for v in raw]}
    if kind in _STRING_SET_KINDS:
        if not isinstance(raw, list):
            raise NotPlain
        return {kind: [_string(v) for v in raw]}
    if kind == "B":
        return {"B": _base64(raw)}
    if kind == "BS":
        if not isinstance(raw, list):
            raise NotPlain
        return {"BS": [_base64(v) for v in raw]}
    raise NotPlain


def _string(raw: Any) -> Any:
    # moto's string serializer: str() of anything but None, {} and [] (kept as they are).
    if raw is None or raw == {} or raw == []:
        raise NotPlain
    return raw if type(raw) is str else str(raw)


def _base64(raw: Any) -> str:
    if isinstance(raw, str):
        raw = raw.encode("utf-8")
    if not isinstance(raw, bytes):
        raise NotPlain
    return base64.b64encode(raw).strip().decode("utf-8")


def _not_plain() -> Any:
    raise NotPlain
