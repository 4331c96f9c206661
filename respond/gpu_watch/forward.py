"""The GPU watch's views to the kube topic, through the responder's Kafka producer: the watch's threads
put them on a queue, `forward` sends them in the event loop, keyed by node."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import queue
from typing import Any

from models.node_records import encode_node_record
from models.signals.kube_gpus.records import KubeGpuView

log = logging.getLogger(__name__)


async def forward(views: queue.SimpleQueue[KubeGpuView], producer: Any, topic: str, stop: asyncio.Event,
                  interval_s: float = 0.2) -> None:
    """Send every queued view until `stop`; a failed send is logged and its view tried again."""
    pending: KubeGpuView | None = None
    while not stop.is_set() or pending is not None or not views.empty():
        if pending is None:
            try:
                pending = views.get_nowait()
            except queue.Empty:
                if stop.is_set():
                    return
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), interval_s)
                continue
        view = pending
        try:
            await producer.send_and_wait(topic, encode_node_record(view), key=view.node.encode())
            pending = None
        except Exception:
            if stop.is_set():
                return
            log.exception("GPU view of %s not published; trying again", view.node)
            await asyncio.sleep(1.0)
