"""Browser tests: Debian's Chromium driven by Playwright against the real app and the scripted engine.

Chromium comes from ``apt-get install chromium`` (scripts/test.sh does it); Playwright's own browser
download is never used. Without /usr/bin/chromium the tests are skipped with that reason. One app and
one fake engine serve the whole module; each test scripts the engine through ``fake.responder``.
Screenshots of the main states go to artifacts/screenshots/.
"""

from __future__ import annotations

import io
from collections.abc import Iterator
from pathlib import Path

import pytest
from PIL import Image, ImageDraw

from tests.integration.conftest import settings_for
from tests.support.fake_engine import FakeEngine, Reply
from tests.support.live_app import LiveApp

CHROMIUM = Path("/usr/bin/chromium")
SHOTS = Path(__file__).resolve().parents[2] / "artifacts" / "screenshots"
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
                 "--disable-sync", "--no-first-run"]

pytestmark = pytest.mark.browser


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "tests/browser" in str(item.fspath).replace("\\", "/"):
            item.add_marker(pytest.mark.browser)


# Module scope, not session: Playwright's sync API keeps an event loop running on the main thread
# while it is open, and anyio's async tests in later modules cannot start their own loop beside it.
@pytest.fixture(scope="module")
def browser() -> Iterator[object]:
    if not CHROMIUM.exists():
        pytest.skip("Chromium is not installed: run scripts/test.sh (apt-get install chromium) as root")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        chromium = pw.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        yield chromium
        chromium.close()


@pytest.fixture(scope="module")
def fake() -> Iterator[FakeEngine]:
    with FakeEngine() as engine:
        yield engine


@pytest.fixture(scope="module")
def live(fake: FakeEngine, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveApp]:
    logs = tmp_path_factory.mktemp("logs")
    settings = settings_for(fake, app={"log_dir": str(logs)},
                            client={"idle_timeout_s": 10, "total_timeout_s": 60, "max_retries": 0})
    with LiveApp(settings) as app:
        yield app


@pytest.fixture
def page(browser: object, live: LiveApp, fake: FakeEngine, request: pytest.FixtureRequest) -> Iterator[object]:
    """A fresh English page on the app; the engine's script is reset to the default reply."""
    fake.responder = None
    fake.default = Reply()
    locale = getattr(request, "param", "en-US")
    context = browser.new_context(locale=locale, viewport={"width": 1400, "height": 1000})  # type: ignore[attr-defined]
    tab = context.new_page()
    tab.goto(live.url + "/")
    tab.wait_for_selector("#ocr-run")
    yield tab
    context.close()
    fake.responder = None


def shot(page: object, name: str) -> Path:
    """Save a full-page screenshot under artifacts/screenshots/."""
    SHOTS.mkdir(parents=True, exist_ok=True)
    path = SHOTS / f"{name}.png"
    page.screenshot(path=str(path), full_page=True)  # type: ignore[attr-defined]
    return path


def synthetic_page(path: Path, size: tuple[int, int] = (800, 600), blocks: tuple[tuple[int, int, int, int], ...] = (
        (80, 60, 320, 120), (400, 300, 720, 380))) -> Path:
    """A white page with dark text-like blocks at known pixel positions."""
    image = Image.new("RGB", size, "white")
    draw = ImageDraw.Draw(image)
    for block in blocks:
        draw.rectangle(block, fill=(40, 40, 40))
    image.save(path, "PNG")
    return path


def synthetic_pdf(path: Path, pages: int) -> Path:
    """A real PDF with ``pages`` pages (Pillow writes it), each with a block at a different height."""
    images = []
    for i in range(pages):
        image = Image.new("RGB", (612, 792), "white")
        ImageDraw.Draw(image).rectangle((72, 72 + 100 * i, 400, 140 + 100 * i), fill=(40, 40, 40))
        images.append(image)
    buffer = io.BytesIO()
    images[0].save(buffer, "PDF", save_all=True, append_images=images[1:], resolution=72)
    path.write_bytes(buffer.getvalue())
    return path


def upload(page: object, path: Path) -> None:
    page.set_input_files("#ocr-files input[type=file]", str(path))  # type: ignore[attr-defined]
    page.wait_for_selector(f"#ocr-files :text('{path.name}')")  # type: ignore[attr-defined]


def choose_task(page: object, label: str) -> None:
    page.click("#ocr-preset input")  # type: ignore[attr-defined]
    page.get_by_role("option", name=label).click()  # type: ignore[attr-defined]


RAW_JS = "(document.querySelector('#ocr-raw textarea') || {value: ''}).value"


def raw_value(page: object) -> str:
    """The Raw text tab's content ('' while that tab is not shown: Gradio mounts only the open tab)."""
    return page.evaluate(RAW_JS)  # type: ignore[attr-defined]


def show_tab(page: object, name: str) -> None:
    page.get_by_role("tab", name=name).click()  # type: ignore[attr-defined]


def statuses(page: object) -> list[str]:
    return page.eval_on_selector_all(  # type: ignore[attr-defined]
        "#ocr-progress .ocr-chip", "els => els.map(e => e.dataset.status)")
