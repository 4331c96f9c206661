"""A new health signal takes its model folder, its agent folder and one registration on each side.

A sensor registered in `agents.signals` publishes its own record kind through the real agent (spool,
topic, key); the record kind and its mapping, registered in `models.signals`, carry it through the
stream's decoding, its item mapper and the store, where it opens an incident.
"""

from __future__ import annotations

import dataclasses
import re
import sys
import textwrap
import threading
import types
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, ClassVar, Literal

import pytest

from agents import signals as agent_signals
from agents.main import build_agent
from agents.nvml_calls import NvmlCaller
from agents.runtime import Agent
from agents.settings import AgentSettings
from models import signals as model_signals
from models.dead_letter import DeadLetter
from models.incidents import FaultObservation
from models.node_records import NVML_TOPIC, NodeRecordBase
from models.topics import topology
from streams.decode import decode_message
from streams.items import FaultItem, ItemMapper
from streams.store import Store

T0 = datetime(2026, 11, 27, 3, 0, tzinfo=UTC)
NODE = "gpu-node-07"

# --- the signal: a record, its mapping, its sensor ---------------------------------------------
# A sensor is built from a context that holds only what its spec declares (its settings, its capabilities).


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


@dataclasses.dataclass(frozen=True)
class ThermalSettings:
    interval_s: float


class ThermalSensor:
    built: ClassVar[list[ThermalSensor]] = []

    def __init__(self, ctx: agent_signals.SensorContext[ThermalSettings]) -> None:
        self.ctx = ctx
        ThermalSensor.built.append(self)

    def start(self, stop: threading.Event) -> None:
        self.ctx.publish(ThermalSlowdown(node=self.ctx.node, record_id=f"thermal:{self.ctx.node}:1",
                                         gpu_uuid="GPU-7f00", temperature_c=91, observed_at=T0))

    def close(self) -> None:
        pass


def thermal_settings(agent: AgentSettings) -> ThermalSettings | None:
    """On with NVML (whose clock-event reasons a real one would read)."""
    return ThermalSettings(agent.inventory_check_s) if agent.nvml_enabled else None


SENSOR = agent_signals.SensorSpec("test_thermal", thermal_settings, ThermalSensor)


class NvmlUser(ThermalSensor):
    """A second sensor, declaring the NVML caller and nothing else."""


NVML_USER = agent_signals.SensorSpec("test_nvml_user", thermal_settings, NvmlUser, uses=frozenset({"nvml"}))


@pytest.fixture
def thermal_signal() -> Iterator[None]:
    ThermalSensor.built.clear()
    model_signals.register(SIGNAL)
    agent_signals.register(SENSOR)
    yield
    agent_signals.unregister(SENSOR.name)
    model_signals.unregister(SIGNAL.kind)


def test_a_registered_signal_travels_from_its_sensor_to_an_incident(thermal_signal: None, tmp_path: Path) -> None:
    settings = AgentSettings(node=NODE, state_dir=tmp_path / "state", nvml_enabled=True,
                             podresources_enabled=False, evidence_enabled=False, metrics_port=None)
    agent = build_agent(settings)  # the NVML sensor is built too, never started
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


def test_a_sensor_is_built_from_a_context_with_only_what_it_declares(thermal_signal: None, tmp_path: Path) -> None:
    agent_signals.register(NVML_USER)
    settings = AgentSettings(node=NODE, state_dir=tmp_path / "state", nvml_enabled=True, podresources_enabled=False,
                             evidence_enabled=True, metrics_port=None, nvml_call_timeout_s=1.5)
    try:
        agent = build_agent(settings)
    finally:
        agent_signals.unregister(NVML_USER.name)
    try:
        thermal, nvml_user = ThermalSensor.built
    finally:
        agent.stop()

    ctx = thermal.ctx
    assert (ctx.sensor, ctx.node, ctx.settings) == ("test_thermal", NODE, ThermalSettings(settings.inventory_check_s))
    assert ctx.uses == frozenset()
    for capability in agent_signals.CAPABILITIES:
        with pytest.raises(agent_signals.Undeclared, match=capability):
            getattr(ctx, capability)
    # Nothing in a context is the agent: its callables are the agent's narrow ones, bound to it.
    values = [getattr(ctx, f.name) for f in dataclasses.fields(ctx)]
    assert not any(isinstance(v, Agent | AgentSettings) for v in values)
    assert ctx.publish == agent.emit

    ctx = nvml_user.ctx
    assert ctx.uses == {"nvml"}
    assert isinstance(ctx.nvml, NvmlCaller) and ctx.nvml.timeout_s == 1.5
    for capability in ("evidence", "gpus"):
        with pytest.raises(agent_signals.Undeclared, match=capability):
            getattr(ctx, capability)


def test_a_sensor_its_settings_turn_off_is_not_built(thermal_signal: None, tmp_path: Path) -> None:
    agent = build_agent(AgentSettings(node=NODE, state_dir=tmp_path / "state", nvml_enabled=False,
                                      podresources_enabled=False, evidence_enabled=False, metrics_port=None))
    agent.stop()
    assert ThermalSensor.built == []


