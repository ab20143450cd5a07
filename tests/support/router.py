"""Run Debian's nginx as a child process in front of several engines, with every file in one folder.

    with running_router(tmp_path, settings, [url_a, url_b]) as router:
        router.base_url        # what engine.base_url becomes
        router.upstream_hits() # {"127.0.0.1:41234": 5, ...} from nginx's access log

nginx runs in the foreground under ``EngineProcess`` (own process group, stopped by PID).
"""

from __future__ import annotations

import re
import shutil
import socket
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

from ocr_ui.config import Settings
from ocr_ui.engine import EngineProcess
from ocr_ui.router_config import nginx_command, render_standalone

_UPSTREAM = re.compile(r'"(?:POST|GET) /v1/\S+ [^"]*" (\d{3}) \d+ upstream=(\S+(?:, \S+)*) upstream_status=')


def require_nginx() -> str:
    """nginx's path, or skip: scripts/test.sh installs Debian's nginx-light."""
    path = shutil.which("nginx") or next((p for p in ("/usr/sbin/nginx",) if Path(p).exists()), None)
    if path is None:
        pytest.skip("nginx is not installed (scripts/test.sh installs Debian's nginx-light)")
    return path


def free_port() -> int:
    """A port nothing listens on right now (the kernel's pick)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class Router:
    """A running nginx: its address, folder and process."""

    listen: str
    prefix: Path
    process: EngineProcess

    @property
    def base_url(self) -> str:
        return f"http://{self.listen}/v1"

    @property
    def root_url(self) -> str:
        return f"http://{self.listen}"

    def access_lines(self) -> list[str]:
        path = self.prefix / "access.log"
        return path.read_text(encoding="utf-8").splitlines() if path.exists() else []

    def upstream_hits(self) -> Counter[str]:
        """Answered /v1/ requests per engine address: the last upstream of each logged request."""
        hits: Counter[str] = Counter()
        for line in self.access_lines():
            match = _UPSTREAM.search(line)
            if match:
                hits[match.group(2).split(", ")[-1]] += 1
        return hits


@contextmanager
def running_router(prefix: Path, settings: Settings, urls: Sequence[str], *, timeout: float = 30) -> Iterator[Router]:
    """nginx in front of ``urls`` on a free loopback port, healthy (some engine answers /health)."""
    nginx = require_nginx()
    prefix.mkdir(parents=True, exist_ok=True)
    listen = f"127.0.0.1:{free_port()}"
    conf = prefix / "nginx.conf"
    conf.write_text(render_standalone(settings, listen=listen, urls=urls, worker_processes="1"), encoding="utf-8")
    process = EngineProcess(nginx_command(prefix, conf, nginx), {"PATH": "/usr/sbin:/usr/bin:/bin"},
                            prefix / "nginx.out", health_url=f"http://{listen}/health", name="router")
    process.start()
    try:
        process.wait_healthy(timeout, interval=0.05)
        yield Router(listen, prefix, process)
    finally:
        process.stop(grace=10)


def wait_for_log(router: Router, count: int, timeout: float = 5.0) -> list[str]:
    """nginx writes the access line after the response: wait until ``count`` lines are there."""
    deadline = time.monotonic() + timeout
    while len(router.access_lines()) < count and time.monotonic() < deadline:
        time.sleep(0.02)
    return router.access_lines()
