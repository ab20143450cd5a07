"""The launcher's decisions: device, model availability, ports and URLs (fakes only at the OS boundary)."""

from __future__ import annotations

import http.server
import signal
import socket
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from ocr_ui import launcher
from ocr_ui.errors import ConfigError


def _completed(stdout: str, code: int = 0) -> subprocess.CompletedProcess[str]:
    return subprocess.CompletedProcess(["nvidia-smi", "-L"], code, stdout, "")


def test_explicit_device_is_used_as_given() -> None:
    assert launcher.detect_device("cpu", which=lambda _: "/usr/bin/nvidia-smi") == "cpu"
    assert launcher.detect_device("cuda", which=lambda _: None) == "cuda"


def test_auto_picks_cpu_without_nvidia_smi() -> None:
    assert launcher.detect_device("auto", which=lambda _: None) == "cpu"


def test_auto_picks_cuda_when_nvidia_smi_lists_a_gpu() -> None:
    listed = _completed("GPU 0: NVIDIA H200 (UUID: GPU-1234)\n")
    assert launcher.detect_device("auto", which=lambda _: "/usr/bin/nvidia-smi", run=lambda *a, **k: listed) == "cuda"


def test_auto_picks_cpu_when_nvidia_smi_finds_no_gpu() -> None:
    failed = _completed("", code=9)
    assert launcher.detect_device("auto", which=lambda _: "/usr/bin/nvidia-smi", run=lambda *a, **k: failed) == "cpu"


def test_a_local_checkpoint_folder_is_accepted(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text("{}")
    launcher.check_model(str(tmp_path), {}, reachable=lambda *_: pytest.fail("no hub lookup for a folder"))


def test_a_missing_checkpoint_folder_is_refused_with_a_clear_message(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"must hold config\.json"):
        launcher.check_model(str(tmp_path / "nope"), {})


def test_offline_hub_id_without_a_local_copy_gives_one_line_pointing_at_model_flag(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as refused:
        launcher.check_model("tencent/HunyuanOCR", {"HF_HUB_OFFLINE": "1", "HOME": str(tmp_path)},
                             reachable=lambda *_: pytest.fail("offline: the hub must not be asked"))
    message = str(refused.value)
    assert "\n" not in message
    assert "cannot be downloaded here" in message and "--model /path/to/checkpoint" in message


def test_unreachable_hub_is_reported_as_such(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="hub cannot be reached"):
        launcher.check_model("tencent/HunyuanOCR", {"HOME": str(tmp_path)}, reachable=lambda *_: False)


def test_a_hub_id_already_in_the_local_cache_needs_no_network(tmp_path: Path) -> None:
    snapshot = tmp_path / "hub" / "models--tencent--HunyuanOCR" / "snapshots" / "abc123"
    snapshot.mkdir(parents=True)
    (snapshot / "config.json").write_text("{}")
    launcher.check_model("tencent/HunyuanOCR", {"HF_HUB_CACHE": str(tmp_path / "hub"), "HF_HUB_OFFLINE": "1"})


@pytest.fixture
def hub_server() -> Iterator[str]:
    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200 if self.path == "/api/models/tencent/HunyuanOCR" else 404)
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_hub_probe_asks_the_configured_endpoint(hub_server: str) -> None:
    assert launcher.hub_reachable("tencent/HunyuanOCR", {"HF_ENDPOINT": hub_server})
    assert not launcher.hub_reachable("tencent/NoSuchModel", {"HF_ENDPOINT": hub_server})


def test_hub_probe_treats_a_refused_connection_as_unreachable() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # closed again below: nothing listens there
    assert not launcher.hub_reachable("tencent/HunyuanOCR", {"HF_ENDPOINT": f"http://127.0.0.1:{port}"}, timeout=2)


def test_a_busy_engine_port_is_refused_with_advice() -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        with pytest.raises(ConfigError, match="--external-vllm"):
            launcher.check_port_free("127.0.0.1", port)


@pytest.mark.parametrize(("given", "expected"), [
    ("http://gpu-box:8000", "http://gpu-box:8000/v1"),
    ("http://gpu-box:8000/", "http://gpu-box:8000/v1"),
    ("http://gpu-box:8000/v1", "http://gpu-box:8000/v1"),
])
def test_external_vllm_url_gets_the_v1_suffix_once(given: str, expected: str) -> None:
    assert launcher.normalize_base_url(given) == expected


def test_external_vllm_must_be_an_http_url() -> None:
    with pytest.raises(ConfigError, match="http"):
        launcher.normalize_base_url("gpu-box:8000")


def test_command_line_reaches_config_and_app_through_the_environment(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text("{}")
    args = launcher.argparse.Namespace(config=None, model=str(tmp_path), external_vllm="http://10.0.0.2:8000",
                                       device=None)
    env = launcher.overrides(args)
    assert env == {"OCR_UI__MODEL__PATH": str(tmp_path.resolve()), "OCR_UI__ENGINE__BASE_URL": "http://10.0.0.2:8000/v1"}


def test_launcher_exits_non_zero_with_one_line_when_the_model_cannot_be_downloaded(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    environ = {"HF_HUB_OFFLINE": "1", "HOME": str(tmp_path), "OCR_UI__APP__LOG_DIR": str(tmp_path / "logs"),
               "PATH": "/usr/bin:/bin"}
    handlers = (signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM))
    status = launcher.main(["--model", "tencent/HunyuanOCR", "--device", "cpu"], environ)
    err = capsys.readouterr().err.strip().splitlines()
    assert (signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)) == handlers
    assert status != 0
    assert len(err) == 1 and "--model /path/to/checkpoint" in err[0]
    assert not (tmp_path / "logs" / "engine.log").exists()  # nothing was started
