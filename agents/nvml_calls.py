"""NVML calls in daemon worker threads, each with a timeout.

A hung driver call must never stall the agent: the caller gets `NvmlCallTimeout` after the
timeout, the function is quarantined for a while (later calls to it fail fast), and once too many
calls are stuck no further calls are made until they return.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar

from agents.metrics import Metrics

log = logging.getLogger(__name__)

T = TypeVar("T")

QUARANTINE_S = 300.0
MAX_STUCK = 4


class NvmlCallTimeout(Exception):
    pass


class NvmlCaller:
    def __init__(self, timeout_s: float, metrics: Metrics) -> None:
        self.timeout_s = timeout_s
        self._metrics = metrics
        self._lock = threading.Lock()
        self._stuck = 0
        self._quarantine: dict[str, float] = {}

    def __call__(self, fn: Callable[..., T], *args: Any, timeout_s: float | None = None) -> T:
        name = getattr(fn, "__name__", repr(fn))
        now = time.monotonic()
        with self._lock:
            if self._quarantine.get(name, 0.0) > now:
                raise NvmlCallTimeout(f"{name} timed out recently; not called again yet")
            if self._stuck >= MAX_STUCK:
                raise NvmlCallTimeout(f"{self._stuck} NVML calls are stuck; not calling {name}")
        box: dict[str, Any] = {}
        done = threading.Event()

        def work() -> None:
            try:
                box["value"] = fn(*args)
            except BaseException as exc:
                box["error"] = exc
            finally:
                done.set()
                with self._lock:
                    if box.get("abandoned"):
                        self._stuck -= 1
                        log.info("a stuck NVML call returned", extra={"call": name})

        threading.Thread(target=work, name=f"nvml:{name}", daemon=True).start()
        if not done.wait(timeout_s if timeout_s is not None else self.timeout_s):
            with self._lock:
                if not done.is_set():
                    box["abandoned"] = True
                    self._stuck += 1
                    self._quarantine[name] = time.monotonic() + QUARANTINE_S
            if box.get("abandoned"):
                self._metrics.inc("xidpipe_agent_nvml_call_timeouts_total")
                log.warning("NVML call timed out; abandoned in its thread", extra={"call": name})
                raise NvmlCallTimeout(f"{name} did not return within {self.timeout_s} s")
        if "error" in box:
            raise box["error"]
        return box["value"]  # type: ignore[no-any-return]
