"""Attribution in the dossier: the latest workload and the latest process the faults name; every workload
the faults hit."""

from __future__ import annotations

from history.tables import FaultEvent
from respond.dossier_builder import _affected, _attribution


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


def hit(pod: str | None, namespace: str, workload: str | None, owner: str | None = None) -> FaultEvent:
    return FaultEvent(pod=pod, namespace=namespace, container="c", workload=workload, process="p", pid=1,
                      attribution={"owner": owner} if owner else {})


def test_every_pod_the_faults_name_once_in_the_order_they_faulted() -> None:
    events = [hit("bert-2", "team-nlp", "team-nlp/bert/c", "nlp"), hit(None, "team-x", None),
              hit("vllm-5", "team-serving", "team-serving/vllm/c"), hit("bert-2", "team-nlp", "team-nlp/bert/c"),
              hit("trainer-9", "team-vision", None)]
    out = _affected(events)
    assert [(a.namespace, a.pod, a.workload, a.owner) for a in out] == [
        ("team-nlp", "bert-2", "team-nlp/bert/c", "nlp"), ("team-serving", "vllm-5", "team-serving/vllm/c", None),
        ("team-vision", "trainer-9", None, None)]
    assert len(_affected([hit(f"p-{n}", "ns", None) for n in range(30)], limit=20)) == 20
