"""Transient API failures are retried with backoff until a deadline; permanent ones are reported at once."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import urllib3
from kubernetes.client.exceptions import ApiException

from respond.cordon.kube_nodes import call_api
from respond.cordon.retry import Backoff
from respond.errors import PermanentError, TemporaryError


class Clock:
    def __init__(self) -> None:
        self.now = 0.0
        self.sleeps: list[float] = []

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds


def failing(*errors: BaseException) -> tuple[list[int], Callable[[], str]]:
    calls: list[int] = []

    def fn() -> str:
        calls.append(1)
        if len(calls) <= len(errors):
            raise errors[len(calls) - 1]
        return "ok"

    return calls, fn


@pytest.mark.parametrize("error", [
    ApiException(status=429, reason="Too Many Requests"),
    ApiException(status=500), ApiException(status=503), ApiException(status=504),
    urllib3.exceptions.NewConnectionError(None, "refused"),
    urllib3.exceptions.ProtocolError("connection reset"),
    ConnectionResetError(),
])
def test_transient_errors_are_retried_with_growing_waits(error: BaseException) -> None:
    clock = Clock()
    calls, fn = failing(error, error, error)

    result = call_api(fn, "patch node", Backoff(deadline_s=60, initial_s=0.2, max_s=5),
                             sleep=clock.sleep, clock=lambda: clock.now)

    assert result == "ok" and len(calls) == 4
    assert len(clock.sleeps) == 3
    for attempt, wait in enumerate(clock.sleeps):  # 0.2 * 2**attempt, with jitter in [50%, 100%]
        assert 0.1 * 2**attempt <= wait <= 0.2 * 2**attempt


@pytest.mark.parametrize("status", [400, 403, 404, 409, 422])
def test_permanent_errors_are_reported_at_once_with_their_status(status: int) -> None:
    clock = Clock()
    calls, fn = failing(ApiException(status=status, reason="nope"))

    with pytest.raises(PermanentError) as exc:
        call_api(fn, "patch node n1", Backoff(), sleep=clock.sleep, clock=lambda: clock.now)

    assert exc.value.status == status and not exc.value.retryable
    assert str(exc.value).startswith(f"patch node n1: HTTP {status}")
    assert len(calls) == 1 and clock.sleeps == []


def test_transient_errors_past_the_deadline_are_retryable_failures() -> None:
    clock = Clock()
    _, fn = failing(*[ApiException(status=503, reason="Service Unavailable")] * 100)

    with pytest.raises(TemporaryError) as exc:
        call_api(fn, "read node n1", Backoff(deadline_s=10, initial_s=0.5, max_s=2),
                        sleep=clock.sleep, clock=lambda: clock.now)

    assert exc.value.retryable and exc.value.status == 503
    assert clock.now <= 10 and max(clock.sleeps) <= 2
    assert "still failing after" in str(exc.value)
