"""Training auto-resume: the parameters the workflow runs with, and what every payload shares.

The models of this package are the JSON payloads that travel between the workflow's states. They ignore
unknown fields, so an execution that started before a deploy (an approval can wait for hours) still parses
after it.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field

MAX_ATTEMPTS_LIMIT = 20
MAX_BACKOFF_SECONDS = 900
EVIDENCE_ITEMS = 10
"""Skipped folders, attempts and tasks named in a notice: enough to act on, small enough for PagerDuty."""


class _Payload(BaseModel):
    # Built on first use: each task function validates a few of these, and builds only their validators.
    model_config = ConfigDict(frozen=True, extra="ignore", defer_build=True)


class Mode(StrEnum):
    AUTO = "auto"
    DRY_RUN = "dry-run"
    APPROVE = "approve"


class NoCheckpointPolicy(StrEnum):
    PAGE = "page"
    RESTART_FROM_SCRATCH = "restart-from-scratch"


Seconds = Annotated[int, Field(ge=1, le=86_400)]


class ResumeConfig(_Payload):
    """The stack parameters the workflow runs with; Claim reads them once and every later state gets them.

    The Wait states read their durations from here (SecondsPath), so the sandbox shortens the waits by
    parameter and runs the same definition.
    """

    mode: Mode = Mode.AUTO
    capacity_providers: tuple[str, ...] = ()
    """The training capacity providers (the rule matches them too; checked again in code). Empty: any."""
    check_types: tuple[str, ...] = ("ACCELERATED_COMPUTE",)
    max_attempts: Annotated[int, Field(ge=1, le=MAX_ATTEMPTS_LIMIT)] = 3
    mass_fault_threshold_percent: Annotated[int, Field(ge=1, le=100)] = 20
    mass_fault_window_minutes: Annotated[int, Field(ge=1, le=1440)] = 30
    no_checkpoint_policy: NoCheckpointPolicy = NoCheckpointPolicy.PAGE
    poll_seconds: Seconds = 15
    stop_timeout_seconds: Seconds = 600
    start_timeout_seconds: Seconds = 900
    approval_timeout_seconds: Annotated[int, Field(ge=1, le=604_800)] = 3600
    relaunch_backoff_seconds: Annotated[int, Field(ge=0, le=MAX_BACKOFF_SECONDS)] = 60
    job_concurrency: Annotated[int, Field(ge=1, le=40)] = 4
    checkpoint_now_seconds: Annotated[int, Field(ge=0, le=3600)] = 300
    """How long a move waits for the job to answer a checkpoint-now request before it stops the job; 0: never ask."""
    checkpoint_now_faults: tuple[str, ...] = ("xid_restart_app", "planned_drain", "planned_move")
    """The fault classes after which the job may still save: a move asks first. RESTART_APP XIDs (NVIDIA: restart
    the application, the host is sound), planned drains and operators' moves (nothing failed). After the others
    (XID 79: the GPU fell off the bus) the job cannot save, so nobody waits."""
    spare_attribute: Annotated[str, Field(max_length=128, pattern=r"^[A-Za-z0-9_./-]*$")] = "fault-responder.spare"
    """The ECS attribute that marks a host as a warm spare (resume.spares); empty: no spares."""
    refill_spares: bool = True
    """After a relaunch takes spares, ask the provider's Auto Scaling group for as many instances again."""

    @property
    def spare_hold_seconds(self) -> int:
        """How long a claimed spare is held for its relaunch: until the attempt's start timeout has passed."""
        return self.start_timeout_seconds + 2 * self.poll_seconds + 60


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"
