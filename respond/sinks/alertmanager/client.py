"""Alertmanager's API v2 (`POST /api/v2/alerts`): one alert per incident, as Prometheus sends them.

The alert's labels identify and route it (`respond.sinks.pages.page_labels`: alertname, cluster,
node, gpu, family, severity, team, namespace, component, incident); its annotations say what it is
(`summary`, `description`), what was decided (`decision`), what to do first (`runbook`, the
runbook's first step), where to read more (`incident`, `ticket`) and the latest step taken
(`step`). A firing alert is sent without `endsAt`: Alertmanager resolves it `resolve_timeout` after
it last heard of it, so the page sink re-sends it every `resend_s` (kept below that timeout); a
resolved one is sent with `endsAt`. When what routes it changed (its severity, its team), the alert
under the old labels is sent ended with the new one, so the old one does not linger.

Every Alertmanager of a cluster is sent every alert (they share silences and notifications, not
alerts); the event is delivered when one of them accepted it, as Prometheus does.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from pydantic import SecretStr

from models.paging import PagePolicy
from respond.errors import ActionError
from respond.sinks.http_json import post_json
from respond.sinks.ports import PageEvent

log = logging.getLogger(__name__)


def _iso(at: datetime) -> str:
    return at.astimezone(UTC).isoformat().replace("+00:00", "Z")


def alert_annotations(event: PageEvent) -> dict[str, str]:
    """The alert's annotations, the empty ones left out."""
    c = event.content
    decision = next((text for label, text in c.fields if label == "Decision"), "")
    out = {"summary": c.title, "description": f"{c.category}: {c.reason}", "decision": decision,
           "runbook": c.steps[0] if c.steps else "", "incident": event.link("Incident page") or "",
           "ticket": event.link("Ticket") or "", "step": event.step.text if event.step is not None else ""}
    return {k: v for k, v in out.items() if v}


def alerts_of(event: PageEvent) -> list[dict[str, Any]]:
    """The postable alerts of one event: the incident's alert (with `endsAt` once resolved), and the
    alert under the labels it had before, ended, when they changed."""
    alert: dict[str, Any] = {"labels": dict(event.labels), "annotations": alert_annotations(event),
                             "startsAt": _iso(event.started_at)}
    page = event.link("Incident page")
    if page:
        alert["generatorURL"] = page
    if not event.firing:
        alert["endsAt"] = _iso(event.at)
    out = [alert]
    if event.told_labels:
        out.append({**alert, "labels": dict(event.told_labels), "endsAt": _iso(event.at)})
    return out


class AlertmanagerPager:
    name = "alertmanager"

    def __init__(self, urls: Sequence[str], policy: PagePolicy, *, bearer_token: SecretStr | None = None,
                 timeout_s: float = 10.0) -> None:
        if not urls:
            raise ValueError("at least one Alertmanager URL")
        self.urls = tuple(u.rstrip("/") for u in urls)
        self.policy = policy
        self.timeout_s = timeout_s
        self._token = bearer_token

    def _headers(self) -> Mapping[str, str]:
        return {"Authorization": f"Bearer {self._token.get_secret_value()}"} if self._token else {}

    def send(self, event: PageEvent) -> None:
        body = json.dumps(alerts_of(event)).encode()
        secret = self._token.get_secret_value() if self._token else None
        errors: list[ActionError] = []
        for url in self.urls:
            try:
                post_json(f"{url}/api/v2/alerts", body, what=f"Alertmanager {url}", timeout_s=self.timeout_s,
                          headers=self._headers(), secrets=(secret,))
            except ActionError as exc:
                log.warning("alert %s not delivered to %s: %s", event.alert_key, url, exc.message,
                            extra={"incident": event.incident_id})
                errors.append(exc)
        if len(errors) == len(self.urls):
            raise errors[0]
