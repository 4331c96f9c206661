"""Real Kafka and PostgreSQL for the tests, one of each per test session (the kube-apiserver: ``tests.kube``).

Fixtures
--------
``kafka_bootstrap`` (session, ``str``)
    ``"127.0.0.1:PORT"`` of a single-node Apache Kafka 4.0.2 broker started from the cached Maven
    jars (``xidpipe dev kafka fetch``), or the value of ``XIDPIPE_TEST_KAFKA`` when set (an
    external broker; nothing is started). Auto-created topics get 1 partition.
``kafka_topic_factory`` (function, ``(hint="", partitions=1) -> str``)
    Creates a topic with a unique name (``t-<hint>-<random>``), waits until every partition has
    a leader, returns its name; deletes the test's topics afterwards.
``secured_kafka`` (session, ``SecuredKafka``)
    A second local broker with authentication and authorisation on: a SASL_SSL listener (SCRAM-SHA-512
    over TLS with a throwaway CA), the SCRAM users ``agent``, ``worker`` and ``responder``, the
    StandardAuthorizer and no ACL until ``grant_pipeline(prefix, worker_group, responder_group)`` gives
    each user the grants of ``xidpipe.localinfra.kafka_security.pipeline_grants``.
    ``security(user)`` is that user's ``KafkaClientSecurity``. Always local (no external override).
``postgres_url`` (session, ``str``)
    SQLAlchemy URL ``postgresql+psycopg://xidpipe@127.0.0.1:PORT/xidpipe`` of a throwaway cluster,
    or ``XIDPIPE_TEST_DATABASE_URL`` when set. Tests share it: use unique table names, or:
``postgres_database`` (function, ``str``)
    SQLAlchemy URL of a new, empty database on that server, dropped after the test (needs the
    CREATEDB privilege on an external server).

A test that uses a Kafka fixture gets the ``kafka`` marker, one that uses a PostgreSQL fixture the
``postgres`` marker, one that uses the kube-apiserver of ``tests.kube`` or the cluster of
``tests.cluster`` the ``k8s`` marker, one that uses the Alertmanager of ``tests.alerting`` the
``alertmanager`` marker, so ``-m "not kafka"`` deselects them.

When a service cannot be started (no java, no jars, no initdb, a broker that does not come up),
its tests are skipped with the reason, except under ``CI=true``, where they fail: CI must never
pass by skipping.
"""

from __future__ import annotations

import contextlib
import os
import re
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, NoReturn

import pytest

from models.kafka_security import KafkaClientSecurity
from xidpipe.localinfra.kafka import LocalKafka
from xidpipe.localinfra.kafka_security import pipeline_grants
from xidpipe.localinfra.postgres import LocalPostgres
from xidpipe.localinfra.process import LocalInfraError

KAFKA_ENV = "XIDPIPE_TEST_KAFKA"
DATABASE_ENV = "XIDPIPE_TEST_DATABASE_URL"
KAFKA_FIXTURES = frozenset({"kafka_bootstrap", "kafka_topic_factory", "secured_kafka"})
POSTGRES_FIXTURES = frozenset({"postgres_url", "postgres_database"})
KUBE_FIXTURES = frozenset({"control_plane", "cluster"})  # every fixture of tests.kube / tests.cluster needs one
ALERTMANAGER_FIXTURES = frozenset({"alertmanager"})

# Start-up times of this session's services, printed in the terminal summary.
_timings: dict[str, str] = {}


def in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() in {"true", "1", "yes"}


def service_unavailable(service: str, reason: str) -> NoReturn:
    """Under CI=true a service the tests need is required: fail. Elsewhere skip, saying why."""
    if in_ci():
        pytest.fail(f"{service} unavailable under CI=true: {reason}", pytrace=False)
    pytest.skip(f"{service} unavailable: {reason}")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        names = set(getattr(item, "fixturenames", ()))
        if names & KAFKA_FIXTURES:
            item.add_marker(pytest.mark.kafka)
        if names & POSTGRES_FIXTURES:
            item.add_marker(pytest.mark.postgres)
        if names & KUBE_FIXTURES:
            item.add_marker(pytest.mark.k8s)
        if names & ALERTMANAGER_FIXTURES:
            item.add_marker(pytest.mark.alertmanager)


def pytest_terminal_summary(terminalreporter: Any) -> None:
    for service, line in sorted(_timings.items()):
        terminalreporter.write_line(f"{service}: {line}")


# -- Kafka ----------------------------------------------------------------------------------------
@pytest.fixture(scope="session")
def kafka_bootstrap() -> Iterator[str]:
    external = os.environ.get(KAFKA_ENV, "").strip()
    if external:
        problem = _kafka_problem(external, timeout_s=15.0)
        if problem:
            service_unavailable("Kafka", f"{KAFKA_ENV}={external} does not answer: {problem}")
        _timings["kafka"] = f"external broker {external}"
        yield external
        return
    with _running(LocalKafka(num_partitions=1), "Kafka", "kafka", "Kafka") as broker:
        yield broker.bootstrap


