"""GPU Fault Responder: ECS GPU health, drain and task events in; incidents, pages and training resumes out.

Each capability is a package; a package imports only the packages below it (docs/architecture.md, checked by
the import contracts in pyproject.toml on every `make test`):

    wiring | cli                          composition roots: a function's or a command's adapters, built once
    adapters                              boto3 and HTTP: DynamoDB, ECS, S3, Step Functions, Slack, PagerDuty
    actions | operations | resume         people acting; running the responder; training auto-resume
    alerting                              the alert router's use case: one event in, every receiver up to date
    notification                          what a receiver is told and telling it: rendering, delivery
    noise                                 who hears nothing new: fleets, silences, inhibition, policy
    incidents                             facts become incidents: classification, drain, people's actions
    routing                               who hears about what: routes, matchers, time intervals, runbooks
    events                                what arrives: envelopes, the ECS and alarm events, the XID catalog
    core                                  the vocabulary all share: domain types, times, logging and metrics

Packages on one line (`a | b`) do not import each other.
"""
