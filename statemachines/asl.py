"""Building blocks for writing Amazon States Language (JSONPath) in Python, each state as one call.

Each function returns the plain dict the state is in ASL, its keys in the order the checked-in JSON has them
(json.dumps keeps insertion order), so `render` writes the same bytes every time. Nothing here knows a workflow:
statemachines/resume_training.py says which states ResumeTraining has and how they retry; statemachines/build.py
writes and checks the JSON files.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

Json = dict[str, Any]

# An input is a JSONPath into the state's input, named after its first field ("$.plan.Payload" is passed as
# "plan"), or a mapping of names to values: a value that starts with "$" is a path ("$$." the context object),
# anything else is passed as it is.
Input = str | Mapping[str, Any]


def fields(inputs: Iterable[Input]) -> Json:
    """The ASL object passing `inputs` (Parameters, Payload, ItemSelector), in their order."""
    out: Json = {}
    for item in inputs:
        if isinstance(item, str):
            if not item.startswith("$."):
                raise ValueError(f"{item!r}: a bare input is a path into the state's input ($.name...)")
            out[f"{item[2:].split('.')[0]}.$"] = item
            continue
        for name, value in item.items():
            is_path = isinstance(value, str) and value.startswith("$")
            out[f"{name}.$" if is_path else name] = value
    return out


def invoke(function: str, payload: Json, *, wait_for_token: bool = False) -> Json:
    """Resource and Parameters of a Lambda invoke: `function` is the logical id without "Function", as the
    template's DefinitionSubstitutions name it (`ClaimFault` -> ${ClaimFaultFunctionArn})."""
    resource = "arn:aws:states:::lambda:invoke" + (".waitForTaskToken" if wait_for_token else "")
    return {"Resource": resource, "Parameters": {"FunctionName": f"${{{function}FunctionArn}}", "Payload": payload}}


def retry(errors: Sequence[str], *, interval: int, attempts: int, rate: float = 2.0, jitter: bool = True) -> Json:
    """One Retry rule: `errors` retried `attempts` times, `interval` seconds apart times `rate` each time."""
    rule: Json = {"ErrorEquals": list(errors), "IntervalSeconds": interval, "MaxAttempts": attempts}
    rule["BackoffRate"] = rate
    if jitter:
        rule["JitterStrategy"] = "FULL"
    return rule


def catch(next_state: str, errors: Sequence[str] = ("States.ALL",), *, result_path: str | None = None) -> Json:
    """One Catch rule: `errors` go to `next_state`, the error at `result_path` (None: it replaces the input)."""
    rule: Json = {"ErrorEquals": list(errors)}
    if result_path is not None:
        rule["ResultPath"] = result_path
    rule["Next"] = next_state
    return rule


def _with_comment(comment: str | None, state: Json) -> Json:
    return {"Comment": comment, **state} if comment else state


def task(
    call: Json,
    *,
    next: str,
    retry: Sequence[Json],
    catch: Sequence[Json],
    output_path: str | None = None,
    result_selector: Json | None = None,
    timeout_path: str | None = None,
    result_path: str | None = None,
    comment: str | None = None,
) -> Json:
    """A Task state: `call` from `invoke`, then its result handling, Retry and Catch rules, and Next."""
    state: Json = {"Type": "Task", **call}
    optional = {
        "OutputPath": output_path,
        "ResultSelector": result_selector,
        "TimeoutSecondsPath": timeout_path,
        "ResultPath": result_path,
    }
    state.update({key: value for key, value in optional.items() if value is not None})
    state.update({"Retry": list(retry), "Catch": list(catch), "Next": next})
    return _with_comment(comment, state)


def when(variable: str, value: str | bool, next_state: str) -> Json:
    """A Choice rule: `variable` equals `value` (StringEquals for a string, BooleanEquals for a bool)."""
    test = "BooleanEquals" if isinstance(value, bool) else "StringEquals"
    return {"Variable": variable, test: value, "Next": next_state}


def when_true(variable: str, next_state: str) -> Json:
    """A Choice rule that holds only if `variable` is present, a boolean, and true (nothing else can fail it)."""
    checks = [{"Variable": variable, test: True} for test in ("IsPresent", "IsBoolean", "BooleanEquals")]
    return {"And": checks, "Next": next_state}


