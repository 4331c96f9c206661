"""A CloudEvents webhook, for pages: every paging event of an incident as a CloudEvent 1.0
(`events`: structured mode, the SDK's), signed with HMAC-SHA256 or sent with a bearer token.

Its params are the `cloudevents_*` fields of `SinkSettings` (`XIDPIPE_SINKS_CLOUDEVENTS_URL`, ...),
where their units and defaults are documented; it is configured when a URL is set.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, SecretStr

from models.paging import PagePolicy
from models.severity import Severity
from respond.sinks.cloudevents.events import TYPES, CloudEventsPager, cloud_event, data_of, schema
from respond.sinks.ports import Destination

__all__ = ["DESTINATION", "TYPES", "CloudEventsPager", "CloudEventsParams", "cloud_event", "data_of", "schema"]


class CloudEventsParams(BaseModel):
    model_config = ConfigDict(frozen=True, extra="ignore")

    url: str | None = None
    source: str = "/xidpipe"
    dataschema: str | None = None
    secret: SecretStr | None = None
    bearer_token: SecretStr | None = None
    timeout_s: float = 10.0
    min_severity: Severity = Severity.INFO


def sink(p: CloudEventsParams) -> CloudEventsPager | None:
    """The pager when a URL is set, else None."""
    if not p.url:
        return None
    return CloudEventsPager(p.url, PagePolicy(min_severity=p.min_severity), source=p.source, dataschema=p.dataschema,
                            secret=p.secret, bearer_token=p.bearer_token, timeout_s=p.timeout_s)


DESTINATION = Destination("cloudevents", "pages", CloudEventsParams, sink)
