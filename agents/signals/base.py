"""What a sensor is to the node agent, what it is built from, and the registry `agents.main.build_agent` reads.

A sensor observes one thing on the node (NVML, the kubelet's PodResources API, ...) in a thread of
its own and hands each record to `SensorContext.publish`; the agent spools it and publishes it on
its kind's topic. The kernel-log path is not a sensor: it is the agent's own loop.

A sensor is built from a `SensorContext` that holds only what it needs: the node name, `publish`,
a clock, its metrics, its own settings (read from the agent's by its spec), and the capabilities its
spec declares in `uses`:

- `"nvml"`: the NVML caller (`agents.nvml_calls.NvmlCaller`: each call in a thread of its own, with
  a timeout, so a hung driver never stalls the sensor);
- `"evidence"`: the evidence trigger, which asks the agent to capture the node-side evidence of a
  fault the sensor saw (nothing happens when evidence capture is off);
- `"gpus"`: the GPU report, which tells the agent the node's GPUs and their PCI addresses (GPUs and
  root ports): the kernel path's pre-filter keeps the AER lines of those addresses, and the evidence
  collector names the GPU at a kernel fault line's address.

A capability the spec does not declare is not in the context (reading it raises `Undeclared`). No
capability is another sensor or the agent object, so sensors are built and started in any order.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Generic, Literal, Protocol, TypeVar

from agents.evidence import FaultContext
from agents.metrics import Metrics
from agents.nvml_calls import NvmlCaller
from agents.settings import AgentSettings
from models.node_records import GpuInfo, NodeRecordBase

S = TypeVar("S")

Capability = Literal["nvml", "evidence", "gpus"]
CAPABILITIES: tuple[Capability, ...] = ("nvml", "evidence", "gpus")

Publish = Callable[[NodeRecordBase], None]  # thread-safe; fault records are never dropped
EvidenceTrigger = Callable[[FaultContext], None]  # never blocks: the capture runs in the collector's thread
GpuReport = Callable[[Sequence[GpuInfo], Sequence[str]], None]  # the GPUs; their and their root ports' addresses


class Clock(Protocol):
    def now(self) -> datetime:
        """The wall clock, timezone-aware (UTC)."""
        ...

    def time_ns(self) -> int:
        """The wall clock in nanoseconds since the epoch (what record ids are made of)."""
        ...

    def monotonic(self) -> float:
        """Seconds on a clock that never goes back (intervals and deadlines)."""
        ...


class SystemClock:
    def now(self) -> datetime:
        return datetime.now(UTC)

    def time_ns(self) -> int:
        return time.time_ns()

    def monotonic(self) -> float:
        return time.monotonic()


SYSTEM_CLOCK = SystemClock()


class Sensor(Protocol):
    def start(self, stop: threading.Event) -> None:
        """Start observing in a thread of its own; return at once. Stop when `stop` is set."""
        ...

    def close(self) -> None:
        ...


class Undeclared(LookupError):
    """A sensor read a capability its spec does not declare in `uses`."""


@dataclass(frozen=True, slots=True)
class SensorContext(Generic[S]):
    """What a sensor is built from: `node`, `publish`, `clock`, `metrics`, its own `settings`, and the
    capabilities of `uses` (`nvml`, `evidence`, `gpus`), lent only when declared."""

    sensor: str  # the sensor's name (logs, errors)
    node: str
    settings: S
    publish: Publish
    clock: Clock
    metrics: Metrics
    uses: frozenset[Capability] = frozenset()
    nvml_caller: NvmlCaller | None = None
    evidence_trigger: EvidenceTrigger | None = None
    gpu_report: GpuReport | None = None

    def __post_init__(self) -> None:
        lent = self._lent()
        unknown = sorted(set(self.uses) - set(CAPABILITIES))
        extra = sorted(c for c, value in lent.items() if value is not None and c not in self.uses)
        missing = sorted(c for c in self.uses if lent.get(c) is None)
        if unknown or extra or missing:
            raise ValueError(f"sensor {self.sensor!r}: the context must lend exactly what it declares "
                             f"(unknown {unknown}, not declared {extra}, not lent {missing})")

    def _lent(self) -> dict[str, Any]:
        return {"nvml": self.nvml_caller, "evidence": self.evidence_trigger, "gpus": self.gpu_report}

    def _get(self, capability: Capability) -> Any:
        value = self._lent()[capability]
        if value is None:
            raise Undeclared(f"sensor {self.sensor!r} does not declare {capability!r} in its SensorSpec.uses")
        return value

    @property
    def nvml(self) -> NvmlCaller:
        """The NVML caller (`"nvml"`): `ctx.nvml(pynvml.nvmlDeviceGetCount)`, with the agent's call timeout."""
        caller: NvmlCaller = self._get("nvml")
        return caller

    @property
    def evidence(self) -> EvidenceTrigger:
        """The evidence trigger (`"evidence"`): `ctx.evidence(FaultContext(record_id, bus, gpu_uuid, xid, pid))`."""
        trigger: EvidenceTrigger = self._get("evidence")
        return trigger

    @property
    def gpus(self) -> GpuReport:
        """The GPU report (`"gpus"`): `ctx.gpus(gpus, addresses)` after each inventory read that changed them."""
        report: GpuReport = self._get("gpus")
        return report


@dataclass(frozen=True, slots=True)
class SensorSpec(Generic[S]):
    """A sensor as registered: its name (in logs), its own settings read from the agent's (None when
    they turn it off), how to build it from its context, and the capabilities it uses."""

    name: str
    settings: Callable[[AgentSettings], S | None]
    build: Callable[[SensorContext[S]], Sensor]
    uses: frozenset[Capability] = frozenset()


_SENSORS: dict[str, SensorSpec[Any]] = {}


def register(spec: SensorSpec[S]) -> SensorSpec[S]:
    existing = _SENSORS.get(spec.name)
    if existing is not None and existing != spec:
        raise ValueError(f"sensor {spec.name!r} is already registered")
    _SENSORS[spec.name] = spec
    return spec


def unregister(name: str) -> None:
    """Remove a sensor (tests that register one of their own)."""
    _SENSORS.pop(name, None)


def sensors() -> tuple[SensorSpec[Any], ...]:
    """The registered sensors, in registration order (the order they are built and started in)."""
    return tuple(_SENSORS.values())
