"""Settings of the sinks (`service.config`: `XIDPIPE_SINKS_<NAME>`, nested with `__`:
`XIDPIPE_SINKS_TICKET_POLICY__PROJECT=OPS`): the responder's `sinks` section
(`respond.settings.RespondSettings`, whose database holds the ticket map, notification log and
silences), and what `xidpipe replay` reads.

Every configured destination is a sink; with no tracker configured, tickets go to the file outbox,
with no chat destination, messages do. Pages go to every configured paging destination
(Alertmanager, PagerDuty, a CloudEvents webhook). The fields `<destination>_<param>` (`jira_url`,
`slack_bot_token`, `outbox_dir`, ...) are the params of the destinations registered in
`respond.sinks.registry`; a destination without fields here takes its params from `destinations`
(`XIDPIPE_SINKS_DESTINATIONS__PAGERDUTY__ROUTING_KEY=...`). The policies (ticket policy, routing,
grouping, retries) apply to every sink of their kind.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import Field, SecretStr
from pydantic_settings import SettingsConfigDict

from models.chat_message import Routing
from models.dossier import JiraFlavor
from models.severity import Severity
from models.ticket_policy import TicketPolicy
from service.config import XidpipeSettings

DEFAULT_OWNER_KEYS = ("team", "owner", "app.kubernetes.io/part-of")


class SinkSettings(XidpipeSettings):
    model_config = SettingsConfigDict(env_prefix="XIDPIPE_SINKS_")
    service = "sinks"

    outbox_dir: Path = Field(default=Path("var/outbox"), description="where tickets and messages go when no Jira "
                             "or Slack is configured")

    jira_url: str | None = Field(default=None, description="Jira base URL, e.g. https://jira.example.com")
    jira_user: str | None = Field(default=None, description="Jira user (Cloud: the account's e-mail)")
    jira_api_token: SecretStr | None = Field(default=None, description="Jira API token or password")
    jira_timeout_s: float = Field(default=10.0, gt=0, description="per request; the library's default is none")
    jira_flavor: JiraFlavor = Field(
        default="server", description="server: Jira Server / Data Center, REST API v2, bodies in wiki markup; "
        "cloud: Jira Cloud, REST API v3, bodies in the Atlassian Document Format")
    incident_url_base: str | None = Field(
        default=None, description="base URL of `xidpipe serve` (e.g. https://xidpipe.example.com): every ticket and "
        "message links the incident's page <base>/incidents/<id>; unset: no link")
    owner_keys: tuple[str, ...] = Field(
        default=DEFAULT_OWNER_KEYS, description="pod labels or annotations naming the workload's owning team, the "
        "first present wins (read from the cluster when one is configured)")
    ticket_policy: TicketPolicy = Field(default_factory=TicketPolicy)
    ticket_attempts: int = Field(default=3, ge=1, description="tries per notice before it waits in the queue")
    ticket_retry_base_s: float = Field(default=1.0, gt=0, description="first in-place backoff; doubles per try")
    ticket_retry_max_wait_s: float = Field(default=30.0, ge=0, description="longest Retry-After waited in place")
    ticket_queue_base_s: float = Field(default=30.0, gt=0, description="first delay of a queued retry; doubles")
    ticket_queue_max_s: float = Field(default=900.0, gt=0, description="longest delay of a queued retry (15 min)")
    ticket_index_settle_s: float = Field(default=60.0, gt=0, description="after a create timed out, wait this long "
                                         "for Jira's search index before looking for the ticket it may have made")
    ticket_drain_interval_s: float = Field(default=10.0, gt=0, description="how often the queue is drained")

    slack_bot_token: SecretStr | None = Field(default=None, description="bot token (xoxb-...): threads and edits")
    slack_base_url: str = Field(default="https://slack.com/api/", description="Web API base URL")
    slack_webhooks: dict[str, SecretStr] = Field(
        default_factory=dict, description="channel → incoming webhook URL ('*': any channel), used without a bot token")
    slack_timeout_s: int = Field(default=10, gt=0, description="per request")
    slack_rate_limit_retries: int = Field(default=3, ge=0, description="429 retries inside slack-sdk (Retry-After)")
    slack_server_error_retries: int = Field(default=2, ge=0, description="5xx retries inside slack-sdk")
    slack_channel_interval_s: float = Field(default=1.0, ge=0, description="pacing: Slack allows ~1 message/s "
                                            "per channel")
    routing: Routing = Field(default_factory=Routing)
    group_by: tuple[str, ...] = Field(default=("node", "family"), description="labels that make a group")
    group_wait_s: float = Field(default=30.0, ge=0, description="a new group waits this long for its other alerts")
    group_interval_s: float = Field(default=300.0, ge=0, description="a changed group is re-sent no sooner")
    repeat_interval_s: float = Field(default=4 * 3600.0, ge=0, description="an unchanged firing group is repeated")
    chat_retry_base_s: float = Field(default=30.0, gt=0, description="first delay after a failed send; doubles")
    chat_retry_max_s: float = Field(default=900.0, gt=0, description="longest delay after failed sends")
    chat_retention_s: float = Field(default=86400.0, gt=0, description="a group all resolved and told so is "
                                    "forgotten after this long (a recurrence continues its thread)")
    chat_flush_interval_s: float = Field(default=5.0, gt=0, description="how often groups are decided again")
    alertmanager_urls: tuple[str, ...] = Field(
        default=(), description="Alertmanager base URLs (e.g. http://alertmanager:9093), every instance of its "
        "cluster; set: every open incident is an alert there")
    alertmanager_bearer_token: SecretStr | None = Field(default=None, description="sent as `Authorization: "
                                                        "Bearer` when set (an Alertmanager behind a proxy)")
    alertmanager_timeout_s: float = Field(default=10.0, gt=0, description="per request")
    alertmanager_resend_s: float = Field(
        default=60.0, gt=0, description="a firing alert is sent again this often: keep it well below "
        "Alertmanager's resolve_timeout (5 min by default), after which it resolves an alert it stopped hearing of")
    alertmanager_min_severity: Severity = Field(
        default=Severity.INFO, description="incidents less urgent than this are not sent (models/severity.py)")
    pagerduty_routing_key: SecretStr | None = Field(
        default=None, description="the Events API v2 integration key of a PagerDuty service (32 characters); set: "
        "incidents are alerts there")
    pagerduty_url: str = Field(default="https://events.pagerduty.com", description="Events API base URL "
                               "(https://events.eu.pagerduty.com for an EU account)")
    pagerduty_timeout_s: float = Field(default=10.0, gt=0, description="per request")
    pagerduty_min_severity: Severity = Field(
        default=Severity.ERROR, description="incidents less urgent than this are not sent: PagerDuty wakes people")
    cloudevents_url: str | None = Field(default=None, description="webhook URL that takes CloudEvents 1.0 "
                                        "(structured mode, HTTP POST); set: every incident event is sent there")
    cloudevents_source: str = Field(default="/xidpipe", description="the events' `source` (a URI reference); "
                                    "give each cluster its own so `source` + `id` stays unique")
    cloudevents_dataschema: str | None = Field(default=None, description="the events' `dataschema` URI, where "
                                               "you publish respond/sinks/cloudevents/data.schema.json")
    cloudevents_secret: SecretStr | None = Field(default=None, description="HMAC-SHA256 key: each request is "
                                                 "signed (X-Xidpipe-Timestamp, X-Xidpipe-Signature)")
    cloudevents_bearer_token: SecretStr | None = Field(default=None, description="sent as `Authorization: "
                                                       "Bearer` when set")
    cloudevents_timeout_s: float = Field(default=10.0, gt=0, description="per request")
    cloudevents_min_severity: Severity = Field(default=Severity.INFO, description="incidents less urgent than "
                                               "this are not sent")
    page_retry_base_s: float = Field(default=30.0, gt=0, description="first delay after a failed page; doubles")
    page_retry_max_s: float = Field(default=900.0, gt=0, description="longest delay after failed pages (15 min)")
    page_drain_interval_s: float = Field(default=5.0, gt=0, description="how often retries and resends are due")
    destinations: dict[str, dict[str, Any]] = Field(
        default_factory=dict, repr=False, description="params of registered destinations by name, validated by "
        "the destination's params class (where secrets are SecretStr); not shown in the settings' repr")

    def params_for(self, name: str) -> dict[str, Any]:
        """A destination's params: the fields `<name>_<param>`, then its entry in `destinations`."""
        cut = len(name) + 1
        fields = {f[cut:]: getattr(self, f) for f in type(self).model_fields if f.startswith(f"{name}_")}
        return {**fields, **self.destinations.get(name, {})}
