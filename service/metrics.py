"""The Prometheus metrics of every xidpipe service, on `prometheus_client`: one registry per service
object (never the library's global one, so a test or a second service in one process counts apart),
names `xidpipe_<service>_<what>`, counters with `_total`, durations in seconds.

`WorkerMetrics`, `ResponderMetrics` and `WebMetrics` are the catalogue of those services' metrics
(the agent's is `agents.metrics`); docs/operations.md lists them, and the chart's dashboard and
alert rules are checked against `exposed_names` of these registries.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, Summary, generate_latest
from prometheus_client.metrics_core import Metric

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

# Seconds from a kernel's fault line to its incident's commit: sub-second when the pipeline keeps up,
# minutes when a node spooled through a Kafka outage, hours for a backfill of old logs.
LATENCY_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0, 900.0, 3600.0, 86400.0)
# Repairs take minutes to days: 5 min, 15 min, 30 min, 1 h, 2 h, 4 h, 8 h, 1 d, 2 d, 7 d.
REPAIR_BUCKETS = (300.0, 900.0, 1800.0, 3600.0, 7200.0, 14400.0, 28800.0, 86400.0, 172800.0, 604800.0)
# Between one node's hardware incidents: 1 h, 6 h, 1 d, 3 d, 7 d, 30 d, 90 d.
BETWEEN_BUCKETS = (3600.0, 21600.0, 86400.0, 259200.0, 604800.0, 2592000.0, 7776000.0)
DURATION_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
SIZE_BUCKETS = (1, 2, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000)


class ServiceMetrics:
    """A registry of one service's metrics, and the helpers that name them `xidpipe_<service>_...`."""

    service = "service"

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)

    def _name(self, what: str) -> str:
        return f"xidpipe_{self.service}_{what}"

    def counter(self, what: str, doc: str, labels: Sequence[str] = ()) -> Counter:
        return Counter(self._name(what), doc, list(labels), registry=self.registry)

    def gauge(self, what: str, doc: str, labels: Sequence[str] = ()) -> Gauge:
        return Gauge(self._name(what), doc, list(labels), registry=self.registry)

    def histogram(self, what: str, doc: str, labels: Sequence[str] = (),
                  buckets: Sequence[float] = DURATION_BUCKETS) -> Histogram:
        return Histogram(self._name(what), doc, list(labels), registry=self.registry, buckets=tuple(buckets))

    def summary(self, what: str, doc: str, labels: Sequence[str] = ()) -> Summary:
        return Summary(self._name(what), doc, list(labels), registry=self.registry)

    def render(self) -> bytes:
        return generate_latest(self.registry)


class WorkerMetrics(ServiceMetrics):
    service = "worker"

    def __init__(self) -> None:
        super().__init__()
        self.consumer_lag = self.gauge(
            "consumer_lag", "Messages not yet committed per input partition: high watermark minus committed offset.",
            ("topic", "partition"))
        self.messages = self.counter("messages_consumed", "Input messages consumed, by topic.", ("topic",))
        self.fault_events = self.counter(
            "fault_events", "New fault reports stored, by the catalog's class (application, hardware, ...).",
            ("class",))
        self.incidents_opened = self.counter(
            "incidents_opened", "Incidents opened (as told on the incidents topic), by component and class.",
            ("component", "class"))
        self.xid_to_incident = self.histogram(
            "xid_to_incident_seconds", "From a fault's kernel event time to the commit of its incident.",
            buckets=LATENCY_BUCKETS)
        self.dead_letters = self.counter(
            "dead_letters", "Input messages sent to a dead-letter topic, by input topic and reason.",
            ("topic", "reason"))
        self.batch_size = self.histogram("batch_messages", "Messages per store transaction.", buckets=SIZE_BUCKETS)
        self.batch_seconds = self.histogram("batch_seconds", "Duration of a batch: decode, parse, store, commit.")
        self.database_errors = self.counter(
            "database_errors", "Store transactions that failed and were retried, by kind.", ("kind",))
        # The distributions fleet-wide; per node (never per card) their count and sum only: a histogram per
        # node held 16 series and about 5 KB for each node of the fleet. A node's pool is a join with its labels.
        self.time_to_resolve = self.histogram(
            "incident_time_to_resolve_seconds", "From a hardware incident's first fault to its resolution, "
            "observed when it resolves.", buckets=REPAIR_BUCKETS)
        self.time_between = self.histogram(
            "incident_time_between_seconds", "From one hardware incident's first fault to the next one's on the "
            "same node, observed when the next one opens.", buckets=BETWEEN_BUCKETS)
        self.time_to_resolve_by_node = self.summary(
            "incident_time_to_resolve_by_node_seconds", "The same as incident_time_to_resolve_seconds, by node: "
            "its count and sum.", ("node",))
        self.time_between_by_node = self.summary(
            "incident_time_between_by_node_seconds", "The same as incident_time_between_seconds, by node: its count "
            "and sum.", ("node",))


