"""A new health signal and a new sink each take one registration per layer, and nothing else.

The signal: a sensor registered in `agents.signals` publishes its own record kind through the real
agent (spool, topic, key); the record kind and its mapping, registered in `models.signals`, carry it
through the stream's decoding, its item mapper and the store, where it opens an incident. The sink:
a chat destination registered in `respond.sinks.registry` is what `build_sinks` sends notices through.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, ClassVar, Literal

import pytest
from pydantic import BaseModel, SecretStr

from agents import signals as agent_signals
from agents.main import build_agent
from agents.settings import AgentSettings
from history.engine import make_engine
from history.migrate import upgrade
from models import signals as model_signals
from models.incidents import FaultObservation
from models.node_records import NVML_TOPIC, NodeRecordBase
from models.topics import topology
from respond.sinks import registry
from respond.sinks.build import build_sinks
from respond.sinks.ports import Destination, Posted
from respond.sinks.settings import SinkSettings
from streams.decode import DeadLetter, decode_message
from streams.items import FaultItem, ItemMapper
from streams.store import Store
from tests.respond.sinks.conftest import Clock, make_notice

T0 = datetime(2026, 11, 27, 3, 0, tzinfo=UTC)
NODE = "gpu-node-07"

# --- the signal: a record, its mapping, its sensor ---------------------------------------------


class ThermalSlowdown(NodeRecordBase):
    kind: Literal["test_thermal_slowdown"] = "test_thermal_slowdown"
    gpu_uuid: str
    temperature_c: int
    observed_at: datetime


def observe(rec: ThermalSlowdown) -> Sequence[FaultObservation]:
    return [FaultObservation(
        node=rec.node, source="nvml", record_id=rec.record_id, occurred_at=rec.observed_at, kind="thermal_slowdown",
        family="thermal", message=f"clocks slowed down at {rec.temperature_c} C", raw=rec.model_dump_json(),
        gpu_uuid=rec.gpu_uuid, category="thermal",
    )]


SIGNAL = model_signals.Signal(ThermalSlowdown, NVML_TOPIC, observe)


class ThermalSensor:
    built: ClassVar[list[ThermalSensor]] = []

    def __init__(self, node: str, publish: Any) -> None:
        self.node, self.publish = node, publish
        ThermalSensor.built.append(self)

    def start(self, stop: threading.Event) -> None:
        self.publish(ThermalSlowdown(node=self.node, record_id=f"thermal:{self.node}:1", gpu_uuid="GPU-7f00",
                                     temperature_c=91, observed_at=T0))

    def close(self) -> None:
        pass


SENSOR = agent_signals.SensorSpec("test_thermal", lambda ctx: ThermalSensor(ctx.node, ctx.publish))


@pytest.fixture
def thermal_signal() -> Iterator[None]:
    ThermalSensor.built.clear()
    model_signals.register(SIGNAL)
    agent_signals.register(SENSOR)
    yield
    agent_signals.unregister(SENSOR.name)
    model_signals.unregister(SIGNAL.kind)


def test_a_registered_signal_travels_from_its_sensor_to_an_incident(thermal_signal: None, tmp_path: Path) -> None:
    settings = AgentSettings(node=NODE, state_dir=tmp_path / "state", nvml_enabled=False,
                             podresources_enabled=False, evidence_enabled=False, metrics_port=None)
    agent = build_agent(settings)
    try:
        [sensor] = ThermalSensor.built
        sensor.start(agent.stop_event)
        [entry] = agent.spool.pending_entries()
    finally:
        agent.stop()
    assert (entry.topic, entry.key, entry.fault) == (NVML_TOPIC, NODE, True)

    kinds = topology().kinds_for(entry.topic)
    assert SIGNAL.kind in kinds
    record = decode_message(topic=entry.topic, partition=0, offset=0, key=entry.key.encode(),
                            value=entry.value.encode(), kinds=kinds)
    assert not isinstance(record, DeadLetter), record
    items = ItemMapper().items(record, entry.topic)
    assert [type(i) for i in items] == [FaultItem]

    store = Store(f"sqlite:///{tmp_path / 'x.db'}")
    store.create_schema()
    try:
        result = store.process(items)
    finally:
        store.dispose()
    [incident] = [o.payload for o in result.outgoing if o.stream == "incidents"]
    assert incident["change"] == "opened"
    assert (incident["incident"]["node"], incident["incident"]["family"]) == (NODE, "thermal")


def test_without_its_registration_the_record_is_a_dead_letter() -> None:
    value = ThermalSlowdown(node=NODE, record_id="r1", gpu_uuid="GPU-1", temperature_c=90, observed_at=T0)
    dead = decode_message(topic=NVML_TOPIC, partition=0, offset=0, key=NODE.encode(),
                          value=value.model_dump_json().encode(), kinds=topology().kinds_for(NVML_TOPIC))
    assert isinstance(dead, DeadLetter) and dead.reason == "invalid"


# --- the sink: params, a sink class, one registration ------------------------------------------


class PagerParams(BaseModel):
    routing_key: SecretStr | None = None


class PagerSink:
    name = "pager"
    threads = False

    def __init__(self, params: PagerParams) -> None:
        self.params = params
        self.posted: list[tuple[str, dict[str, Any]]] = []

    def post(self, channel: str, message: dict[str, Any], key: str, thread_ts: str | None = None) -> Posted:
        self.posted.append((channel, message))
        return Posted(channel, None)

    def update(self, channel: str, ts: str, message: dict[str, Any], key: str) -> None:
        raise AssertionError("a sink without threads is never asked to edit")

    def find(self, channel: str, key: str, thread_ts: str | None = None) -> Posted | None:
        return None


def pager_sink(params: PagerParams) -> PagerSink | None:
    return PagerSink(params) if params.routing_key else None


PAGER = Destination("pager", "chat", PagerParams, pager_sink)


@pytest.fixture
def pager() -> Iterator[None]:
    registry.register(PAGER)
    yield
    registry.unregister("chat", "pager")


def _settings(tmp_path: Path, **kw: Any) -> SinkSettings:
    url = f"sqlite:///{tmp_path}/sinks.db"
    engine = make_engine(url)
    try:
        upgrade(engine)
    finally:
        engine.dispose()
    return SinkSettings(database_url=url, outbox_dir=tmp_path / "outbox", group_wait_s=0, **kw)


def test_a_registered_sink_receives_the_notices(pager: None, tmp_path: Path) -> None:
    settings = _settings(tmp_path, destinations={"pager": {"routing_key": "R0UT1NG-key"}})
    assert "R0UT1NG-key" not in repr(settings)
    sinks = build_sinks(settings)
    try:
        transport = sinks.chat.transport
        assert isinstance(transport, PagerSink)
        assert transport.params.routing_key is not None
        assert transport.params.routing_key.get_secret_value() == "R0UT1NG-key"
        sinks.chat.clock = Clock()
        notice = make_notice()
        sinks.chat.submit(notice)
        sinks.chat.flush()
        [(channel, message)] = transport.posted
        assert channel == "#gpu-infra" and notice.dossier.node in message["text"]
        assert not (tmp_path / "outbox" / "slack").exists()
    finally:
        sinks.store.engine.dispose()


def test_an_unconfigured_sink_leaves_the_outbox_in_place(pager: None, tmp_path: Path) -> None:
    sinks = build_sinks(_settings(tmp_path))
    try:
        assert sinks.chat.transport.name == "outbox"
    finally:
        sinks.store.engine.dispose()


def test_settings_for_a_destination_nobody_registered_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="pager"):
        build_sinks(_settings(tmp_path, destinations={"pager": {"routing_key": "x"}}))
