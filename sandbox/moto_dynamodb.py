"""moto's DynamoDB (and its request dispatch), answered faster: the same answers, for a fraction of the CPU.

moto writes each answer by walking the operation's output shape in botocore's model, value by value. For the item
operations (an UpdateItem returning a record, a Query returning a page) that walk is more than half of the time
moto spends on a request, and the sandbox spends most of a storm's wall time waiting for DynamoDB. The result moto
builds is already DynamoDB's wire form (attribute values as `{"S": ...}`, numbers as strings) except binary
values, held as bytes, and times, held as datetimes; so for those operations the answer is `json.dumps` of it,
with bytes in base64 and times as epoch seconds, as DynamoDB's JSON protocol writes them. Anything else (errors,
the control plane, a result that is not a dict) goes through moto's own serializer.

A Query of the table itself (not of an index) reads its partition: moto lists every item of the table and keeps those
of the partition, so each such Query cost as much as the table is large (a fleet's journal, read at each batch, in a
table of thousands of members). The partition is found by its key, as DynamoDB finds it; the rest of moto's Query
(conditions, order, pages, filters, projections) is moto's own.

An UpdateExpression is parsed once per text: moto parses it twice per UpdateItem (once to check the placeholders it
names, once to apply it), and the store writes with the same few expressions again and again. The parsed tree is
only read (moto's Validator works on a deep copy of it), and an expression that does not parse raises each time.
A condition (ConditionExpression, FilterExpression, KeyConditionExpression) is cut into tokens once per text: the
tokens are tuples that moto's parser only reads, and each parse gets a list of its own; the rest of the parse (names
and values put in, the tree of operations) is moto's, each time.

Copies and conversions of attribute values are written as plain recursion: moto deep-copies each item twice per
UpdateItem and converts it to JSON twice, through `copy.deepcopy` at every level, and its `to_regular_json` deep-copies
each level's subtree again before converting it (so a nested value was copied once per level above it). An
UpdateExpression with at most one clause of each kind is never checked again for too many clauses (moto looked for
them from every node of the tree); any other goes through moto's own check, for its own error.

moto keeps every model object it ever created, for its dashboard: each DynamoDB item written and each copy of one,
each SQS message. That memory grew with every event a replay handled and was never given back (a fifth of a megabyte
per event). Only S3's objects are still kept: S3's reset closes the files they hold.

moto's SQS checks, for each message a ReceiveMessage hands out, that it is within its queue's retention period, and
reads that period by building every attribute of the queue, counting its messages three times on the way: a receive
cost as much as the queue was long, times the batch. The period is read from the queue itself; the check is moto's.

moto's dispatch answers every request after two lookups that do not change while the process runs: which services it
has (a directory listing, several times per request) and which methods a response class has (`inspect.getmembers`).
Both are kept after the first time.

tests/sandbox/test_moto_dynamodb.py checks, over every attribute type and every operation here, that both answers
parse to the same response in botocore.
"""

from __future__ import annotations

import base64
import copy
import functools
import inspect
import json
import pickle  # nosec B403  # copies of trees this module built itself, never data from outside
import threading
from collections import deque
from collections.abc import Callable
from datetime import datetime
from decimal import Decimal
from typing import Any

from moto import backends
from moto.core import responses as moto_responses
from moto.core.common_models import BaseModel
from moto.core.common_types import TYPE_RESPONSE
from moto.core.responses import ActionResult
from moto.core.utils import unix_time
from moto.dynamodb.comparisons import ConditionExpressionParser
from moto.dynamodb.models.dynamo_type import DynamoType, Item
from moto.dynamodb.models.table import Table
from moto.dynamodb.parsing import expressions, validators
from moto.dynamodb.parsing.ast_nodes import (  # type: ignore[attr-defined]
    DepthFirstTraverser,
    Node,
    UpdateExpressionAddClause,
    UpdateExpressionRemoveClause,
    UpdateExpressionSetClause,
)
from moto.dynamodb.parsing.validators import ActionCountValidator
from moto.dynamodb.responses import DynamoHandler
from moto.sqs import models as sqs_models

