"""GPU quarantine in the one cordon decision (`models.cordon.decide_cordon` with a `quarantine_gpu`
rule) and its pure helpers (`models.quarantine`), table-driven."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from models.cordon import ANN_CORDONED_AT, ANN_INCIDENT, BreakerState, CordonRequest, FleetView, NodeView, decide_cordon
from models.cordon_policy import Breaker, CordonPolicy, Match, PolicyError, Rule, Scope, policy_from_mapping
from models.quarantine import (
    DeviceRef,
    GpuView,
    NodeQuarantine,
    RuleView,
    decide_quarantine_release,
    incident_label,
    quarantine_condition,
    reconcile_rule,
    rule_name,
    unresolved_reason,
)

T0 = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)
UUID = "GPU-5d8c2a1e-0b7f-4c1e-9a33-51f0c2d4e8aa"
DEVICE = DeviceRef(driver="gpu.nvidia.com", pool="n1", device="gpu-3")
QUARANTINE = Rule(name="dbe", match=Match(xids=(48,)), action="quarantine_gpu")
POLICY = CordonPolicy(rules=(QUARANTINE, *CordonPolicy().rules))
FLEET = FleetView(pool="", pool_nodes=10, pool_gpus=80)


def req(xid: int = 48, *, incident: str = "inc-1", count: int = 1, span_s: float = 0, **kw: Any) -> CordonRequest:
    family = {48: "memory", 79: "gpu_lost", 94: "memory"}[xid]
    return CordonRequest(node="n1", incident_id=incident, gpu=UUID, family=family, xids=(xid,), category="hardware",
                         count=count, first_seen=T0 - timedelta(seconds=span_s), last_seen=T0, **kw)


def rule(incident: str = "inc-1", effect: str = "NoSchedule", written: str | None = None,
         device: DeviceRef | None = DEVICE, written_device: str | None = None) -> RuleView:
    return RuleView(name=rule_name(UUID), device=device, effect=effect, incident_id=incident, gpu_uuid=UUID,
                    node="n1", written_effect=written if written is not None else effect,
                    written_device=written_device if written_device is not None else DEVICE.text)


def gpu(**kw: Any) -> GpuView:
    return GpuView(uuid=UUID, **{"device": DEVICE, "node_gpus": 8, **kw})


def decide(r: CordonRequest | None = None, *, node: NodeView | None = None, fleet: FleetView = FLEET,
           breaker: BreakerState | None = None, policy: CordonPolicy = POLICY, view: GpuView | None = None,
           dry_run: bool = False) -> Any:
    return decide_cordon(r or req(), node or NodeView(name="n1"), fleet, breaker or BreakerState(), policy,
                         dry_run=dry_run, gpu=view if view is not None else gpu())


# --- the decision ----------------------------------------------------------------------------------


def test_a_quarantine_rule_quarantines_the_gpu_not_the_node() -> None:
    d = decide()
    assert (d.outcome, d.scope, d.rule) == ("quarantine", "gpu", "dbe")
    assert (d.device, d.effect, d.rule_name, d.gpu) == (DEVICE, "NoSchedule", rule_name(UUID), UUID)
    assert d.acts and not d.changes_node and d.fallback is None
    assert "rule dbe: quarantine the GPU at once for Xid 48" in d.reason and "gpu.nvidia.com/n1/gpu-3" in d.reason


@pytest.mark.parametrize(("effect", "dry", "written"), [
    ("NoExecute", False, "NoExecute"), (None, False, "NoSchedule"), ("NoExecute", True, "None"),
    ("None", False, "None"),
])
def test_the_effect_is_the_rules_and_none_in_a_dry_run(effect: str | None, dry: bool, written: str) -> None:
    policy = CordonPolicy(rules=(Rule(name="dbe", match=Match(xids=(48,)), action="quarantine_gpu", effect=effect),))
    d = decide(policy=policy, dry_run=dry)
    assert (d.outcome, d.effect, d.dry_run) == ("quarantine", written, dry)
    assert decide(policy=policy.model_copy(update={"dry_run": True})).effect == "None"


@pytest.mark.parametrize(("view", "why"), [
    (None, "no DRA device lookup"),
    (GpuView(uuid=UUID, unresolved=unresolved_reason("n1", UUID, "gpu.nvidia.com", node_has_slices=False)),
     "node n1 publishes no ResourceSlice of driver gpu.nvidia.com (its GPUs are not DRA devices: the classic device "
     "plugin)"),
    (GpuView(uuid=UUID, unresolved=unresolved_reason("n1", UUID, "gpu.nvidia.com", node_has_slices=True)),
     f"no ResourceSlice device of driver gpu.nvidia.com on node n1 has the UUID {UUID}"),
])
def test_a_gpu_that_is_no_dra_device_falls_back_to_the_cordon_and_says_why(view: GpuView | None, why: str) -> None:
    d = decide_cordon(req(), NodeView(name="n1"), FLEET, BreakerState(), POLICY, gpu=view)
    assert (d.outcome, d.scope, d.fallback) == ("cordon", "node", why)
    assert d.reason.endswith(f"{why}: the node is cordoned instead") and "rule dbe" in d.reason


def test_the_fallback_cordon_keeps_the_cordon_refusals() -> None:
    unresolved = GpuView(uuid=UUID, unresolved="x")
    cordoned = NodeView(name="n1", unschedulable=True, annotations={ANN_CORDONED_AT: "t", ANN_INCIDENT: "inc-9"})
    assert decide(view=unresolved, node=cordoned).outcome == "already_cordoned"
    assert decide(view=unresolved, node=NodeView(name="n1", unschedulable=True)).outcome == "foreign_cordon"
    assert decide(view=unresolved, breaker=BreakerState(tripped=True)).outcome == "breaker_open"


@pytest.mark.parametrize(("pci_or_uuid", "expected"), [
    ("", "the incident names no GPU"),
    ("0000:3b:00.0", "the incident's GPU is known only by its PCI address 0000:3b:00.0, not its UUID"),
])
def test_unresolved_reasons(pci_or_uuid: str, expected: str) -> None:
    assert unresolved_reason("n1", pci_or_uuid, "gpu.nvidia.com", node_has_slices=True) == expected


@pytest.mark.parametrize(("existing", "outcome", "reason"), [
    (rule(), "already_quarantined", "already quarantined by xidpipe for this incident"),
    (rule(incident="inc-0"), "already_quarantined", "already quarantined by xidpipe for incident inc-0"),
    (rule(effect="NoExecute", written="NoSchedule"), "foreign_quarantine",
     "its effect is NoExecute, xidpipe wrote NoSchedule"),
    (rule(written_device="gpu.nvidia.com/n1/gpu-4"), "foreign_quarantine", "it selects gpu.nvidia.com/n1/gpu-3"),
    (rule(device=None), "foreign_quarantine", "it selects no single device"),
    (rule(effect="None"), "quarantine", "GPU"),  # the dry run's rule, now with the policy's effect
])
def test_an_existing_rule_decides_a_repeat(existing: RuleView, outcome: str, reason: str) -> None:
    d = decide(view=gpu(rule=existing))
    assert d.outcome == outcome and reason in d.reason, d.reason


def test_a_node_cordon_does_not_stop_a_gpu_quarantine() -> None:
    cordoned = NodeView(name="n1", unschedulable=True, annotations={ANN_CORDONED_AT: "t", ANN_INCIDENT: "inc-9"})
    assert decide(node=cordoned).outcome == "quarantine"
    assert decide(node=NodeView(name="n1", unschedulable=True)).outcome == "quarantine"


@pytest.mark.parametrize(("kw", "outcome"), [
    ({"node": NodeView(name="n1", labels={"xidpipe.io/cordon-opt-out": "true"})}, "opted_out"),
    ({"policy": POLICY.model_copy(update={"scope": Scope(pools=("a",))})}, "out_of_scope"),
    ({"node": NodeView(name="n1", exists=False)}, "node_missing"),
    ({"breaker": BreakerState(tripped=True)}, "breaker_open"),
    ({"r": req(94)}, "not_needed"),
])
def test_scope_and_the_breaker_refuse_a_quarantine_as_they_refuse_a_cordon(kw: dict[str, Any], outcome: str) -> None:
    assert decide(**kw).outcome == outcome


def test_a_threshold_quarantine_waits_for_its_occurrences() -> None:
    policy = CordonPolicy(rules=(Rule(name="dbe", match=Match(xids=(48,)), action="quarantine_gpu",
                                      occurrences=2, window_s=3600),))
    assert decide(req(count=1), policy=policy).outcome == "not_needed"
    d = decide(req(count=2, span_s=60), policy=policy)
    assert d.outcome == "quarantine" and "2 occurrence(s) within 60 s" in d.reason


# --- the breaker, in GPUs and in nodes -------------------------------------------------------------


def breaker(share: float = 0.1, **kw: Any) -> CordonPolicy:
    return POLICY.model_copy(update={"breaker": Breaker(max_pool_share=share, **kw)})


@pytest.mark.parametrize(("fleet", "outcome", "why"), [
    # 10 nodes x 8 GPUs at 10%: 8 GPUs and 1 node (min_nodes 1).
    (FleetView(pool_nodes=10, pool_gpus=80, pool_gpus_quarantined=7, node_held=True, pool_nodes_quarantined=1),
     "quarantine", ""),
    (FleetView(pool_nodes=10, pool_gpus=80, pool_gpus_quarantined=8, node_held=True, pool_nodes_quarantined=1),
     "trip_breaker", "8 of 80 GPUs quarantined by xidpipe; one more would pass the limit of 8"),
    # A second node is one node too many, whatever the GPUs say.
    (FleetView(pool_nodes=10, pool_gpus=80, pool_gpus_quarantined=1, pool_nodes_quarantined=1),
     "trip_breaker", "1 of 10 nodes held by xidpipe (cordoned, or with a GPU quarantined)"),
    (FleetView(pool_nodes=10, pool_gpus=80, pool_cordoned_by_xidpipe=1), "trip_breaker",
     "1 of 10 nodes cordoned by xidpipe"),
    (FleetView(pool_nodes=10, pool_gpus=80, cordons_last_hour=10), "trip_breaker",
     "10 cordons and GPU quarantines by xidpipe in the last hour"),
])
def test_the_breaker_counts_a_pools_share_in_gpus_and_nodes(fleet: FleetView, outcome: str, why: str) -> None:
    d = decide(fleet=fleet, policy=breaker())
    assert d.outcome == outcome and why in d.reason, d.reason
    if outcome == "trip_breaker":
        assert "no automatic quarantine until reset" in d.reason


def test_min_gpus_allows_a_small_pools_first_gpu() -> None:
    small = FleetView(pool_nodes=2, pool_gpus=4)
    assert decide(fleet=small, policy=breaker(min_gpus=0)).outcome == "trip_breaker"
    assert decide(fleet=small, policy=breaker()).outcome == "quarantine"


def test_a_node_with_a_quarantined_gpu_counts_toward_the_cordon_breaker() -> None:
    cordon = decide_cordon(req(79), NodeView(name="n1"), FleetView(pool_nodes=10, pool_nodes_quarantined=1),
                           BreakerState(), POLICY)
    assert cordon.outcome == "trip_breaker" and "held by xidpipe" in cordon.reason
    held = decide_cordon(req(79), NodeView(name="n1"), FleetView(pool_nodes=10, pool_nodes_quarantined=1,
                                                                 node_held=True), BreakerState(), POLICY)
    assert held.outcome == "cordon"


# --- the policy ------------------------------------------------------------------------------------


@pytest.mark.parametrize(("rules", "error"), [
    ("[{name: a, action: quarantine_gpu, effect: NoEvict}]", "rules.0.effect"),
    ("[{name: a, action: cordon_now, effect: NoExecute}]", "effect only applies to quarantine_gpu"),
    ("[{name: a, action: quarantine_gpu, occurrences: 2}]", "give both occurrences and window_s, or neither"),
])
def test_bad_quarantine_rules_are_refused(rules: str, error: str) -> None:
    import yaml

    with pytest.raises(PolicyError, match=re.escape(error)):
        policy_from_mapping(yaml.safe_load(f"rules: {rules}"))


def test_a_quarantine_rule_reads_from_yaml() -> None:
    import yaml

    p = policy_from_mapping(yaml.safe_load(
        "rules: [{name: dbe, match: {xids: [48]}, action: quarantine_gpu, effect: NoExecute, occurrences: 2, "
        "window_s: 600}]\nquarantine: {driver: gpu.example.com}\nbreaker: {min_gpus: 2}"))
    assert (p.rules[0].taint_effect, p.quarantine.driver, p.breaker.min_gpus) == ("NoExecute", "gpu.example.com", 2)


# --- names, the condition, release and reconciliation -------------------------------------------------


@pytest.mark.parametrize(("uuid", "name"), [
    (UUID, "xidpipe-gpu-5d8c2a1e-0b7f-4c1e-9a33-51f0c2d4e8aa"),
    ("GPU-ABC", "xidpipe-gpu-abc"),
])
def test_the_rule_is_named_after_the_gpu(uuid: str, name: str) -> None:
    assert rule_name(uuid) == name


def test_a_uuid_that_makes_no_name_is_hashed() -> None:
    odd = rule_name("GPU-a/b")
    assert re.fullmatch(r"xidpipe-gpu-h[0-9a-f]{40}", odd) and odd != rule_name("GPU-a/c")


def test_the_incident_label() -> None:
    label = incident_label("v2:0123456789abcdef@20261129T120000.000000Z")
    assert label == "v2-0123456789abcdef_20261129T120000.000000Z"
    long = incident_label("x" * 80)
    assert len(long) <= 63 and long != incident_label("x" * 81)


def test_the_node_condition_says_how_many_gpus_are_quarantined() -> None:
    q = NodeQuarantine(node="n1", gpus=8, rules=(rule(), rule(effect="None").model_copy(update={"name": "dry"})))
    status, reason, message = quarantine_condition(q)
    assert (status, reason) == ("False", "GPUQuarantined")
    assert message.startswith("1 of 8 GPUs quarantined by xidpipe: gpu-3 (") and rule_name(UUID) in message
    assert quarantine_condition(NodeQuarantine(node="n1", gpus=8))[0] == "True"


@pytest.mark.parametrize(("existing", "incident", "outcome", "why"), [
    (None, None, "refuse", "carries no quarantine by xidpipe"),
    (rule(), None, "release", "delete xidpipe's rule"),
    (rule(), "inc-1", "release", "delete xidpipe's rule"),
    (rule(), "inc-2", "refuse", "for incident inc-1, not inc-2"),
    (rule(effect="NoExecute", written="NoSchedule"), None, "refuse", "changed by someone else"),
])
def test_release_deletes_only_xidpipes_own_rule(existing: RuleView | None, incident: str | None, outcome: str,
                                                 why: str) -> None:
    d = decide_quarantine_release(existing, UUID, incident)
    assert d.outcome == outcome and why in d.reason


@pytest.mark.parametrize(("existing", "lifecycle", "action"), [
    (rule(), "closed", "remove"), (rule(), "repaired", "remove"), (rule(), "returned", "remove"),
    (rule(), "rma", "keep"), (rule(), "mitigated", "keep"), (rule(), None, "report"),
    (rule(effect="NoExecute", written="NoSchedule"), "closed", "report"),
])
def test_reconciliation(existing: RuleView, lifecycle: str | None, action: str) -> None:
    assert reconcile_rule(existing, lifecycle).action == action