def when_present(variable: str, value: str, next_state: str) -> Json:
    """A Choice rule that holds only if `variable` is present and equals `value` (absent or null: it does not hold,
    where a bare StringEquals on a missing path would fail the execution)."""
    checks = [{"Variable": variable, "IsPresent": True}, {"Variable": variable, "IsString": True}]
    return {"And": [*checks, {"Variable": variable, "StringEquals": value}], "Next": next_state}


def choice(*rules: Json, default: str, comment: str | None = None) -> Json:
    """A Choice state: the first rule that holds picks the next state, else `default`."""
    return _with_comment(comment, {"Type": "Choice", "Choices": list(rules), "Default": default})


def pass_state(
    *,
    result: Json | None = None,
    parameters: Json | None = None,
    result_path: str | None = None,
    next: str | None = None,
    comment: str | None = None,
) -> Json:
    """A Pass state: a fixed `result` or `parameters` built from the input; it ends the branch without `next`."""
    state: Json = {"Type": "Pass"}
    if parameters is not None:
        state["Parameters"] = parameters
    if result is not None:
        state["Result"] = result
    if result_path is not None:
        state["ResultPath"] = result_path
    state.update({"Next": next} if next else {"End": True})
    return _with_comment(comment, state)


def wait(seconds_path: str, next: str, *, comment: str | None = None) -> Json:
    """A Wait state for as many seconds as the input holds at `seconds_path`."""
    return _with_comment(comment, {"Type": "Wait", "SecondsPath": seconds_path, "Next": next})


def succeed() -> Json:
    return {"Type": "Succeed"}


def fail(error: str, cause: str) -> Json:
    return {"Type": "Fail", "Error": error, "Cause": cause}


def inline_map(
    *,
    items_path: str,
    item_selector: Json,
    max_concurrency_path: str,
    states: Mapping[str, Json],
    result_path: str,
    catch: Sequence[Json],
    next: str,
) -> Json:
    """A Map state running `states` (the first listed starts) for each item, inline in this execution."""
    return {
        "Type": "Map",
        "ItemsPath": items_path,
        "ItemSelector": item_selector,
        "MaxConcurrencyPath": max_concurrency_path,
        "ItemProcessor": {"ProcessorConfig": {"Mode": "INLINE"}, "StartAt": next_of(states), "States": dict(states)},
        "ResultPath": result_path,
        "Catch": list(catch),
        "Next": next,
    }


def next_of(states: Mapping[str, Json]) -> str:
    """Where a list of states starts: the first one listed."""
    return next(iter(states))


def machine(comment: str, states: Mapping[str, Json]) -> Json:
    """A whole state machine (JSONPath), starting at the first of `states`."""
    return {"Comment": comment, "QueryLanguage": "JSONPath", "StartAt": next_of(states), "States": dict(states)}


def render(definition: Json) -> str:
    """The definition as the checked-in file has it: two-space indent, ASCII, a final newline."""
    return json.dumps(definition, indent=2) + "\n"


def differences(current: Json, generated: Json, prefix: str = "") -> list[str]:
    """Where `current` and `generated` differ: the states by name (Map/State inside a Map), and other keys."""
    found: list[str] = []
    for key in dict.fromkeys([*generated, *current]):
        if key == "States" and isinstance(current.get(key), dict) and isinstance(generated.get(key), dict):
            found.extend(_state_differences(current[key], generated[key], prefix))
        elif current.get(key) != generated.get(key):
            found.append(f"{prefix}{key}")
    return found


def _state_differences(current: Json, generated: Json, prefix: str) -> list[str]:
    found: list[str] = []
    for name in dict.fromkeys([*generated, *current]):
        if name not in current:
            found.append(f"{prefix}{name} (only in the source)")
        elif name not in generated:
            found.append(f"{prefix}{name} (only in the JSON)")
        else:
            old, new = current[name], generated[name]
            old_items, new_items = old.get("ItemProcessor"), new.get("ItemProcessor")
            if isinstance(old_items, dict) and isinstance(new_items, dict):
                inner = differences(old_items, new_items, f"{prefix}{name}/")
                old, new = _without(old, "ItemProcessor"), _without(new, "ItemProcessor")
                found.extend(([f"{prefix}{name}"] if old != new else []) + inner)
            elif old != new:
                found.append(f"{prefix}{name}")
    return found


def _without(state: Json, key: str) -> Json:
    return {name: value for name, value in state.items() if name != key}
