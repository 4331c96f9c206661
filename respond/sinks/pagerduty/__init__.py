"""PagerDuty, for pages: the Events API v2, one alert per incident (`events`), triggered, told its
steps and resolved; PagerDuty's own service rules route, escalate and notify.

Its params are the `pagerduty_*` fields of `SinkSettings` (`XIDPIPE_SINKS_PAGERDUTY_ROUTING_KEY`,
...), where their units and defaults are documented; it is configured when a routing key is set.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, SecretStr

from models.paging import PagePolicy
from models.severity import Severity
from respond.sinks.pagerduty.events import DEFAULT_URL, PagerDutyPager, pd_event
from respond.sinks.ports import Destination

__all__ = ["DESTINATION", "PagerDutyPager", "PagerDutyParams", "pd_event"]


class PagerDutyParams(BaseModel):
    model_config = ConfigDict(frozen=True, extra="ignore")

    routing_key: SecretStr | None = None
    url: str = DEFAULT_URL
    timeout_s: float = 10.0
    min_severity: Severity = Severity.ERROR


def sink(p: PagerDutyParams) -> PagerDutyPager | None:
    """The pager when a routing key is set, else None."""
    if p.routing_key is None:
        return None
    return PagerDutyPager(p.routing_key, PagePolicy(min_severity=p.min_severity), url=p.url, timeout_s=p.timeout_s)


DESTINATION = Destination("pagerduty", "pages", PagerDutyParams, sink)
