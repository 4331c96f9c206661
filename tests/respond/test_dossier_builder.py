"""Attribution in the dossier: the latest workload and the latest process the faults name."""

from __future__ import annotations

from history.tables import FaultEvent
from respond.dossier_builder import _attribution


def event(pod: str | None, process: str | None, pid: int | None) -> FaultEvent:
    return FaultEvent(pod=pod, namespace="team-vision" if pod else None, container="trainer" if pod else None,
                      process=process, pid=pid, attribution={})


def test_process_and_pod_come_from_the_latest_fault_that_names_each() -> None:
    a = _attribution([event("trainer-9", "trainer", 10233), event("trainer-9", None, None)])
    assert (a.pod, a.namespace, a.process, a.pid) == ("trainer-9", "team-vision", "trainer", 10233)
    later = _attribution([event("bert-2", "bert", 1), event("trainer-9", "trainer", 2)])
    assert (later.pod, later.process) == ("trainer-9", "trainer")


def test_nothing_known_stays_unknown() -> None:
    a = _attribution([event(None, None, None)])
    assert a.pod is None and a.process is None and a.pid is None
