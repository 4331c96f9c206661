"""A LocalKafka that can be stopped and started again on the same ports and data (outage tests).

`LocalKafka.start()` formats a fresh data directory and insists that the port is bindable, which
fails for a minute after a stop while the old connections sit in TIME_WAIT (the broker itself
binds with SO_REUSEADDR). `restart()` relaunches the broker on the kept directory instead.
"""

from __future__ import annotations

from pathlib import Path

from xidpipe.localinfra.kafka import LocalKafka, find_java


class RestartableKafka(LocalKafka):
    def __init__(self, work_dir: Path) -> None:
        super().__init__(work_dir=work_dir, keep_data=True, num_partitions=1)
        self._saved: tuple[int, int, Path] | None = None

    def stop(self) -> None:
        if self.port:
            self._saved = (self.port, self.controller_port, self.work_dir)
        super().stop()

    def restart(self) -> RestartableKafka:
        assert self._saved is not None, "start() it first"
        self.port, self.controller_port, self._work_dir = self._saved
        self._write_config()
        self._launch(find_java())
        self._wait_ready()
        return self

    def remove(self) -> None:
        self.keep_data = False
        if self._saved is not None and not self.port:
            self.port, self.controller_port, self._work_dir = self._saved
            self._proc = None
        super().stop()


def start_broker(work_dir: Path) -> RestartableKafka:
    broker = RestartableKafka(work_dir)
    broker.start()
    return broker
