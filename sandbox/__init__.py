"""Local emulation of the stack: AWS on moto, Slack and PagerDuty stand-ins (python -m sandbox).

Where things are, in the order a replay uses them:
- `__main__`: the command line (`replay`, `invoke`, `run`, `standins`).
- `template`: loads template.yaml and resolves parameters, conditions, intrinsics and SAM Globals.
- `session`: the `Sandbox`: moto server, stand-ins (`standins`), the stack deployed, secrets seeded.
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
