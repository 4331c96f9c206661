"""Leader election: the timing and write decisions (table-driven) and the election on the real
kube-apiserver (acquire, renew, expiry takeover, release, a conflict on resourceVersion, fencing of
the work, the check before a cluster write)."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

import pytest
from kubernetes import client

from models.leader_election import (
    LeaseRecord,
    LeaseTimings,
    Observation,
    claimed,
    decide_step,
    fenced,
    may_write,
    observe,
    released,
)
from respond.leader import LeaderElector, LeaseConflict, run_elected
from respond.lease_kube import KubeLease
from tests.kube import unique

T = LeaseTimings(lease_duration_s=15, renew_deadline_s=10, retry_period_s=2)
AT = datetime(2026, 11, 25, 15, 26, 51, tzinfo=UTC)


def held(holder: str, duration: int = 15) -> LeaseRecord:
    return LeaseRecord(holder=holder, lease_duration_s=duration, acquire_time=AT, renew_time=AT, transitions=3)


@pytest.mark.parametrize(("record", "seen_at", "now", "expected"), [
    (None, 0.0, 0.0, "create"),
    (held("a"), 0.0, 1.0, "renew"),
    (held("b"), 100.0, 114.9, "wait"),
    (held("b"), 100.0, 115.0, "take"),
    (held("b", duration=30), 100.0, 120.0, "wait"),  # the holder's own duration counts
    (held(""), 100.0, 100.0, "take"),  # released
])
def test_decide_step(record: LeaseRecord | None, seen_at: float, now: float, expected: str) -> None:
    step = decide_step(Observation(record=record, resource_version="7", seen_at=seen_at), "a", now, T)
    assert step.kind == expected and step.reason


def test_the_expiry_clock_restarts_when_the_record_changes() -> None:
    first = observe(None, held("b"), "7", 100.0)
    assert observe(first, held("b"), "7", 110.0).seen_at == 100.0  # unchanged: the clock keeps running
    renewed = held("b").model_copy(update={"renew_time": AT + timedelta(seconds=2)})
    assert observe(first, renewed, "8", 110.0).seen_at == 110.0


def test_claims_count_transitions_and_release_empties_the_holder() -> None:
    assert claimed(None, "a", AT, T).transitions == 0
    renew = claimed(held("a"), "a", AT + timedelta(seconds=2), T)
    assert (renew.transitions, renew.acquire_time, renew.renew_time) == (3, AT, AT + timedelta(seconds=2))
    take = claimed(held("b"), "a", AT + timedelta(seconds=20), T)
    assert (take.holder, take.transitions, take.acquire_time) == ("a", 4, AT + timedelta(seconds=20))
    gone = released(held("a"), AT)
    assert (gone.holder, gone.lease_duration_s) == ("", 1)


def test_fencing_and_timing_order() -> None:
    assert not fenced(100.0, 109.9, T) and fenced(100.0, 110.0, T)
    with pytest.raises(ValueError, match="renew_deadline_s"):
        LeaseTimings(lease_duration_s=10, renew_deadline_s=10, retry_period_s=2)
    with pytest.raises(ValueError, match="retry_period_s"):
        LeaseTimings(lease_duration_s=15, renew_deadline_s=2, retry_period_s=2)


@pytest.mark.parametrize(("renewed", "record", "version", "now", "allowed", "because"), [
    (("7", 100.0), held("a"), "7", 105.0, True, "holds the Lease at version 7"),
    (("7", 100.0), held("a"), "7", 109.9, True, "renewed 9.9 s ago"),
    (("7", 100.0), held("a"), "7", 110.0, False, "renew deadline"),  # fenced, though the Lease still says a
    (("7", 100.0), held("b"), "8", 101.0, False, "held by b"),  # taken over
    (("7", 100.0), held(""), "8", 101.0, False, "released"),
    (("7", 100.0), held("a"), "9", 101.0, False, "version 9"),  # written since, even in our name
    (("7", 100.0), None, None, 101.0, False, "no Lease"),
    (None, held("a"), "7", 101.0, False, "not renewed"),  # not (or no longer) the leader
])
def test_may_write(renewed: tuple[str, float] | None, record: LeaseRecord | None, version: str | None,
                   now: float, allowed: bool, because: str) -> None:
    verdict = may_write("a", renewed[0] if renewed else None, renewed[1] if renewed else None, record, version,
                        now, T)
    assert verdict.allowed is allowed and because in verdict.reason, verdict.reason


# --- on the kube-apiserver ------------------------------------------------------------------------


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def elector(api: client.ApiClient, name: str, identity: str, clock: Clock,
            timings: LeaseTimings = T) -> LeaderElector:
    return LeaderElector(KubeLease(api, name, "default"), identity, timings, clock=clock)


def test_acquire_renew_expire_release_on_the_apiserver(admin_client: client.ApiClient) -> None:
    name, clock = unique("lease"), Clock()
    a, b = elector(admin_client, name, "pod-a", clock), elector(admin_client, name, "pod-b", clock)
    coordination = client.CoordinationV1Api(admin_client)

    assert a.try_acquire_or_renew()  # creates the Lease
    assert not b.try_acquire_or_renew()  # held, b starts its expiry clock
    lease = coordination.read_namespaced_lease(name, "default")
    assert (lease.spec.holder_identity, lease.spec.lease_duration_seconds, lease.spec.lease_transitions) == (
        "pod-a", 15, 0)
    first_renew = lease.spec.renew_time

    clock.now += 10
    assert a.try_acquire_or_renew()  # renewed: a new record, so b's clock restarts
    assert coordination.read_namespaced_lease(name, "default").spec.renew_time > first_renew
    clock.now += 10
    assert not b.try_acquire_or_renew()  # 10 s since b saw the renewal: not expired
    clock.now += 14.9
    assert not b.try_acquire_or_renew()
    clock.now += 0.1  # a has not renewed for a lease duration, as b saw it
    assert b.try_acquire_or_renew()
    lease = coordination.read_namespaced_lease(name, "default")
    assert (lease.spec.holder_identity, lease.spec.lease_transitions) == ("pod-b", 1)
    assert not a.try_acquire_or_renew()  # a sees b's fresh record: it waits

    assert b.release()
    assert coordination.read_namespaced_lease(name, "default").spec.holder_identity is None
    assert a.try_acquire_or_renew()  # released: taken at the next read, no expiry wait
    assert coordination.read_namespaced_lease(name, "default").spec.lease_transitions == 2
    assert not b.release()  # not ours any more: nothing written


def test_a_write_on_a_stale_resource_version_is_a_conflict(admin_client: client.ApiClient) -> None:
    name, clock = unique("lease"), Clock()
    a, b = elector(admin_client, name, "pod-a", clock), elector(admin_client, name, "pod-b", clock)
    lease = KubeLease(admin_client, name, "default")
    assert a.try_acquire_or_renew()
    stale = lease.get()
    assert stale is not None
    assert a.try_acquire_or_renew()  # moves the resourceVersion
    with pytest.raises(LeaseConflict):
        lease.update(stale.resource_version, claimed(stale.record, "pod-b", AT, T))
    with pytest.raises(LeaseConflict):
        lease.create(claimed(None, "pod-b", AT, T))  # a second create loses too
    # Two candidates that both saw the lease expire: only one write of that version wins.
    clock.now += 100
    assert not b.try_acquire_or_renew()  # first sight: b's clock starts now
    clock.now += 15
    current = lease.get()
    assert current is not None
    lease.update(current.resource_version, claimed(current.record, "pod-c", AT, T))  # c wins the race
    assert not b.try_acquire_or_renew()  # b reads c's fresh record: its clock restarts, it waits
    assert lease.get().record.holder == "pod-c"  # type: ignore[union-attr]


def test_the_work_stops_when_the_leader_cannot_renew(admin_client: client.ApiClient) -> None:
    """Fencing: another holder takes the Lease (as after a long pause); the work's stop is set within
    the renew deadline, and the replica waits as a standby."""
    name = unique("lease")
    fast = LeaseTimings(lease_duration_s=3, renew_deadline_s=2, retry_period_s=0.5)
    leader = LeaderElector(KubeLease(admin_client, name, "default"), "pod-a", fast)
    lease = KubeLease(admin_client, name, "default")
    events: list[str] = []

    async def work(lost: asyncio.Event) -> None:
        events.append("started")
        await lost.wait()
        events.append("stopped")

    async def scenario() -> float:
        stop = asyncio.Event()
        task = asyncio.create_task(run_elected(leader, work, stop))
        while events != ["started"]:
            await asyncio.sleep(0.05)
        current = await asyncio.to_thread(lease.get)
        assert current is not None
        taken = asyncio.get_running_loop().time()
        await asyncio.to_thread(lease.update, current.resource_version,
                                claimed(current.record, "pod-other", datetime.now(UTC), fast))
        while events != ["started", "stopped"]:
            await asyncio.sleep(0.05)
        stopped = asyncio.get_running_loop().time() - taken
        stop.set()
        await asyncio.wait_for(task, 10)
        return stopped

    stopped_after = asyncio.run(scenario())
    assert stopped_after < fast.renew_deadline_s
    assert lease.get().record.holder == "pod-other"  # type: ignore[union-attr]  # never released: not ours


def test_an_elected_responders_writes_must_end_before_a_standby_may_take_over() -> None:
    from respond.cordon.settings import ActionSettings
    from respond.settings import RespondSettings

    slow = ActionSettings(api_write_timeout_s=6.0)
    with pytest.raises(ValueError, match="API_WRITE_TIMEOUT_S"):
        RespondSettings(election=True, identity="a", actions=slow)  # 15 - 10: a 5 s margin
    assert RespondSettings(election=True, identity="a", actions=slow, lease_duration_s=20).actions == slow
    assert RespondSettings(election=False, actions=slow).actions == slow  # one replica: nobody takes over


def test_an_elected_responders_shutdown_must_end_before_a_standby_may_take_over() -> None:
    from respond.settings import RespondSettings

    with pytest.raises(ValueError, match="SHUTDOWN_GRACE_S"):
        RespondSettings(election=True, identity="a", shutdown_grace_s=5.0)  # 15 - 10: a 5 s margin
    assert RespondSettings(election=True, identity="a", shutdown_grace_s=4.9).shutdown_grace_s == 4.9