ITEM_OPERATIONS = frozenset(
    {
        "GetItem",
        "PutItem",
        "UpdateItem",
        "DeleteItem",
        "Query",
        "Scan",
        "BatchGetItem",
        "BatchWriteItem",
        "TransactGetItems",
        "TransactWriteItems",
    }
)
CONTENT_TYPE = "application/x-amz-json-1.0"

_moto_serialized = DynamoHandler.serialized
_moto_query = Table.query
_moto_all_items = Table.all_items
UpdateExpressionParser: Any = getattr(expressions, "UpdateExpressionParser")  # noqa: B009  # moto's parsing carries no types
_moto_make = UpdateExpressionParser.__dict__["make"]
_moto_count_actions = ActionCountValidator.traverse
_moto_lex = ConditionExpressionParser._lex_condition_expression
_moto_modules = backends.list_of_moto_modules
_moto_method_names = vars(moto_responses)["method_names_from_class"]
_moto_camelcase = vars(moto_responses)["camelcase_to_underscores"]
_moto_node_types = DepthFirstTraverser.nodes_to_be_processed
_trees: dict[int, tuple[Any, bytes]] = {}
"""id → (tree, its pickle) for the trees `make` returned: moto's validator copies one per UpdateItem."""
_node_types: dict[type, tuple[type, ...]] = {}
_processes: dict[tuple[type, type], bool] = {}
"""(traverser class, node class) → whether the traverser processes such nodes (isinstance on moto's ABCs, once)."""
_is_node: dict[type, bool] = {}
_IMMUTABLE = (str, bytes, bool, int, Decimal, type(None))
_SETS = frozenset({"SS", "NS", "BS"})
_CLAUSES = (UpdateExpressionAddClause, UpdateExpressionRemoveClause, UpdateExpressionSetClause)
_querying = threading.local()
"""The table and partition key a Query of this thread is reading, while moto's Table.query runs."""


def _wire(value: object) -> object:
    if isinstance(value, bytes | bytearray):
        return base64.b64encode(bytes(value)).decode("ascii")
    if isinstance(value, datetime):
        return value.timestamp()
    if isinstance(value, Decimal):
        return str(value)
    raise TypeError(f"not JSON: {type(value).__name__}")


def serialized(handler: DynamoHandler, action_result: ActionResult) -> TYPE_RESPONSE:
    """DynamoHandler.serialized, for the item operations a JSON dump of the result moto built."""
    result = action_result.result
    if not isinstance(result, dict) or handler._get_action() not in ITEM_OPERATIONS:
        return _moto_serialized(handler, action_result)
    body = json.dumps(result, default=_wire, separators=(",", ":"))
    headers: dict[str, Any] = {"Content-Type": CONTENT_TYPE}
    headers.update(handler.response_headers)
    return 200, headers, body


def query(table: Table, hash_key: DynamoType | None, *args: Any, **kwargs: Any) -> Any:
    """Table.query; for the table itself (no index) and a string or binary key, over that partition's items only."""
    index_name = args[6] if len(args) > 6 else kwargs.get("index_name")  # moto's DynamoDBBackend passes it 8th
    if index_name is not None or hash_key is None or hash_key.type not in ("S", "B"):
        return _moto_query(table, hash_key, *args, **kwargs)
    _querying.partition = (table, hash_key)
    try:
        return _moto_query(table, hash_key, *args, **kwargs)
    finally:
        _querying.partition = None


def all_items(table: Table) -> list[Item]:
    """Table.all_items; inside `query`, the items of the partition it reads (the key found as moto stores it)."""
    partition = getattr(_querying, "partition", None)
    if partition is None or partition[0] is not table:
        return _moto_all_items(table)
    stored = table.items.get(partition[1])  # a defaultdict: get() adds no partition
    if stored is None:
        return []
    return list(stored.values()) if table.range_key_attr else [stored]


@functools.lru_cache(maxsize=1024)
def _parsed(expression: str) -> Any:
    tree = _moto_make.__func__(UpdateExpressionParser, expression)
    if len(_trees) >= 2048:
        _trees.clear()
    _trees[id(tree)] = (tree, pickle.dumps(tree, protocol=pickle.HIGHEST_PROTOCOL))
    return tree


