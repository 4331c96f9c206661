"""A new health signal, a new sink and a new step each take one registration per layer, and nothing else.

The signal: a sensor registered in `agents.signals` publishes its own record kind through the real
agent (spool, topic, key); the record kind and its mapping, registered in `models.signals`, carry it
through the stream's decoding and ingest into the store, where it opens an incident. The sink: a
chat destination registered in `respond.sinks.registry` is what `build_sinks` sends notices through.
The step: a step registered in `respond.cordon.steps` is run by the executor after the cordon, on
the real kube-apiserver as the responder's identity, recorded with its idempotency key, not run again
on a redelivery and completed by one after it failed; replay lists it with the cordon's steps.
"""

from __future__ import annotations

import dataclasses
import json
import re
import shutil
import sys
import textwrap
import threading
import types
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, ClassVar, Literal, Protocol, runtime_checkable

import pytest
from kubernetes import client
from pydantic import BaseModel, SecretStr

from agents import signals as agent_signals
from agents.main import build_agent
from agents.nvml_calls import NvmlCaller
from agents.runtime import Agent
from agents.settings import AgentSettings
from history.engine import make_engine
from history.migrate import upgrade
from models import signals as model_signals
from models.cordon import ANN_CORDONED_AT, CordonRequest
from models.cordon_policy import CordonPolicy
from models.incidents import FaultObservation
from models.node_records import NVML_TOPIC, NodeRecordBase
from models.topics import topology
from respond.cordon import steps
from respond.cordon.action_log import JsonlActionStore
from respond.cordon.executor import CordonExecutor
from respond.cordon.kube_nodes import KubeNodes
from respond.cordon.retry import Backoff
from respond.cordon.steps.base import Phase, StepContext, StepRecord, Trigger
from respond.errors import TemporaryError
from respond.sinks import registry
from respond.sinks.build import build_sinks
from respond.sinks.ports import Destination, Posted
from respond.sinks.settings import SinkSettings
from streams.decode import DeadLetter, decode_message
from streams.ingest import FaultItem, Ingest
from streams.store import Store
from tests.kube import unique
from tests.respond.sinks.conftest import Clock, make_notice
from xidpipe.replay import run_replay

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
    items = Ingest().items(record, entry.topic)
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

ARCHITECTURE = Path(__file__).resolve().parents[1] / "docs" / "architecture.md"
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
        [item] = Ingest().items(record, entry.topic)
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


# --- the step: its port, its class, one registration -------------------------------------------

ANN_RESET = "xidpipe.io/reset-requested-at"
SAMPLES = Path(__file__).resolve().parents[1] / "xidpipe" / "samples" / "cluster"


@runtime_checkable
class ResetRequests(Protocol):
    def annotate(self, name: str, annotations: dict[str, str]) -> None: ...


class RequestReset:
    """Asks for the faulty GPU's reset once the node is cordoned: a mark on the node that a reset
    controller acts on. `failures`: how many runs fail first (the controller unreachable)."""

    name = "request_reset"
    port = ResetRequests
    phase: Phase = "after"
    triggers: frozenset[Trigger] = frozenset({"cordon", "resume"})
    own_record = True

    def __init__(self) -> None:
        self.failures = 0

    def idempotency_key(self, req: CordonRequest) -> str:
        return f"{req.node}/{req.incident_id}/reset"

    def applies(self, policy: CordonPolicy) -> bool:
        return True

    def run(self, port: ResetRequests, ctx: StepContext) -> StepRecord:
        if self.failures:
            self.failures -= 1
            raise TemporaryError("reset controller unreachable")
        port.annotate(ctx.req.node, {ANN_RESET: ctx.at.isoformat()})
        return StepRecord(step=self.name, outcome="done", reason=f"reset of {ctx.req.gpu} requested",
                          key=self.idempotency_key(ctx.req), changes=["annotations"])


@pytest.fixture
def reset_step() -> Iterator[RequestReset]:
    step = RequestReset()
    steps.register(step)
    yield step
    steps.unregister(step.name)


@pytest.fixture
def gpu_node(admin_core: client.CoreV1Api) -> Iterator[str]:
    """A GPU node in a pool of its own (the breaker allows its cordon), deleted after the test."""
    name = unique("gpu-node")
    admin_core.create_node(client.V1Node(metadata=client.V1ObjectMeta(
        name=name, labels={"nvidia.com/gpu.present": "true", "xidpipe.io/pool": unique("pool")})))
    yield name
    admin_core.delete_node(name)


