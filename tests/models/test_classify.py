"""Table-driven tests of the application-vs-hardware judgement."""

from __future__ import annotations

import pytest

from models.classify import ClassifyPolicy, FaultGroup, classify


def group(family: str = "application", count: int = 1, workloads: tuple[str, ...] = ("job-a",),
          spread: dict[str, int] | None = None, codes: tuple[str, ...] = ("Xid 13",), **kw: object) -> FaultGroup:
    return FaultGroup(family=family, categories=["application"], codes=list(codes), count=count,
                      workloads=list(workloads), gpu="GPU-1",
                      workload_gpu_spread=spread if spread is not None else dict.fromkeys(workloads, 1),
                      **kw)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("name", "g", "category", "in_reason"),
    [
        ("one-off crash", group(count=2), "application", "below the repeat threshold"),
        ("same GPU, three different jobs", group(count=3, workloads=("a", "b", "c")), "suspected_hardware",
         "across 3 different workloads"),
        ("same GPU, same job repeating", group(count=5, workloads=("a",)), "application", "workload 'a'"),
        ("fault follows the workload", group(count=1, workloads=("a",), spread={"a": 3}), "application",
         "'a' on 3 GPUs"),
        ("repeats but the jobs also fault elsewhere", group(count=4, workloads=("a", "b"), spread={"a": 2, "b": 2}),
         "application", "follows the workload"),
        ("repeats without attribution", group(count=4, workloads=()), "suspected_hardware", "no process attribution"),
        ("fallen off the bus", group(family="gpu_lost", codes=("Xid 79",)), "hardware", "fell off the bus"),
        ("NVLink", group(family="nvlink", codes=("Xid 74",)), "interconnect", "Xid 74"),
        ("NVSwitch", group(family="nvswitch", codes=("SXid 12028",)), "interconnect", "SXid 12028"),
        ("memory", group(family="memory", codes=("Xid 48",), count=2), "hardware", "memory error"),
        ("PCIe fatal", group(family="pcie", codes=("AER",), severity="fatal"), "hardware", "AER fatal"),
        ("recovery action", group(family="recovery_action", codes=("Xid 154",), recovery_action="GPU Reset Required"),
         "driver", "GPU Reset Required"),
    ],
    ids=lambda v: v if isinstance(v, str) else "",
)
def test_classify(name: str, g: FaultGroup, category: str, in_reason: str) -> None:
    verdict = classify(g)
    assert verdict.category == category, verdict.reason
    assert in_reason in verdict.reason


def test_threshold_comes_from_the_policy() -> None:
    g = group(count=3, workloads=("a", "b"))
    assert classify(g, ClassifyPolicy(repeat_threshold=3)).category == "suspected_hardware"
    assert classify(g, ClassifyPolicy(repeat_threshold=4)).category == "application"
