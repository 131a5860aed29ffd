"""Local emulation of the stack: AWS on moto, Slack and PagerDuty stand-ins (python -m sandbox).

Where things are, in the order a replay uses them:
- `__main__`: the command line (`replay`, `invoke`, `run`, `standins`).
- `template`: loads template.yaml and resolves parameters, conditions, intrinsics and SAM Globals.
- `session`: the `Sandbox`: moto server, stand-ins (`standins`), the stack deployed, secrets seeded;
  `moto_in_process` answers the process's own AWS calls without a socket, `moto_dynamodb` makes moto faster.
- `stack`: creates the template's resources in moto; functions become `FunctionSpec`s; state machines
  get their definition from `statemachine` (DefinitionSubstitutions applied, moto's interpreter on).
- `eventbridge`: rule patterns with EventBridge's exact semantics; delivery to rule targets.
- `sqs_mapping`: Lambda's SQS event source mapping (batches, partial failures, retries, DLQ).
- `lambda_runtime` and `lambda_bootstrap`: running a handler like Lambda, in process or in a clean
  interpreter from the `sam build` output.
- `stepfunctions`: executions: Lambda tasks dispatched to the handlers in process, waiting, summaries.
- `ecs_emulation`: what moto's ECS lacks (capacity provider types, placement, task lifecycle, faults).
- `scenario` (the file format), `world` (seeding), `expectations` (checking): for `run`.
- `replay`, `invoke`, `run`: the three commands; `report`: the timeline and the JSON report.
- `serve_standins`: `standins`, the stand-ins alone on a fixed port, for `sam local invoke`.
Why each piece exists (what moto lacks): docs/sandbox.md.
"""

import functools as _functools
from typing import Any as _Any

import boto3.session as _boto3_session

# moto's EC2 models (which its ECS imports) ask three new boto3 sessions for their regions when imported, and each
# session parses botocore's endpoint files again: half a second of every sandbox process's start. The answer is data
# of the installed botocore, the same for every session, so this process keeps the first.
_available_regions = _boto3_session.Session.get_available_regions


@_functools.cache
def _session() -> _boto3_session.Session:
    return _boto3_session.Session()


@_functools.lru_cache(maxsize=64)
def _regions(*args: _Any) -> tuple[str, ...]:
    return tuple(_available_regions(_session(), *args))


def _cached_regions(
    _: _boto3_session.Session, service_name: str, partition_name: str = "aws", allow_non_regional: bool = False
) -> list[str]:
    return list(_regions(service_name, partition_name, allow_non_regional))


setattr(_boto3_session.Session, "get_available_regions", _cached_regions)  # noqa: B010
