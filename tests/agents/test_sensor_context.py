"""What the agent lends a sensor reaches the agent's own paths: the GPU report the pre-filter and the
evidence collector, the evidence trigger the collector (or nothing, when capture is off)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, ClassVar

import pytest

from agents import signals
from agents.evidence import FaultContext
from agents.main import build_agent
from agents.runtime import Agent
from agents.settings import AgentSettings
from agents.spool import SpoolEntry
from models.node_records import EVIDENCE_TOPIC, GpuInfo

GPU = GpuInfo(index=0, uuid="GPU-0b6d3bf1-6a53-4b34-9e1f-6b1a7f5a0c01", pci_bus_id="00000000:3B:00.0")
OTHER_AER = "pcieport 0000:80:01.0: AER: Uncorrected (Fatal) error received: 0000:81:00.0"
GPU_AER = "pcieport 0000:3a:00.0: AER: Uncorrected (Fatal) error received: 0000:3b:00.0"


class Borrower:
    """A sensor declaring every capability; the test calls what it was lent."""

    built: ClassVar[list[Borrower]] = []

    def __init__(self, ctx: signals.SensorContext[tuple[()]]) -> None:
        self.ctx = ctx
        Borrower.built.append(self)

    def start(self, stop: threading.Event) -> None:
        pass

    def close(self) -> None:
        pass


BORROWER = signals.SensorSpec("test_borrower", lambda _agent: (), Borrower, uses=frozenset(signals.CAPABILITIES))


@pytest.fixture
def borrower() -> Iterator[Callable[..., tuple[Agent, signals.SensorContext[tuple[()]]]]]:
    Borrower.built.clear()
    signals.register(BORROWER)
    agents: list[Agent] = []

    def build(tmp_path: Path, **kw: Any) -> tuple[Agent, signals.SensorContext[tuple[()]]]:
        settings = AgentSettings(node="gpu-node-1", state_dir=tmp_path / "state", nvml_enabled=False,
                                 podresources_enabled=False, metrics_port=None, nvidia_smi="absent-smi",
                                 lspci="absent-lspci", **kw)
        agents.append(build_agent(settings))
        [sensor] = Borrower.built
        return agents[-1], sensor.ctx

    yield build
    signals.unregister(BORROWER.name)
    for agent in agents:
        agent.stop()


def evidence_records(agent: Agent, want: int, timeout_s: float = 10.0) -> list[SpoolEntry]:
    deadline = time.monotonic() + timeout_s
    while True:
        found = [e for e in agent.spool.pending_entries() if e.topic == EVIDENCE_TOPIC]
        if len(found) >= want or time.monotonic() > deadline:
            return found
        time.sleep(0.02)


def test_the_gpu_report_reaches_the_prefilter(borrower: Any, tmp_path: Path) -> None:
    agent, ctx = borrower(tmp_path, evidence_enabled=False)
    assert agent.prefilter(OTHER_AER).keep  # no GPU known yet: every AER line is kept
    ctx.gpus([GPU], ["0000:3b:00.0", "0000:3a:00.0"])
    assert not agent.prefilter(OTHER_AER).keep
    assert agent.prefilter(GPU_AER).keep


def test_the_gpu_report_names_the_gpu_of_a_kernel_fault_and_the_trigger_captures(
    borrower: Any, tmp_path: Path
) -> None:
    agent, ctx = borrower(tmp_path, evidence_enabled=True, evidence_timeout_s=1)
    ctx.gpus([GPU], ["0000:3b:00.0"])
    assert agent.evidence is not None
    agent.evidence.on_kernel_fault("kmsg:b:7", "NVRM: Xid (PCI:0000:3b:00): 79, pid=1, name=x, GPU has fallen off")
    ctx.evidence(FaultContext("nvml:1", "0000:5e:00.0", "GPU-1c7e4c02", 48, None))
    found = evidence_records(agent, 2)
    by_trigger = {e.record_id: e for e in found}
    assert set(by_trigger) == {"evidence:kmsg:b:7", "evidence:nvml:1"}
    assert f'"gpu_uuid":"{GPU.uuid}"' in by_trigger["evidence:kmsg:b:7"].value
    assert '"xid":48' in by_trigger["evidence:nvml:1"].value


def test_with_evidence_capture_off_the_trigger_does_nothing(borrower: Any, tmp_path: Path) -> None:
    agent, ctx = borrower(tmp_path, evidence_enabled=False)
    ctx.evidence(FaultContext("nvml:1", "0000:5e:00.0", None, 48, None))
    assert agent.evidence is None
    assert evidence_records(agent, 1, timeout_s=0.3) == []
