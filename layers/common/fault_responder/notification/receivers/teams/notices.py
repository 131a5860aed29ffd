"""Adaptive Cards for the training auto-resume workflow's notices (fault_responder.resume.notices), for a Teams
Workflows webhook: the notice, the job, the host it faulted on and where the job runs now.

Teams has no thread, so a notice is a card of its own naming the job, the host and the incident. A card posted
through a webhook cannot carry buttons that act: an approval request says where it is answered.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from fault_responder.core.domain import InstanceRef, Severity, Where
from fault_responder.notification.receivers.teams.card import (
    MAX_TEXT,
    MAX_TITLE,
    SEVERITY_MARK,
    SEVERITY_STYLE,
    TeamsMessage,
    clip,
    container,
    escape_markdown,
    fact_set,
    message,
    open_url,
    text_block,
    within_budget,
)
from fault_responder.notification.receivers.teams.render import DASHBOARD_LINK_TEXT, where_facts

MAX_PLACES = 20
"""Hosts or capacity providers named in "Runs now on" before the rest are counted."""
NO_BUTTONS = (
    "Approve or Reject from the Slack message that carries this request's buttons: a card posted through a Teams "
    "webhook cannot act"
)


class NoticeView(Protocol):
    """What a notice card reads of a resume notice (fault_responder.resume.notices.Notice)."""

    @property
    def title(self) -> str: ...
    @property
    def text(self) -> str: ...
    @property
    def severity(self) -> Severity: ...
    @property
    def job_id(self) -> str | None: ...
    @property
    def approval_id(self) -> str | None: ...
    @property
    def details(self) -> Mapping[str, Any]: ...


class FaultView(Protocol):
    """What a notice card reads of the fault it is about (fault_responder.resume.fault.Fault)."""

    @property
    def host(self) -> str: ...
    @property
    def cluster_name(self) -> str: ...
    @property
    def capacity_provider(self) -> str: ...
    @property
    def title(self) -> str: ...
    @property
    def fingerprint(self) -> str: ...

    def instance_ref(self) -> InstanceRef: ...


def render_notice(
    notice: NoticeView, fault: FaultView, *, where: Where | None = None, dashboard_url: str | None = None
) -> TeamsMessage:
    """A notice as a card: what the workflow did or asks, the job, the host it faulted on and where it runs now; in
    organization mode (`where`), the account and Region beside the cluster."""
    head = f"{SEVERITY_MARK[notice.severity]} Training auto-resume · {escape_markdown(clip(notice.title, MAX_TITLE))}"
    body = [
        container([text_block(head, size="Medium", weight="Bolder")], style=SEVERITY_STYLE[notice.severity]),
        text_block(escape_markdown(clip(notice.text, MAX_TEXT))),
    ]
    facts = [("Job", escape_markdown(notice.job_id))] if notice.job_id else []
    facts += [
        ("Host", escape_markdown(fault.host)),
        ("Cluster", escape_markdown(fault.cluster_name)),
        *where_facts(where),
        ("Capacity provider", escape_markdown(fault.capacity_provider)),
        ("Fault", escape_markdown(clip(fault.title, MAX_TITLE))),
    ]
    runs = runs_now_on(notice.details)
    if runs is not None:
        facts.append(("Runs now on", escape_markdown(runs)))
    body.extend(fact_set(facts))
    if notice.approval_id:
        body.append(text_block(f"**{NO_BUTTONS}.**"))
    context = ["Training auto-resume"]
    if notice.job_id:
        context.append(f"job {escape_markdown(notice.job_id)}")
    context += [f"host {escape_markdown(fault.host)}", f"incident {escape_markdown(fault.fingerprint)}"]
    body.append(text_block(" · ".join(context), subtle=True, separator=True))
    actions = [open_url("Container instance", fault.instance_ref().console_url)]
    if dashboard_url:
        actions.append(open_url(DASHBOARD_LINK_TEXT, dashboard_url))
    cluster = fault.cluster_name + (f", {where}" if where is not None else "")
    fallback = escape_markdown(f"Training auto-resume · {notice.title} · {fault.host} ({cluster})")
    return within_budget(message(body, fallback=fallback, actions=actions))


def runs_now_on(details: Mapping[str, Any]) -> str | None:
    """Where the job runs now, from the notice's evidence: the hosts its relaunched tasks run on (the watch), else
    the warm spares it claimed, else the capacity providers its tasks were started on, with the attempt; None when
    the notice tells of no relaunch."""
    launch = details.get("launch")
    if not isinstance(launch, Mapping):
        return None
    tasks = details.get("tasks")
    spare = launch.get("spare")
    hosts = _listed(tasks.get("hosts")) if isinstance(tasks, Mapping) else []
    spares = _listed(spare.get("hosts")) if isinstance(spare, Mapping) else []
    providers = _listed(launch.get("capacity_providers"))
    if hosts:
        place = f"{_named(hosts)}"
    elif spares:
        place = f"warm spares {_named(spares)}"
    elif providers:
        place = f"capacity provider{'s' if len(providers) != 1 else ''} {_named(providers)}"
    else:
        return None
    attempt = launch.get("attempt")
    return f"{place} (attempt {attempt})" if isinstance(attempt, int) else place


def _listed(value: Any) -> list[str]:
    if not isinstance(value, Sequence) or isinstance(value, str):
        return []
    return [str(item) for item in value]


def _named(items: list[str]) -> str:
    named = ", ".join(items[:MAX_PLACES])
    more = len(items) - MAX_PLACES
    return named + (f" and {more} more" if more > 0 else "")
