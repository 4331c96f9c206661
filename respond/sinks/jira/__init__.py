"""Jira, for tickets: Server and Data Center (REST API v2, wiki markup) or Cloud (REST API v3, the
Atlassian Document Format), through `tracker.JiraTracker` on the `jira` library.

Its params are the `jira_*` fields of `SinkSettings` (`XIDPIPE_SINKS_JIRA_URL`, ...), where their
units and defaults are documented; it is configured when the URL, the user and the token are set.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, SecretStr

from models.dossier import JiraFlavor
from respond.sinks.jira.tracker import JiraTracker
from respond.sinks.ports import Destination

__all__ = ["DESTINATION", "JiraParams", "JiraTracker"]


class JiraParams(BaseModel):
    model_config = ConfigDict(frozen=True, extra="ignore")

    url: str | None = None
    user: str | None = None
    api_token: SecretStr | None = None
    timeout_s: float = 10.0  # per request (the settings' default, for a Jira configured in `destinations`)
    flavor: JiraFlavor = "server"


def sink(p: JiraParams) -> JiraTracker | None:
    if not (p.url and p.user and p.api_token):
        return None
    return JiraTracker(p.url, p.user, p.api_token, timeout_s=p.timeout_s, flavor=p.flavor)


DESTINATION = Destination("jira", "tickets", JiraParams, sink)