@pytest.fixture
def kafka_topic_factory(kafka_bootstrap: str, request: pytest.FixtureRequest) -> Iterator[Callable[..., str]]:
    from kafka import KafkaAdminClient

    admin = KafkaAdminClient(bootstrap_servers=kafka_bootstrap, client_id="xidpipe-tests")
    created: list[str] = []
    test_name = re.sub(r"[^A-Za-z0-9]+", "-", request.node.name).strip("-")[:60]

    def create(hint: str = "", partitions: int = 1) -> str:
        label = re.sub(r"[^A-Za-z0-9._-]+", "-", hint or test_name)[:80]
        name = f"t-{label}-{uuid.uuid4().hex[:10]}"
        admin.create_topics({name: {"num_partitions": partitions, "replication_factor": 1}})
        created.append(name)
        admin.wait_for_topics([name], timeout_ms=15_000)  # a leader for every partition
        return name

    try:
        yield create
    finally:
        if created:
            try:
                admin.delete_topics(created)
            except Exception as exc:  # the broker may be gone; the topics go with it
                print(f"could not delete test topics {created}: {exc}")
        admin.close()


SECURED_USERS = ("agent", "worker", "responder")


@dataclass
class SecuredKafka:
    broker: LocalKafka
    passwords: dict[str, str]
    granted: set[str] = field(default_factory=set)

    @property
    def bootstrap(self) -> str:
        return self.broker.bootstrap

    def security(self, user: str, password: str | None = None) -> KafkaClientSecurity:
        return KafkaClientSecurity(
            security_protocol="SASL_SSL", sasl_mechanism="SCRAM-SHA-512", sasl_username=user,
            sasl_password=password if password is not None else self.passwords[user],  # type: ignore[arg-type]
            ssl_cafile=self.broker.ca_file,
        )

    def grant_pipeline(self, topic_prefix: str, worker_group: str, responder_group: str = "xidpipe-responder") -> None:
        """The pipeline's ACLs for topics named with `topic_prefix` (once per prefix)."""
        if topic_prefix in self.granted:
            return
        self.broker.grant(pipeline_grants(topic_prefix=topic_prefix, worker_group=worker_group,
                                          responder_group=responder_group))
        self.granted.add(topic_prefix)


@pytest.fixture(scope="session")
def secured_kafka() -> Iterator[SecuredKafka]:
    passwords = {user: f"{user}-{uuid.uuid4().hex}" for user in SECURED_USERS}
    with _running(LocalKafka(num_partitions=1, scram_users=passwords, tls=True), "Kafka (SASL_SSL with ACLs)",
                  "kafka-secured", "SASL_SSL Kafka") as broker:
        yield SecuredKafka(broker, passwords)


@contextlib.contextmanager
def _running(broker: LocalKafka, service: str, timing: str, label: str) -> Iterator[LocalKafka]:
    """`broker` started (or the service reported unavailable), its start-up times noted, stopped after."""
    try:
        broker.start()
    except LocalInfraError as exc:
        service_unavailable(service, str(exc))
    _timings[timing] = (f"local {label} at {broker.bootstrap}: storage formatted in {broker.format_seconds:.1f} s, "
                        f"broker ready {broker.ready_seconds:.1f} s after launch")
    try:
        yield broker
    finally:
        broker.stop()


def _kafka_problem(bootstrap: str, timeout_s: float) -> str:
    """Why the broker at `bootstrap` cannot serve the tests, or '' when it can."""
    from kafka import KafkaAdminClient

    deadline = time.monotonic() + timeout_s
    problem = ""
    while time.monotonic() < deadline:
        try:
            admin = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=3000)
            try:
                admin.describe_cluster()
            finally:
                admin.close()
            return ""
        except Exception as exc:
            problem = f"{type(exc).__name__}: {exc}"
        time.sleep(0.5)
    return problem or "no answer"


# -- PostgreSQL -----------------------------------------------------------------------------------
@pytest.fixture(scope="session")
def postgres_url() -> Iterator[str]:
    external = os.environ.get(DATABASE_ENV, "").strip()
    if external:
        problem = _postgres_problem(external)
        if problem:
            service_unavailable("PostgreSQL", f"{DATABASE_ENV} does not answer: {problem}")
        _timings["postgres"] = "external server"
        yield external
        return
    cluster = LocalPostgres()
    try:
        cluster.start()
    except LocalInfraError as exc:
        service_unavailable("PostgreSQL", str(exc))
    _timings["postgres"] = (
        f"local PostgreSQL at {cluster.url}: initdb {cluster.initdb_seconds:.1f} s, "
        f"server ready {cluster.ready_seconds:.1f} s later"
    )
    try:
        yield cluster.url
    finally:
        cluster.stop()


@pytest.fixture
def postgres_database(postgres_url: str) -> Iterator[str]:
    with fresh_postgres_database(postgres_url) as url:
        yield url


@contextlib.contextmanager
def fresh_postgres_database(postgres_url: str) -> Iterator[str]:
    """A new, empty database on the test server (its URL), dropped afterwards."""
    import sqlalchemy as sa

    name = f"t_{uuid.uuid4().hex[:16]}"
    admin = sa.create_engine(postgres_url, isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as conn:
            conn.execute(sa.text(f'CREATE DATABASE "{name}"'))
        yield sa.make_url(postgres_url).set(database=name).render_as_string(hide_password=False)
        with admin.connect() as conn:
            conn.execute(sa.text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    finally:
        admin.dispose()


def _postgres_problem(url: str) -> str:
    import sqlalchemy as sa

    engine = sa.create_engine(url, connect_args={"connect_timeout": 10})
    try:
        with engine.connect() as conn:
            conn.execute(sa.text("SELECT 1"))
    except Exception as exc:
        return f"{type(exc).__name__}: {exc}"
    finally:
        engine.dispose()
    return ""