class ResponderMetrics(ServiceMetrics):
    service = "responder"

    def __init__(self) -> None:
        super().__init__()
        self.actions = self.counter("actions_consumed", "Action requests consumed, by kind.", ("kind",))
        self.action_lag = self.histogram(
            "action_lag_seconds", "From an action request's publication to its handling.", ("kind",),
            buckets=LATENCY_BUCKETS)
        self.dead_letters = self.counter("dead_letters", "Action requests sent to the dead-letter topic.")
        self.cordons = self.counter(
            "cordons", "Cordon offers by outcome (done, dry_run, noop, refused, blocked, failed, fenced, skipped) and "
            "the decision behind it (cordon, not_needed, breaker_tripped, ...).", ("outcome", "decision"))
        self.cordons_pending = self.gauge(
            "cordons_pending", "Cordons waiting: a retry after a retryable failure, or held by the breaker.",
            ("kind",))
        self.breaker_tripped = self.gauge("breaker_tripped", "1 while the cordon circuit breaker is tripped.")
        self.breaker_trips = self.counter("breaker_trips", "Times the cordon circuit breaker tripped.")
        self.tickets = self.counter(
            "ticket_deliveries", "Ticket sink handlings, by sink (jira, outbox, ...), status (done, pending, "
            "failed) and action (create, comment, reopen, none, ...).",
            ("sink", "status", "action"))
        self.chat = self.counter(
            "chat_deliveries", "Chat messages posted or failed, by sink (web, webhook, outbox, ...) and action "
            "(send, update, failed).", ("sink", "action"))
        self.pages = self.counter(
            "page_deliveries", "Paging sink handlings that sent or failed, by sink (alertmanager, pagerduty, "
            "cloudevents, outbox, ...) and action (sent, failed, dead).", ("sink", "action"))
        self.remediation_loops = self.gauge(
            "remediation_loops", "Remediation loops not finished, by stage (queued, evidence, draining, executing, "
            "validating, returning).", ("stage",))
        self.remediation_transitions = self.counter(
            "remediation_transitions", "Remediation loop transitions this responder wrote, by the stage entered.",
            ("stage",))
        self.remediation_outcomes = self.counter(
            "remediation_outcomes", "Remediation loops finished, by outcome (returned, rma, manual, cancelled, "
            "dry_run).", ("outcome",))
        self.remediation_overdue = self.gauge(
            "remediation_overdue", "Remediation loops not finished past their deadline (stuck).")
        self.remediation_mttr = self.histogram(
            "remediation_mttr_seconds", "Time to repair: from an incident's first fault to its node's return to "
            "service after validation.", buckets=REPAIR_BUCKETS)
        self.node_mttr = self.gauge("node_mttr_seconds", "Mean time to repair per node (returned loops, 90 days).",
                                    ("node",))
        self.card_mttr = self.gauge("card_mttr_seconds", "Mean time to repair per GPU card (ledger key, 90 days).",
                                    ("card",))
        self.node_mtbi = self.gauge("node_mtbi_seconds", "Mean time between incidents per node (90 days).",
                                    ("node",))
        self.card_mtbi = self.gauge("card_mtbi_seconds", "Mean time between incidents per GPU card (90 days).",
                                    ("card",))


class WebMetrics(ServiceMetrics):
    service = "web"

    def __init__(self) -> None:
        super().__init__()
        self.requests = self.counter("requests", "HTTP requests, by route name, method and status.",
                                     ("route", "method", "status"))
        self.request_seconds = self.histogram("request_seconds", "HTTP request duration, by route name.",
                                              ("route",))


def counted(counter: Counter, **labels: str) -> float:
    """The sum of `counter`'s series whose labels include `labels` (every series when none are given)."""
    return sum(sample.value for family in counter.collect() for sample in family.samples
               if sample.name.endswith("_total") and all(sample.labels.get(k) == v for k, v in labels.items()))


def _sample_names(family: Metric) -> Iterable[str]:
    if family.type == "counter":
        return (f"{family.name}_total",)
    if family.type == "histogram":
        return (f"{family.name}_bucket", f"{family.name}_count", f"{family.name}_sum")
    if family.type == "summary":
        return (family.name, f"{family.name}_count", f"{family.name}_sum")
    return (family.name,)


def exposed_names(registry: CollectorRegistry) -> set[str]:
    """Every sample name the registry can expose, labelled series included before their first value."""
    return {name for family in registry.collect() for name in _sample_names(family)}
