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
- `ecs_emulation`: what moto's ECS lacks (capacity provider types, placement, task lifecycle, faults);
  `cloudwatch_emulation`: what moto's CloudWatch lacks (alarm contributors, alarm history, DescribeAlarms' pages).
- `scenario` (the file format), `world` (seeding), `expectations` (checking): for `run`.
- `replay`, `invoke`, `run`: the three commands; `report`: the timeline and the JSON report.
- `serve_standins`: `standins`, the stand-ins alone on a fixed port, for `sam local invoke`.
Why each piece exists (what moto lacks): docs/sandbox.md.
"""

import os as _os
from typing import Any as _Any

import boto3.session as _boto3_session
import botocore.loaders as _loaders
import botocore.session as _botocore_session

# Every boto3 session reads botocore's data files (each service's model, the endpoints) again, through a data loader
# of its own: each Lambda function the sandbox loads builds its clients in a session of its own, as a cold execution
# environment does, and moto's EC2 asks three new sessions for their regions when imported. The files are those of
# the installed botocore, the same for every session, so the sandbox's process reads each once: one loader for every
# session (for each data path), whose own cache keeps what it parsed. Nothing reads them otherwise than botocore would.
_create_loader = _loaders.create_loader
_shared_loaders: dict[_Any, _loaders.Loader] = {}


def _shared_loader(search_path_string: _Any = None) -> _loaders.Loader:
    loader = _shared_loaders.get(search_path_string)
    if loader is None:
        loader = _shared_loaders.setdefault(search_path_string, _create_loader(search_path_string))
    return loader


def _setup_loader(session: _boto3_session.Session) -> None:
    """boto3's own, without adding boto3's data folder to the shared loader's search paths once per session."""
    session._loader = session._session.get_component("data_loader")
    data = _os.path.join(_os.path.dirname(_boto3_session.__file__), "data")
    if data not in session._loader.search_paths:
        session._loader.search_paths.append(data)


setattr(_botocore_session, "create_loader", _shared_loader)  # noqa: B010
setattr(_boto3_session.Session, "_setup_loader", _setup_loader)  # noqa: B010