@functools.lru_cache(maxsize=1024)
def _tokens(expression: str) -> tuple[Any, ...]:
    return tuple(_moto_lex(ConditionExpressionParser(expression, None, None)))


def lex(parser: ConditionExpressionParser) -> deque[Any]:
    """ConditionExpressionParser._lex_condition_expression, each text cut into tokens once (a bad one raises
    each time)."""
    return deque(_tokens(parser.condition_expression or ""))


def tree_copy(value: Any, memo: dict[int, Any] | None = None) -> Any:
    """The validators' deepcopy: a tree `make` returned is copied from its pickle (a fifth of the time)."""
    entry = _trees.get(id(value))
    if entry is None or entry[0] is not value:
        return copy.deepcopy(value, memo)
    return pickle.loads(entry[1])  # nosec B301  # pickled by _parsed from moto's own parser


def node_types(traverser: DepthFirstTraverser) -> tuple[type, ...]:
    """DepthFirstTraverser.nodes_to_be_processed, once per traverser class (its map's keys are classes)."""
    kind = type(traverser)
    found = _node_types.get(kind)
    if found is None:
        found = _node_types[kind] = _moto_node_types(traverser)
    return found


def make(_: type, expression: str) -> Any:
    """UpdateExpressionParser.make, each text parsed once (the tree is shared: moto only reads it, or copies it)."""
    return _parsed(expression)


def _copied(value: DynamoType) -> DynamoType:
    """DynamoType.__deepcopy__, without copy.deepcopy's bookkeeping at each level (attribute values hold no cycles)."""
    result = DynamoType.__new__(DynamoType)
    result.type = kind = value.type
    inner = value.value
    if kind == "L":
        result.value = [_copied(item) if type(item) is DynamoType else copy.deepcopy(item) for item in inner]
    elif kind == "M":
        result.value = {
            key: _copied(item) if type(item) is DynamoType else copy.deepcopy(item) for key, item in inner.items()
        }
    elif kind in _SETS:
        result.value = list(inner)
    else:
        result.value = inner
    return result


def deepcopy(value: DynamoType, memo: dict[int, Any]) -> DynamoType:
    result = _copied(value)
    memo[id(value)] = result
    return result


def traverse(traverser: Any, node: Any, child_id: int = -1) -> Any:
    """DepthFirstTraverser.traverse_node_recursively, with its two isinstance checks answered once per class."""
    kind = type(node)
    is_node = _is_node.get(kind)
    if is_node is None:
        is_node = _is_node[kind] = issubclass(kind, Node)
    if not is_node:
        return node
    key = (type(traverser), kind)
    processes = _processes.get(key)
    if processes is None:
        processes = _processes[key] = issubclass(kind, node_types(traverser))
    parent = node.parent
    if node.children is not None:
        for index, child in enumerate(node.children):
            traverser.pre_processing_of_child(node, index)
            traverser.traverse_node_recursively(child, index)
    if processes:
        node = traverser.process(node)
        node.parent = parent
        if parent:
            parent.children[child_id] = node
    return node


def size(value: DynamoType) -> int:
    """DynamoType.size, without building a DynamoType for each member of a map or a set."""
    kind = value.type
    inner = value.value
    if kind == "N":
        return len(str(inner))
    if kind in _SETS:
        member = kind[0]
        return sum(len(str(item)) if member == "N" else _bytesize(item) for item in inner)
    if kind == "L":
        return sum(size(item) for item in inner)
    if kind == "M":
        return sum(_bytesize(key) + size(_typed(item)) for key, item in inner.items())
    if isinstance(inner, bool):
        return 1
    return _bytesize(inner)


def _typed(value: Any) -> DynamoType:
    return value if type(value) is DynamoType else DynamoType(value)


def _bytesize(text: str | bytes) -> int:
    return len(text if isinstance(text, bytes) else text.encode("utf-8"))


def _plain(value: object) -> object:
    if isinstance(value, _IMMUTABLE):
        return value
    return regular_json(value) if isinstance(value, DynamoType) else copy.deepcopy(value)


