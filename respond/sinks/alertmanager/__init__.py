"""Alertmanager, for pages: every open incident is one alert, POSTed to Alertmanager's API v2
(`alerts`), which groups, routes, inhibits, silences and notifies by its own configuration.

Its params are the `alertmanager_*` fields of `SinkSettings` (`XIDPIPE_SINKS_ALERTMANAGER_URLS`,
...), where their units and defaults are documented; it is configured when a URL is set.
"""

from __future__ import annotations

from datetime import timedelta

from pydantic import BaseModel, ConfigDict, SecretStr, field_validator

from models.paging import PagePolicy
from models.severity import Severity
from respond.sinks.alertmanager.client import AlertmanagerPager, alerts_of
from respond.sinks.ports import Destination

__all__ = ["DESTINATION", "AlertmanagerPager", "AlertmanagerParams", "alerts_of"]


class AlertmanagerParams(BaseModel):
    model_config = ConfigDict(frozen=True, extra="ignore")

    urls: tuple[str, ...] = ()
    bearer_token: SecretStr | None = None
    timeout_s: float = 10.0
    resend_s: float = 60.0
    min_severity: Severity = Severity.INFO

    @field_validator("urls", mode="before")
    @classmethod
    def _split(cls, value: object) -> object:
        return tuple(u.strip() for u in value.split(",") if u.strip()) if isinstance(value, str) else value


def sink(p: AlertmanagerParams) -> AlertmanagerPager | None:
    """The pager when a URL is set, else None."""
    if not p.urls:
        return None
    policy = PagePolicy(min_severity=p.min_severity, resend=timedelta(seconds=p.resend_s))
    return AlertmanagerPager(p.urls, policy, bearer_token=p.bearer_token, timeout_s=p.timeout_s)


DESTINATION = Destination("alertmanager", "pages", AlertmanagerParams, sink)
