"""The nginx config rendered from settings: upstreams, failover, streaming, limits, and nginx's own check."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from ocr_ui import router_config
from ocr_ui.config import load_config
from ocr_ui.errors import ConfigError
from ocr_ui.router_config import base_url, body_limit_mb, render_http, render_standalone, upstream_address

URLS = ["http://10.0.0.5:8000/v1", "http://10.0.0.6:8000/v1"]


def settings(**env: str):
    return load_config(None, {f"OCR_UI__{k.upper()}": v for k, v in env.items()})


def directive(text: str, name: str) -> list[str]:
    """Values of every ``name ...;`` line (comments stripped)."""
    return [m.group(1).strip() for m in re.finditer(rf"^[ \t]*{name}[ \t]+([^;#\n]*);", text, re.MULTILINE)]


def test_each_engine_url_becomes_one_upstream_server_with_passive_health() -> None:
    text = render_http(settings(), urls=URLS)
    assert directive(text, "server") == ["10.0.0.5:8000 max_fails=1 fail_timeout=10s",
                                         "10.0.0.6:8000 max_fails=1 fail_timeout=10s"]
    assert "least_conn;" in text
    assert directive(text, "zone") == ["ocr_engines 64k"]


def test_engine_urls_come_from_settings_when_none_are_given() -> None:
    text = render_http(settings(engine__urls="[http://a.internal:9000, http://b.internal:9001/v1/]"))
    assert directive(text, "server")[0].startswith("a.internal:9000 ")
    assert directive(text, "server")[1].startswith("b.internal:9001 ")


@pytest.mark.parametrize(("url", "address"), [
    ("http://10.0.0.5:8000/v1", "10.0.0.5:8000"),
    ("http://10.0.0.5:8000/v1/", "10.0.0.5:8000"),
    ("http://10.0.0.5:8000", "10.0.0.5:8000"),
    ("http://gpu-3.example.org", "gpu-3.example.org:80"),
    ("http://[fd00::7]:8000/v1", "[fd00::7]:8000"),
])
def test_engine_url_becomes_host_and_port(url: str, address: str) -> None:
    assert upstream_address(url) == address


@pytest.mark.parametrize(("url", "says"), [
    ("https://10.0.0.5:8000/v1", "plain http"),
    ("http://10.0.0.5:8000/api/v2", "only http://host:port"),
    ("http://10.0.0.5:8000/v1?x=1", "only http://host:port"),
    ("http://user@10.0.0.5:8000", "only http://host:port"),
    ("http://10.0.0.5:99999", "not a valid URL"),
    ("10.0.0.5:8000", "plain http"),
    ("http://a;b:8000", "invalid host"),
])
def test_a_bad_engine_url_is_refused_with_the_url_named(url: str, says: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(says)) as info:
        upstream_address(url)
    assert repr(url) in str(info.value)


def test_no_engine_urls_is_refused_with_where_to_set_them() -> None:
    with pytest.raises(ConfigError, match=r"engine\.urls"):
        render_http(settings())


def test_the_same_engine_twice_is_refused() -> None:
    with pytest.raises(ConfigError, match="twice"):
        render_http(settings(), urls=["http://10.0.0.5:8000/v1", "http://10.0.0.5:8000"])


def test_failover_covers_refused_timed_out_and_overloaded_engines_once_each() -> None:
    text = render_http(settings(), urls=[*URLS, "http://10.0.0.7:8000"])
    assert directive(text, "proxy_next_upstream")[0] == "error timeout http_502 http_503 non_idempotent"
    assert directive(text, "proxy_next_upstream_tries") == ["3"]


def test_responses_stream_through_unbuffered_on_keep_alive_http_1_1() -> None:
    text = render_http(settings(), urls=URLS)
    assert directive(text, "proxy_buffering") == ["off"]
    assert directive(text, "proxy_http_version") == ["1.1"]
    assert directive(text, "proxy_set_header") == ['Connection ""']
    assert directive(text, "keepalive") == ["32"]


def test_read_timeout_sits_above_the_clients_idle_timeout_so_the_app_times_out_first() -> None:
    text = render_http(settings(client__idle_timeout_s="45", client__connect_timeout_s="2.5"), urls=URLS)
    read = directive(text, "proxy_read_timeout")
    assert read[0] == "55s"  # the /v1/ default; /health and /metrics have their own short ones
    assert set(read[1:]) == {"5s"}
    assert directive(text, "proxy_connect_timeout") == ["3s"]


def test_body_limit_fits_the_largest_page_the_app_can_send() -> None:
    assert body_limit_mb(settings()) == 17  # 2048 x 2048 RGB, base64: 16 MiB
    assert body_limit_mb(settings(images__max_side="1024")) == 5
    text = render_http(settings(), urls=URLS)
    assert directive(text, "client_max_body_size") == directive(text, "client_body_buffer_size") == ["17m"]


def test_locations_proxy_the_api_health_and_metrics_and_refuse_the_rest() -> None:
    text = render_http(settings(), urls=URLS)
    blocks = dict(re.findall(r"location (.+?) \{(.*?)\n    \}", text, re.DOTALL))
    assert set(blocks) == {"/v1/", "= /health", "= /metrics", "/"}
    for where in ("/v1/", "= /health", "= /metrics"):
        assert directive(blocks[where], "proxy_pass") == ["http://ocr_engines"]
    assert "http_500" in directive(blocks["= /health"], "proxy_next_upstream")[0]
    assert directive(blocks["/"], "return") == ["404"]


def test_listen_address_comes_from_settings_or_the_argument() -> None:
    assert directive(render_http(settings(), urls=URLS), "listen") == ["127.0.0.1:8080"]
    assert directive(render_http(settings(engine__router_listen="10.0.0.1:9000"), urls=URLS), "listen") == ["10.0.0.1:9000"]
    assert directive(render_http(settings(), urls=URLS, listen="127.0.0.1:18080"), "listen") == ["127.0.0.1:18080"]
    assert base_url("127.0.0.1:18080") == "http://127.0.0.1:18080/v1"


@pytest.mark.parametrize("listen", ["8080", "127.0.0.1:99999", "a b:80", "x;y:80", "127.0.0.1:"])
def test_a_bad_listen_address_is_refused(listen: str) -> None:
    with pytest.raises(ConfigError, match="host:port"):
        render_http(settings(), urls=URLS, listen=listen)


def test_a_bad_router_listen_setting_is_refused_at_startup() -> None:
    with pytest.raises(ConfigError, match=r"engine\.router_listen"):
        settings(engine__router_listen="8080")


def test_standalone_config_keeps_every_file_under_its_prefix() -> None:
    text = render_standalone(settings(), urls=URLS)
    for name in ("pid", "error_log", "client_body_temp_path", "proxy_temp_path", "access_log"):
        assert all(not value.startswith("/") for value in directive(text, name)), name
    logs = directive(render_http(settings(), urls=URLS), "access_log")
    assert [log for log in logs if log != "off"] == ["/var/log/nginx/ocr-engines.access.log ocr_engines"]


@pytest.mark.skipif(shutil.which("nginx") is None and not Path("/usr/sbin/nginx").exists(),
                    reason="nginx is not installed (scripts/test.sh installs Debian's nginx-light)")
def test_nginx_accepts_the_standalone_config_and_the_snippet(tmp_path: Path) -> None:
    nginx = shutil.which("nginx") or "/usr/sbin/nginx"
    urls = ["http://127.0.0.1:8001/v1", "http://[::1]:8002"]
    (tmp_path / "nginx.conf").write_text(render_standalone(settings(), urls=urls), encoding="utf-8")
    snippet = render_http(settings(), urls=urls, access_log="snippet-access.log")
    (tmp_path / "snippet.conf").write_text(snippet, encoding="utf-8")
    (tmp_path / "wrapped.conf").write_text(f"events {{}}\nhttp {{\n include {tmp_path / 'snippet.conf'};\n}}\n"
                                           "pid wrapped.pid;\n", encoding="utf-8")
    for conf in ("nginx.conf", "wrapped.conf"):
        argv = [*router_config.nginx_command(tmp_path, tmp_path / conf, nginx)[:-2], "-t", "-q"]
        done = subprocess.run(argv, capture_output=True, text=True, timeout=30, check=False)
        assert done.returncode == 0, done.stderr


def test_cli_prints_a_whole_config_for_the_given_urls(capsys: pytest.CaptureFixture[str],
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OCR_UI__ENGINE__URLS", raising=False)
    monkeypatch.delenv("OCR_UI_CONFIG", raising=False)
    assert router_config.main(["--listen", "127.0.0.1:9999", "--urls", *URLS]) == 0
    out = capsys.readouterr().out
    assert out.startswith("worker_processes auto;")
    assert "listen 127.0.0.1:9999;" in out and "server 10.0.0.6:8000 " in out
    assert router_config.main(["--snippet", "--urls", *URLS]) == 0
    assert "events" not in capsys.readouterr().out


def test_cli_without_engine_urls_exits_2_with_one_error_line(capsys: pytest.CaptureFixture[str],
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OCR_UI__ENGINE__URLS", raising=False)
    monkeypatch.delenv("OCR_UI_CONFIG", raising=False)
    assert router_config.main([]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: no engine URLs") and err.count("\n") == 1