def regular_json(value: DynamoType) -> dict[str, Any]:
    """DynamoType.to_regular_json, each level converted once."""
    inner = value.value
    if isinstance(inner, dict):
        plain: Any = {key: _plain(item) for key, item in inner.items()}
    elif isinstance(inner, list):
        plain = [_plain(item) for item in inner]
    else:
        plain = inner if isinstance(inner, _IMMUTABLE) else copy.deepcopy(inner)
    if value.type == "B" and isinstance(plain, str):
        plain = base64.b64decode(plain)
    return {value.type: plain}


def count_actions(validator: ActionCountValidator, node: Any) -> Any:
    """ActionCountValidator.traverse: a tree with at most one clause of each kind passes as is."""
    if all(len(node.find_clauses([clause])) <= 1 for clause in _CLAUSES):
        return node
    return _moto_count_actions(validator, node)


@functools.cache
def modules() -> tuple[str, ...]:
    """backends.list_of_moto_modules: the folders of moto's package, listed once."""
    return tuple(_moto_modules())


def _cached(function: Callable[[Any], Any]) -> Callable[[Any], Any]:
    return functools.lru_cache(maxsize=512)(function)


_method_names: dict[Any, tuple[tuple[str, ...], list[str]]] = {}


def method_names(clazz: Any) -> list[str]:
    """moto's method_names_from_class (the actions a response class answers), listed again only when the class's own
    attributes changed: the sandbox's emulations add actions to moto's response classes while a run goes on
    (sandbox/cloudwatch_emulation.py adds DescribeAlarmContributors), after the class may have answered a request."""
    own = tuple(vars(clazz))
    cached = _method_names.get(clazz)
    if cached is not None and cached[0] == own:
        return cached[1]
    names: list[str] = _moto_method_names(clazz)
    _method_names[clazz] = (own, names)
    return names


camelcase = _cached(_moto_camelcase)


_TRACKED = "moto.s3."
"""The models moto must still list: S3's reset closes the files of the keys it tracked."""


def new_model(cls: Any, *args: Any, **kwargs: Any) -> Any:
    """BaseModel.__new__, keeping the object in moto's list of instances only for S3's models."""
    instance = super(BaseModel, cls).__new__(cls)
    if cls.__module__.startswith(_TRACKED):
        cls.instances_tracked.append(instance)
    return instance


def retained(backend: sqs_models.SQSBackend, queue_name: str, message: sqs_models.Message) -> bool:
    """SQSBackend.is_message_valid_based_on_retention_period, the period read without building every attribute."""
    period = backend.get_queue(queue_name).message_retention_period  # type: ignore[attr-defined]  # set by moto
    return bool(int(period) + message.sent_timestamp / 1000 > unix_time())  # type: ignore[operator]


def _replacements() -> list[tuple[Any, str, Any]]:
    """(class or module, attribute, what `install` puts there)."""
    return [
        (DynamoHandler, "serialized", serialized),
        (Table, "query", query),
        (Table, "all_items", all_items),
        (UpdateExpressionParser, "make", classmethod(make)),
        (DynamoType, "__deepcopy__", deepcopy),
        (DynamoType, "to_regular_json", regular_json),
        (DynamoType, "size", size),
        (ActionCountValidator, "traverse", count_actions),
        (ConditionExpressionParser, "_lex_condition_expression", lex),
        (DepthFirstTraverser, "nodes_to_be_processed", node_types),
        (DepthFirstTraverser, "traverse_node_recursively", traverse),
        (validators, "deepcopy", tree_copy),
        (backends, "list_of_moto_modules", modules),
        (moto_responses, "method_names_from_class", method_names),
        (moto_responses, "camelcase_to_underscores", camelcase),
        (sqs_models, "camelcase_to_underscores", camelcase),
        (sqs_models.SQSBackend, "is_message_valid_based_on_retention_period", retained),
        (BaseModel, "__new__", new_model),
    ]


_ORIGINALS = [(owner, name, inspect.getattr_static(owner, name)) for owner, name, _ in _replacements()]


def install() -> None:
    """Answer moto's DynamoDB item operations with `serialized`, its table Queries by partition, parse each
    UpdateExpression once, copy and convert values directly, and look moto's dispatch up once (idempotent)."""
    for owner, name, replacement in _replacements():
        setattr(owner, name, replacement)


def uninstall() -> None:
    for owner, name, original in _ORIGINALS:
        setattr(owner, name, original)
