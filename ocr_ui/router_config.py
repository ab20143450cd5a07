"""Render an nginx config that spreads the app's engine requests over several engines (one per host).

The app keeps one ``engine.base_url``; past one host that URL points at nginx, and nginx (from the
distribution's packages, no extra Python service) picks an engine per request:

- ``least_conn`` over ``engine.urls``: OCR requests differ a lot in length, so "fewest open requests"
  balances better than round robin; a shared ``zone`` makes every worker see the same counts.
- passive health: an engine that refuses connections or answers 502/503 is skipped for
  ``fail_timeout`` seconds and the request goes to the next one (``proxy_next_upstream``), at most
  once per engine. nginx never retries once response bytes went to the client, so a broken stream is
  reported (the app raises ``StreamBroken``), never replayed.
- streaming-safe proxying: HTTP/1.1 with keep-alive to the engines, no response buffering (each
  token reaches the client as it is produced), a read timeout a little above ``client.idle_timeout_s``
  (the app's own, clearer timeout fires first), and a body limit that fits the largest page image.

``/health`` answers from any live engine; ``/metrics`` is one engine's text per scrape (not
aggregated): Prometheus should scrape each engine directly (see docs/scale-out.md).

``python -m ocr_ui.router_config [--listen 127.0.0.1:8080] [--urls URL ...] [--snippet]`` prints it.
"""

from __future__ import annotations

import math
import re
import sys
from collections.abc import Sequence
from pathlib import Path
from urllib.parse import urlsplit

from ocr_ui.config import Settings
from ocr_ui.errors import ConfigError

MAX_FAILS = 1  # one refused connection is enough: engines fail hard (process gone), not flakily
FAIL_TIMEOUT_S = 10  # how long a failed engine is skipped before one request probes it again
READ_TIMEOUT_MARGIN_S = 10  # nginx's read timeout sits above the app's idle timeout by this much
SNIPPET_ACCESS_LOG = "/var/log/nginx/ocr-engines.access.log"
KEEPALIVE_CONNECTIONS = 32  # idle connections kept open per worker (saves a handshake per page)
_HOST = re.compile(r"^(\[[0-9A-Fa-f:]+\]|[A-Za-z0-9.-]+)$")  # nothing that could break out of the config
_LISTEN = re.compile(r"^(\[[0-9A-Fa-f:]+\]|[A-Za-z0-9.-]+):([0-9]{1,5})$")


def upstream_address(url: str) -> str:
    """``host:port`` of an engine URL such as ``http://10.0.0.5:8000/v1``; raises ``ConfigError``."""
    try:
        parts = urlsplit(url.strip())
        port = parts.port or 80
        host = parts.hostname or ""
    except ValueError as exc:
        raise ConfigError(f"engine URL {url!r} is not a valid URL") from exc
    if parts.scheme != "http":
        raise ConfigError(f"engine URL {url!r}: the router reaches engines over plain http on a private "
                          "network (https between router and engine is not supported here)")
    if parts.path.rstrip("/") not in ("", "/v1") or parts.query or parts.fragment or parts.username:
        raise ConfigError(f"engine URL {url!r}: give only http://host:port (optionally ending in /v1)")
    host = f"[{host}]" if ":" in host else host
    if not _HOST.match(host):
        raise ConfigError(f"engine URL {url!r} has an invalid host name")
    return f"{host}:{port}"


def _listen(value: str) -> str:
    match = _LISTEN.match(value.strip())
    if not match or not 1 <= int(match.group(2)) <= 65535:
        raise ConfigError(f"router listen address {value!r} must be host:port, e.g. 127.0.0.1:8080")
    return value.strip()


def body_limit_mb(settings: Settings) -> int:
    """Largest request body: a max_side x max_side RGB page, uncompressed size, base64-encoded, plus slack."""
    side = settings.images.max_side
    return math.ceil(side * side * 3 * 4 / 3 / 2**20) + 1


