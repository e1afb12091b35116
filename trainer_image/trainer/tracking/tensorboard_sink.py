"""TensorBoard (`torch.utils.tensorboard`): an event file per attempt under the job's tensorboard/ prefix
(trainer/tracking/__init__.py)."""

from __future__ import annotations

import threading
import time
from pathlib import Path

from trainer import storage
from trainer.tracking.sink import Sink


class TensorBoardSink(Sink):
    def __init__(self, uri: str, staging: Path) -> None:
        from torch.utils.tensorboard import SummaryWriter

        self.uri = uri
        self.remote = storage.is_s3(uri)
        self.dir = staging if self.remote else storage.local_path(uri)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.writer = SummaryWriter(log_dir=str(self.dir))

    def started_at(self, step: int, earlier: list[tuple[int, dict[str, float]]]) -> None:
        """TensorBoard's restart marker at step + 1: readers drop the earlier attempts' events from there on
        (the steps this attempt re-does); the earlier points are in their own event files already."""
        if step <= 0:
            return
        from tensorboard.compat.proto.event_pb2 import Event, SessionLog

        marker = Event(step=step + 1, wall_time=time.time(), session_log=SessionLog(status=SessionLog.START))
        self.writer._get_file_writer().add_event(marker)

    def log(self, values: dict[str, float], step: int) -> None:
        for key, value in values.items():
            self.writer.add_scalar(key, value, step)

    def flush(self, buffer_lock: threading.Lock) -> None:
        self._upload()

    def _upload(self) -> None:
        self.writer.flush()
        if self.remote:
            for path in sorted(self.dir.iterdir()):
                if path.is_file():
                    storage.upload_file(path, storage.join(self.uri, path.name))

    def close(self, status: str) -> None:
        self.writer.close()
        self._upload()
