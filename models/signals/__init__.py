"""Health signals: record kinds a node agent publishes, each with its pure mapping to the fault
observations the stream groups into incidents.

A signal is one folder here (its records, `NodeRecordBase` subclasses; its pure mapping; the
`Signal`s naming each record's topic and mapping) and one entry in `SIGNALS`. Its sensor lives in
`agents.signals`; the stream routes its records through `observations` with no change elsewhere.
Kernel lines, node state snapshots and evidence are not signals: the stream parses, stores and
attaches them itself.
"""

from __future__ import annotations

from typing import Any

from models.signals import health, kube_gpus, node_health, nvml
from models.signals.base import Signal, observations, register, signal_for, unregister

SIGNALS: tuple[Signal[Any], ...] = (
    *nvml.SIGNALS,
    *health.SIGNALS,
    *node_health.SIGNALS,
    *kube_gpus.SIGNALS,
)

for _signal in SIGNALS:
    register(_signal)

__all__ = ["SIGNALS", "Signal", "observations", "register", "signal_for", "unregister"]