def render_http(settings: Settings, *, listen: str | None = None, urls: Sequence[str] | None = None,
                access_log: str = SNIPPET_ACCESS_LOG) -> str:
    """The ``upstream`` and ``server`` blocks (for an ``http {}`` context, e.g. /etc/nginx/conf.d/)."""
    urls = list(settings.engine.urls if urls is None else urls)
    if not urls:
        raise ConfigError("no engine URLs: set engine.urls (OCR_UI__ENGINE__URLS) or pass --urls")
    servers = [upstream_address(u) for u in urls]
    if len(set(servers)) != len(servers):
        raise ConfigError("engine.urls names the same engine twice")
    address = _listen(listen or settings.engine.router_listen)
    c = settings.client
    read_timeout = math.ceil(c.idle_timeout_s) + READ_TIMEOUT_MARGIN_S
    body_mb = body_limit_mb(settings)
    server_lines = "\n".join(
        f"    server {s} max_fails={MAX_FAILS} fail_timeout={FAIL_TIMEOUT_S}s;" for s in servers)
    return f"""\
# Rendered by `python -m ocr_ui.router_config` from config.yaml; edit the settings, not this text.
log_format ocr_engines '$remote_addr [$time_local] "$request" $status $body_bytes_sent '
                       'upstream=$upstream_addr upstream_status=$upstream_status rt=$request_time';

upstream ocr_engines {{
    least_conn;                    # pages differ in length: send each to the engine with fewest open requests
    zone ocr_engines 64k;          # counts and failure marks shared by all workers
{server_lines}
    keepalive {KEEPALIVE_CONNECTIONS};
}}

server {{
    listen {address};
    access_log {access_log} ocr_engines;

    # A page image travels base64 in the JSON body. Keeping the body in memory (allocated to its real
    # size) lets nginx resend it to the next engine without temp files.
    client_max_body_size {body_mb}m;
    client_body_buffer_size {body_mb}m;

    proxy_http_version 1.1;            # keep-alive to the engines and chunked streaming
    proxy_set_header Connection "";
    proxy_buffering off;               # each streamed token goes to the client as soon as it arrives
    proxy_cache off;
    proxy_connect_timeout {math.ceil(c.connect_timeout_s)}s;  # client.connect_timeout_s
    # client.idle_timeout_s + {READ_TIMEOUT_MARGIN_S}: the app's own timeout, with its clearer message, fires first
    proxy_read_timeout {read_timeout}s;
    proxy_send_timeout {read_timeout}s;
    # An engine that is down (refused, timed out, 502/503) is skipped: the request goes to the next one,
    # at most once per engine. non_idempotent: an OCR request has no side effects, and nginx never
    # retries after the first response byte reached the client.
    proxy_next_upstream error timeout http_502 http_503 non_idempotent;
    proxy_next_upstream_tries {len(servers)};

    location /v1/ {{
        proxy_pass http://ocr_engines;  # no URI part: /v1/chat/completions goes through unchanged
    }}

    location = /health {{
        access_log off;                 # polled every few seconds
        proxy_pass http://ocr_engines;  # 200 while any engine is healthy
        proxy_next_upstream error timeout http_500 http_502 http_503;
        proxy_read_timeout 5s;
    }}

    location = /metrics {{
        # One engine's metrics per scrape, NOT a sum over engines: good enough for the app's admission
        # sampling; Prometheus should scrape every engine's own /metrics (docs/scale-out.md).
        access_log off;
        proxy_pass http://ocr_engines;
        proxy_read_timeout 5s;
    }}

    location / {{
        return 404;
    }}
}}
"""


def render_standalone(settings: Settings, *, listen: str | None = None, urls: Sequence[str] | None = None,
                      worker_processes: str = "auto") -> str:
    """A whole nginx.conf whose files all live under the prefix: ``nginx -p DIR -c nginx.conf``."""
    http = render_http(settings, listen=listen, urls=urls, access_log="access.log")
    indented = "\n".join(f"    {line}" if line else "" for line in http.splitlines())
    # Debian's nginx compiles in absolute temp paths under /var/lib/nginx; relative ones keep a
    # non-root run (a developer, a test) inside its own folder (nginx creates them at start).
    return f"""\
worker_processes {worker_processes};
pid nginx.pid;
error_log error.log warn;

events {{
    worker_connections 1024;
}}

http {{
    client_body_temp_path body_temp;
    proxy_temp_path proxy_temp;
    fastcgi_temp_path fastcgi_temp;
    uwsgi_temp_path uwsgi_temp;
    scgi_temp_path scgi_temp;

{indented}
}}
"""


def nginx_command(prefix: Path, conf: Path, nginx: str = "nginx") -> list[str]:
    """argv that runs nginx in the foreground with every file under ``prefix`` (stopped by its PID)."""
    # -e: the error log before the config is read (Debian's default is /var/log/nginx, root only).
    return [nginx, "-p", str(prefix), "-c", str(conf), "-e", str(prefix / "error.log"), "-g", "daemon off;"]


def base_url(listen: str) -> str:
    """What engine.base_url becomes once the app goes through the router."""
    return f"http://{_listen(listen)}/v1"


def main(argv: list[str] | None = None) -> int:
    """CLI entry point; see the module docstring."""
    import argparse

    from ocr_ui.config import load_from_process

    parser = argparse.ArgumentParser(prog="python -m ocr_ui.router_config",
                                     description="print an nginx config that balances engine.urls "
                                                 "(settings from $OCR_UI_CONFIG or config.yaml, and OCR_UI__* variables)")
    parser.add_argument("--listen", default=None, help="host:port nginx listens on (default: engine.router_listen)")
    parser.add_argument("--urls", nargs="+", default=None, metavar="URL", help="engine URLs (default: engine.urls)")
    parser.add_argument("--snippet", action="store_true",
                        help="only the upstream and server blocks, for /etc/nginx/conf.d/ (default: a whole nginx.conf)")
    args = parser.parse_args(argv)
    try:
        settings = load_from_process()
        render = render_http if args.snippet else render_standalone
        print(render(settings, listen=args.listen, urls=args.urls), end="")
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