def test_a_context_lends_exactly_what_its_spec_declares() -> None:
    common: dict[str, Any] = dict(sensor="s", node=NODE, settings=None, publish=print,
                                  clock=agent_signals.SYSTEM_CLOCK, metrics=None)
    with pytest.raises(ValueError, match="not declared"):
        agent_signals.SensorContext(**common, evidence_trigger=print)
    with pytest.raises(ValueError, match="not lent"):
        agent_signals.SensorContext(**common, uses=frozenset({"gpus"}))


# --- the documented example (docs/architecture.md, "Adding a health signal"), run as written ---------

ARCHITECTURE = Path(__file__).resolve().parents[2] / "docs" / "architecture.md"
DOCUMENTED = ("models/signals/thermal/__init__.py", "agents/signals/thermal/__init__.py")


def documented_code() -> dict[str, str]:
    """The code of "Adding a health signal", by the file the document shows it as."""
    text = ARCHITECTURE.read_text()
    section = text[text.index("## Adding a health signal"):text.index("## Adding a sink")]
    blocks = re.findall(r"`((?:models|agents)/signals/thermal/__init__\.py)`:\n\n( *)```python\n(.*?)\n\2```",
                        section, re.S)
    return {path: textwrap.dedent(code) for path, _indent, code in blocks}


@pytest.fixture
def documented() -> Iterator[tuple[types.ModuleType, types.ModuleType]]:
    """The two documented files as the modules they would be (`models.signals.thermal`, `agents.signals.thermal`)."""
    code = documented_code()
    assert sorted(code) == sorted(DOCUMENTED)
    modules: list[types.ModuleType] = []
    try:
        for path in DOCUMENTED:
            module = types.ModuleType(path.removesuffix("/__init__.py").replace("/", "."))
            sys.modules[module.__name__] = module
            modules.append(module)
            exec(compile(code[path], f"{ARCHITECTURE}:{path}", "exec"), module.__dict__)
        yield modules[0], modules[1]
    finally:
        for module in modules:
            sys.modules.pop(module.__name__, None)


def test_the_documented_signal_and_sensor_work_as_written(
    documented: tuple[types.ModuleType, types.ModuleType], tmp_path: Path
) -> None:
    model, sensor_module = documented
    contexts: list[agent_signals.SensorContext[Any]] = []

    def build(ctx: agent_signals.SensorContext[Any]) -> Any:
        contexts.append(ctx)
        return sensor_module.SENSOR.build(ctx)

    for signal in model.SIGNALS:
        model_signals.register(signal)
    agent_signals.register(dataclasses.replace(sensor_module.SENSOR, build=build))
    try:
        off = AgentSettings(node=NODE, state_dir=tmp_path / "off", nvml_enabled=False, podresources_enabled=False,
                            evidence_enabled=False, metrics_port=None)
        build_agent(off).stop()
        assert contexts == []  # its settings turn it off with NVML

        settings = off.model_copy(update={"state_dir": tmp_path / "on", "nvml_enabled": True})
        agent = build_agent(settings)
        try:
            [ctx] = contexts
            assert ctx.uses == {"nvml"} and ctx.settings == sensor_module.ThermalSettings()
            assert isinstance(ctx.nvml, NvmlCaller) and ctx.nvml.timeout_s == settings.nvml_call_timeout_s
            for capability in ("evidence", "gpus"):
                with pytest.raises(agent_signals.Undeclared):
                    getattr(ctx, capability)
            sensor, stop = sensor_module.SENSOR.build(ctx), threading.Event()
            sensor.start(stop)
            stop.set()
            sensor.close()

            ctx.publish(model.ThermalThrottle(node=NODE, record_id="thermal:GPU-7f00:1", gpu_uuid="GPU-7f00",
                                              temperature_c=93, observed_at=T0))
            [entry] = agent.spool.pending_entries()
        finally:
            agent.stop()
        assert (entry.topic, entry.key, entry.fault) == (NVML_TOPIC, NODE, True)
        record = decode_message(topic=entry.topic, partition=0, offset=0, key=entry.key.encode(),
                                value=entry.value.encode(), kinds=topology().kinds_for(entry.topic))
        assert isinstance(record, model.ThermalThrottle)
        [item] = ItemMapper().items(record, entry.topic)
        assert isinstance(item, FaultItem)
        assert (item.observation.family, item.observation.gpu_uuid, item.observation.occurred_at) == (
            "thermal", "GPU-7f00", T0)
    finally:
        agent_signals.unregister(sensor_module.SENSOR.name)
        for signal in model.SIGNALS:
            model_signals.unregister(signal.kind)


def test_without_its_registration_the_record_is_a_dead_letter() -> None:
    value = ThermalSlowdown(node=NODE, record_id="r1", gpu_uuid="GPU-1", temperature_c=90, observed_at=T0)
    dead = decode_message(topic=NVML_TOPIC, partition=0, offset=0, key=NODE.encode(),
                          value=value.model_dump_json().encode(), kinds=topology().kinds_for(NVML_TOPIC))
    assert isinstance(dead, DeadLetter) and dead.reason == "invalid"