@pytest.fixture
def executor(worker_client: client.ApiClient, tmp_path: Path) -> Iterator[CordonExecutor]:
    """An executor acting as the responder's identity (the chart's RBAC and node policy)."""
    nodes = KubeNodes(worker_client, reporting_instance="xidpipe-test", backoff=Backoff(deadline_s=5.0))
    yield CordonExecutor(CordonPolicy(), JsonlActionStore(tmp_path / "actions.jsonl"), nodes)
    nodes.close()


def lost_gpu(node: str) -> CordonRequest:
    return CordonRequest(node=node, incident_id=unique("inc"), gpu="GPU-5d8c2a1e", family="gpu_lost", xids=(79,),
                         category="hardware", first_seen=T0, last_seen=T0, reason="GPU fell off the bus")


def action_rows(executor: CordonExecutor) -> list[dict[str, Any]]:
    assert isinstance(executor.store, JsonlActionStore)
    return [json.loads(line) for line in executor.store.path.read_text().splitlines()]


def test_a_registered_step_runs_after_the_cordon_once_per_cordon(
    reset_step: RequestReset, executor: CordonExecutor, gpu_node: str, admin_core: client.CoreV1Api,
) -> None:
    req = lost_gpu(gpu_node)

    first = executor.handle(req)
    node = admin_core.read_node(gpu_node)
    again = executor.handle(req)  # redelivered

    assert (first.outcome, first.decision) == ("done", "cordon") and node.spec.unschedulable
    [record] = first.steps
    assert (record.step, record.outcome, record.key) == ("request_reset", "done", f"{gpu_node}/{req.incident_id}/reset")
    annotations = node.metadata.annotations
    assert annotations[ANN_RESET] >= annotations[ANN_CORDONED_AT]  # after the cordon
    rows = action_rows(executor)
    assert [(r["action"], r["outcome"]) for r in rows] == [("cordon", "done"), ("request_reset", "done"),
                                                           ("cordon", "noop")]
    assert rows[1]["details"] == {"key": record.key, "cordoned_at": annotations[ANN_CORDONED_AT]}
    assert (again.outcome, again.steps) == ("noop", [])
    assert admin_core.read_node(gpu_node).metadata.resource_version == node.metadata.resource_version


def test_a_step_that_failed_is_completed_by_the_redelivery(
    reset_step: RequestReset, executor: CordonExecutor, gpu_node: str, admin_core: client.CoreV1Api,
) -> None:
    req = lost_gpu(gpu_node)
    reset_step.failures = 1

    failed = executor.handle(req)
    assert ANN_RESET not in admin_core.read_node(gpu_node).metadata.annotations
    completed = executor.handle(req)

    assert (failed.outcome, failed.retryable) == ("failed", True)
    assert failed.reason.endswith("then failed: reset controller unreachable")
    assert set(failed.changes) == {"unschedulable", "taint", "annotations", "condition", "event"}
    assert completed.outcome == "noop" and [r.step for r in completed.steps] == ["request_reset"]
    assert ANN_RESET in admin_core.read_node(gpu_node).metadata.annotations
    assert [(r["action"], r["outcome"]) for r in action_rows(executor)] == [
        ("cordon", "done"), ("cordon", "failed"), ("cordon", "noop"), ("request_reset", "done")]


def test_replay_lists_a_registered_step_with_the_cordons(reset_step: RequestReset, tmp_path: Path) -> None:
    root = tmp_path / "cluster"
    shutil.copytree(SAMPLES, root)
    (root / "replay.json").write_text(json.dumps({"format": "xidpipe-replay", "version": 1,
                                                  "pool_nodes": {"": 100}}))

    cordons = run_replay(root).cluster.cordons()

    assert cordons and {c.steps for c in cordons} == {("cordon", "condition", "event", "request_reset")}


def test_an_adapter_without_a_steps_port_is_refused_at_start(tmp_path: Path) -> None:
    @runtime_checkable
    class GpuResets(Protocol):
        def reset_gpu(self, node: str, gpu: str) -> None: ...

    class ResetGpu(RequestReset):
        name = "reset_gpu"
        port = GpuResets

    steps.register(ResetGpu())
    try:
        with client.ApiClient() as api, pytest.raises(TypeError, match="GpuResets, the port of step 'reset_gpu'"):
            CordonExecutor(CordonPolicy(), JsonlActionStore(tmp_path / "a.jsonl"),
                           KubeNodes(api, reporting_instance="t"))
    finally:
        steps.unregister("reset_gpu")
