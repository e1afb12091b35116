"""The emulated AWS: moto's ThreadedMotoServer, in this process, on loopback.

In-process on purpose: the journal and lock hooks (moto_hooks.py) patch moto's classes, and the
Step Functions engine and the Lambda backend must see the same backends as the HTTP endpoint.
"""

from __future__ import annotations

import logging
import os

from moto.moto_api._internal.models import moto_api_backend
from moto.server import ThreadedMotoServer

from localmode import moto_pin

logger = logging.getLogger(__name__)

LOOPBACK = "127.0.0.1"


class EmulatedAws:
    """moto's server on 127.0.0.1 at a free port; `endpoint_url` is what boto3 clients point at."""

    def __init__(self, port: int = 0) -> None:
        self._server = ThreadedMotoServer(ip_address=LOOPBACK, port=port, verbose=False)
        self.port = 0

    @property
    def endpoint_url(self) -> str:
        return f"http://{LOOPBACK}:{self.port}"

    def start(self) -> None:
        moto_api_backend.set_config(moto_pin.MOTO_CONFIG)
        # werkzeug logs every request at INFO: noise in the user's terminal at ~100 lines a job.
        logging.getLogger("werkzeug").setLevel(logging.WARNING)
        self._server.start()
        self.port = self._server.get_host_and_port()[1]
        # Step Functions' task integrations call moto over HTTP at localhost:$MOTO_PORT (default 5000).
        os.environ["MOTO_PORT"] = str(self.port)
        logger.info("emulated AWS at %s", self.endpoint_url)

    def stop(self) -> None:
        self._server.stop()
