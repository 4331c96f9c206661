"""Fixtures for the sink tests: the Jira and Slack stand-ins, a SQL store, incidents."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from pydantic import SecretStr

from history.engine import make_engine
from history.migrate import upgrade
from models.dossier import Attribution, CodeInfo, Dossier, DossierGpu, EvidenceItem
from respond.sinks.jira.tracker import JiraTracker
from respond.sinks.model import IncidentNotice
from respond.sinks.sink_store import SinkStore
from respond.sinks.tickets import RetryPolicy, TicketSink
from tests.fakes.jira.server import FakeJira
from tests.fakes.slack.server import FakeSlack

T0 = datetime(2026, 11, 27, 3, 0, tzinfo=UTC)
JIRA_TOKEN = "jira-api-token-Zk82hd7QpL0x"
SLACK_TOKEN = "xoxb-1111-2222-aBcDeFgHiJkLmNoP"
POD_SECRET = "hunter2-pod-db-password"
FAST_RETRY = RetryPolicy(attempts=3, base_s=0.05, max_wait_s=2.0, queue_base_s=30.0, queue_max_s=300.0)


def migrated(url: str) -> str:
    """`url`, its database migrated to the newest schema (as the responder and the CLI do)."""
    engine = make_engine(url)
    try:
        upgrade(engine)
    finally:
        engine.dispose()
    return url


def open_store(url: str) -> SinkStore:
    """A store over `url`, its database migrated to the newest schema."""
    engine = make_engine(url)
    upgrade(engine)
    return SinkStore(engine)


class Clock:
    def __init__(self, at: datetime = T0) -> None:
        self.now = at

    def __call__(self) -> datetime:
        return self.now

    def advance(self, **kw: float) -> datetime:
        self.now += timedelta(**kw)
        return self.now


def make_notice(node: str = "gpu-node-03", *, count: int = 1, category: str = "hardware", family: str = "gpu_lost",
                status: str = "open", incident: str | None = None, fp: str = "v1:3f2a9c0d11223344",
                evidence: tuple[str, ...] = ("nvidia-smi -q",), namespace: str = "team-vision",
                previous: str | None = None, last_seen: datetime | None = None, pool: str = "h100-train",
                codes: tuple[str, ...] = ("Xid 79",)) -> IncidentNotice:
    incident = incident or f"{fp}@20261127T030000.000000Z"
    items = [EvidenceItem(name=name, source="node", captured_at=T0,
                          content=f"{name} output\nDB_PASSWORD={POD_SECRET}\nAuthorization: Bearer {SLACK_TOKEN}\n")
             for name in evidence]
    d = Dossier(
        incident_id=incident, fingerprint=fp, cluster="train-a", node=node, family=family, category=category,
        reason="GPU has fallen off the bus", status=status, count=count, first_seen=T0,
        last_seen=last_seen or T0 + timedelta(seconds=count), catalog_version="r570",
        codes=[CodeInfo(code=c, count=count, mnemonic="GPU_LOST") for c in codes], driver_version="570.124.06",
        gpu=DossierGpu(index=2, model="NVIDIA H100 80GB HBM3", uuid="GPU-6a1e", serial="1654922001234",
                       pci="0000:3b:00.0"),
        attribution=Attribution(pod="trainer-0", namespace=namespace, process="python", pid=4242),
        evidence=items,
    )
    return IncidentNotice(dossier=d, node_pool=pool, previous_incident_id=previous)


@pytest.fixture(autouse=True)
def no_threads_left() -> Iterator[None]:
    """Every stand-in and client thread a test started has ended when it is over."""
    import threading
    import time

    before = set(threading.enumerate())
    yield
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and set(threading.enumerate()) - before:
        time.sleep(0.02)
    assert not set(threading.enumerate()) - before


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def store(tmp_path: Path) -> SinkStore:
    return open_store(f"sqlite:///{tmp_path}/sinks.db")


@pytest.fixture
def fake_jira() -> Iterator[FakeJira]:
    fake = FakeJira(token=JIRA_TOKEN).start()
    yield fake
    fake.stop()


@pytest.fixture
def fake_slack() -> Iterator[FakeSlack]:
    fake = FakeSlack(token=SLACK_TOKEN).start()
    yield fake
    fake.stop()


@pytest.fixture
def jira(fake_jira: FakeJira) -> JiraTracker:
    return JiraTracker(fake_jira.url, fake_jira.user, SecretStr(JIRA_TOKEN), timeout_s=1.0)


@pytest.fixture
def ticket_sink(jira: JiraTracker, store: SinkStore, clock: Clock) -> TicketSink:
    return TicketSink(jira, store, retry=FAST_RETRY, clock=clock)
