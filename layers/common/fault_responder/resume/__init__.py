"""Training auto-resume (docs/auto-resume.md): the ResumeTraining workflow's decisions, steps and notices.

The domain modules decide from plain values, with no boto3 and no HTTP; the steps feed them from the adapters.
Each module imports only those above it in this list. The package may import core, events, routing,
incidents, noise, notification and alerting; never adapters or wiring (wiring/resume_training.py builds the
steps with their adapters):

- checkpoints.py the newest complete checkpoint under an S3 prefix (docs/checkpoint-contract.md)
- config.py    the parameters the workflow runs with (mode, no-checkpoint policy, timeouts, limits)
- fault.py     which fault counts, the claim, the guards (ECS auto-repair, mass faults), the quarantine
- jobs.py      which tasks form a job (the job's tags), and what makes a job's tags unusable
- budget.py    the attempt ledger, the attempt budget, the plan per mode and policy (resume, retry, give up)
- relaunch.py  the clientToken, where a relaunch may not land, the resume environment, the RunTask request
- watch.py     task states after StopTask and RunTask: stopped, started, failed or timed out
- notices.py   what people are told, per notice kind (texts, PagerDuty action, evidence)
- notify.py    where a notice is sent (Slack thread, PagerDuty), through the alert pipeline's pieces
- ports.py     what the steps act through: ECS, Auto Scaling, the workflow's records, S3 requests, the notifier
- spare_steps.py taking warm spares for a relaunch and refilling their pool, once per attempt, under a lease
- steps.py     one step per task state of the workflow, over ports

The models are the JSON payloads that travel between the workflow's states. They ignore unknown fields, so an
execution that started before a deploy (an approval can wait for hours) still parses after it.
"""
