"""Headless Chromium (Debian's, `make browser`) driven over the DevTools protocol, for the
tests that use JupyterLab as a person does: open it, click, type, press Ctrl+S.

A small client of the protocol (websocket-client, which the kernel tests use already): one page,
commands sent and answered by id, console errors and uncaught exceptions collected so that a
test can say the page raised none.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

# What Chromium answers an evaluation that a navigation overtook: the page it ran in is gone,
# and the next poll runs in the new one (seen under load: a click's navigation landed between
# two polls of wait_for).
NAVIGATED = ("Inspected target navigated or closed", "Execution context was destroyed",
             "Cannot find context with specified id")  # fmt: skip


class NavigatedAway(AssertionError):
    """An evaluation that a navigation overtook (NAVIGATED)."""


class Page:
    """One Chromium tab: evaluate JavaScript, wait for a condition, press keys, screenshot."""

    def __init__(self, ws: Any) -> None:
        self.ws = ws
        self.next_id = 0
        self.errors: list[str] = []

    def send(self, method: str, **params: Any) -> dict[str, Any]:
        """Send one command and return its result (events met meanwhile are looked at)."""
        self.next_id += 1
        mine = self.next_id
        self.ws.send(json.dumps({"id": mine, "method": method, "params": params}))
        while True:
            message = json.loads(self.ws.recv())
            if message.get("id") == mine:
                if "error" in message:
                    text = f"{method}: {message['error']}"
                    if any(n in str(message["error"]) for n in NAVIGATED):
                        raise NavigatedAway(text)
                    raise AssertionError(text)
                return dict(message.get("result", {}))
            self._event(message)

    def _event(self, message: dict[str, Any]) -> None:
        method, params = message.get("method"), message.get("params", {})
        if method == "Runtime.exceptionThrown":
            self.errors.append(str(params["exceptionDetails"].get("text")))
        elif method == "Runtime.consoleAPICalled" and params.get("type") == "error":
            self.errors.append(
                " ".join(str(a.get("value", a.get("description"))) for a in params["args"])
            )
        elif method == "Log.entryAdded" and params["entry"].get("level") == "error":
            # A file that did not load (with `Log.enable`): the browser's own error line.
            self.errors.append(f"{params['entry'].get('url', '')}: {params['entry'].get('text')}")

    def evaluate(self, expression: str) -> Any:
        """The value of a JavaScript expression in the page (awaited if it is a promise)."""
        result = self.send(
            "Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True
        )
        if "exceptionDetails" in result:
            text = f"{expression}: {result['exceptionDetails']}"
            raise (NavigatedAway if any(n in text for n in NAVIGATED) else AssertionError)(text)
        return result["result"].get("value")

    def wait_for(self, expression: str, timeout_s: float = 90) -> Any:
        """Poll until `expression` is truthy; its value."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            try:
                value = self.evaluate(expression)
            except NavigatedAway:
                value = None  # the page changed under the poll: ask the new one
            if value:
                return value
            time.sleep(0.5)
        raise AssertionError(f"not seen in {timeout_s:.0f}s: {expression}")

    def open(self, url: str) -> None:
        self.send("Page.navigate", url=url)

    def click(self, selector: str) -> None:
        """A mouse click at the middle of the first element `selector` finds, as a person's."""
        box = self.evaluate(
            f"(() => {{ const r = document.querySelector('{selector}').getBoundingClientRect();"
            " return [r.x + r.width / 2, r.y + r.height / 2]; })()"
        )
        for kind in ("mousePressed", "mouseReleased"):
            self.send(
                "Input.dispatchMouseEvent", type=kind, x=box[0], y=box[1], button="left",
                clickCount=1,
            )  # fmt: skip

    def type_text(self, text: str) -> None:
        self.send("Input.insertText", text=text)

    def press(self, key: str, code: str, key_code: int, *, ctrl: bool = False) -> None:
        """One key pressed and released (`ctrl`: with Control held, as Ctrl+S)."""
        modifiers = 2 if ctrl else 0
        for kind in ("rawKeyDown", "keyUp"):  # raw: a shortcut, no text typed
            self.send(
                "Input.dispatchKeyEvent", type=kind, key=key, code=code, modifiers=modifiers,
                windowsVirtualKeyCode=key_code, nativeVirtualKeyCode=key_code,
            )  # fmt: skip

    def screenshot(self, path: Path, *, full_page: bool = False) -> None:
        """A PNG of the viewport (`full_page`: of the whole page, as long as it is)."""
        import base64

        extra: dict[str, Any] = {}
        if full_page:
            size = self.send("Page.getLayoutMetrics")["cssContentSize"]
            clip = {"x": 0, "y": 0, "width": size["width"], "height": size["height"], "scale": 1}
            extra = {"clip": clip, "captureBeyondViewport": True}
        data = self.send("Page.captureScreenshot", format="png", **extra)["data"]
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(base64.b64decode(data))


@contextlib.contextmanager
def chromium_page(profile: Path) -> Iterator[Page]:
    """A headless Chromium with one blank page, stopped when the block ends."""
    import websocket

    chromium = shutil.which("chromium")
    if chromium is None:
        pytest.fail("chromium is not installed; run `make browser` (make test does)")
    argv = [
        chromium, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
        "--no-first-run", "--disable-background-networking", "--disable-component-update",
        "--disable-sync", "--disable-quic", "--remote-debugging-port=0",
        f"--user-data-dir={profile}", "--window-size=1280,900", "about:blank",
    ]  # fmt: skip
    process = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        active = profile / "DevToolsActivePort"
        deadline = time.monotonic() + 60
        while not (active.is_file() and active.read_text().strip()):
            assert time.monotonic() < deadline, "chromium wrote no DevToolsActivePort"
            time.sleep(0.2)
        port = active.read_text().split()[0]
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=10) as r:
            target = next(t for t in json.loads(r.read()) if t["type"] == "page")
        ws = websocket.create_connection(target["webSocketDebuggerUrl"], timeout=120)
        page = Page(ws)
        for domain in ("Page", "Runtime"):
            page.send(f"{domain}.enable")
        try:
            yield page
        finally:
            ws.close()
    finally:
        process.terminate()
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(timeout=30)
        if process.poll() is None:
            process.kill()
            process.wait()


DIRTY = (
    "(() => { const tab = document.querySelector('.lm-TabBar-tab.jp-mod-current');"
    " return !!tab && tab.classList.contains('jp-mod-dirty'); })()"
)
DIALOG = (
    "document.querySelector('.jp-Dialog') ? document.querySelector('.jp-Dialog').innerText : ''"
)
# The status bar's word on the last save: "Saving completed" or "Saving failed".
SAVED = (
    "((document.body.innerText.includes('Saving completed') && 'saved')"
    " || (document.body.innerText.includes('Saving failed') && 'Saving failed'))"
)


def save_a_notebook_through_the_ui(page: Page, base: str, token: str, code: str) -> str:
    """What a person does: open JupyterLab, click the launcher's Python notebook, type `code`
    into its first cell, press Ctrl+S. "" once JupyterLab says it saved (the tab is no longer
    status bar says "Saving completed"), else the text of the dialog or status it shows
    instead."""
    page.open(f"{base}/lab?token={token}")
    card = '.jp-LauncherCard[data-category="Notebook"]'
    page.wait_for(f"!!document.querySelector('{card}')")
    page.click(card)
    editor = ".jp-NotebookPanel .jp-Cell .cm-content"
    found = page.wait_for(f"document.querySelector('{editor}') ? 'editor' : ({DIALOG})")
    if found != "editor":
        return str(found)  # the notebook could not even be created
    page.click(editor)
    page.wait_for("document.activeElement.classList.contains('cm-content')")
    page.type_text(code)
    page.wait_for(DIRTY)
    said = None
    for _ in range(6):  # a shortcut pressed while JupyterLab still starts the kernel is lost
        page.press("s", "KeyS", 83, ctrl=True)
        with contextlib.suppress(AssertionError):
            said = page.wait_for(f"({DIALOG}) || {SAVED}", timeout_s=5)
            break
    if said is None:
        raise AssertionError("Ctrl+S was pressed six times and JupyterLab neither saved nor asked")
    if str(said).startswith("Rename file"):  # JupyterLab 4 offers a name at the first save
        page.evaluate("document.querySelector('.jp-Dialog .jp-mod-accept').click()")
        said = page.wait_for(f"(!({DIALOG}) && {SAVED}) || ({DIALOG})")
    return "" if said == "saved" else str(said)


# The run page (`imagekit report --html`) ------------------------------------------------------

GRID = """(() => Object.fromEntries([...document.querySelectorAll('#grid tr.image')].map((row) =>
  [row.dataset.image, Object.fromEntries([...row.querySelectorAll('td[data-column]')].map(
    (td) => [td.dataset.column, [td.dataset.state, td.innerText.trim()]]))])))()"""
# Each chart's drawn content: the polyline's points and the dots with a radius and a place.
CHARTS = """[...document.querySelectorAll('svg.chart')].map((svg) => {
  const line = svg.querySelector('polyline');
  const dots = [...svg.querySelectorAll('circle')].filter((c) => c.r.baseVal.value > 0);
  const box = svg.getBoundingClientRect();
  return {points: line ? line.getAttribute('points') : '', dots: dots.length,
          shown: box.width > 0 && box.height > 0};
})"""
READY = (
    "document.readyState === 'complete' && location.href.endsWith({!r})"
    " && !!document.querySelector({!r})"
)


def choose(page: Page, select: str, value: str) -> list[str]:
    """Choose `value` in the filter `select` (its id) as a person does; the images shown."""
    page.evaluate(
        f"(() => {{ const s = document.getElementById('{select}'); s.value = '{value}';"
        " s.dispatchEvent(new Event('change', {bubbles: true})); })()"
    )
    return list(
        page.evaluate(
            "[...document.querySelectorAll('#grid tr.image:not([hidden])')]"
            ".map((r) => r.dataset.image)"
        )
    )


def charts_drawn(page: Page) -> list[dict[str, Any]]:
    """Every chart of the page; AssertionError unless each is shown and has drawn content."""
    charts = list(page.evaluate(CHARTS))
    for chart in charts:
        assert chart["shown"] and (chart["points"].strip() or chart["dots"]), chart
    return charts


def check_the_run_page(
    page: Page, index: Path, expected: dict[str, dict[str, str]], shots: Path
) -> None:
    """What a person does with the run page: open `index` from the file system, find every
    image of `expected` ({image: {probe: state}}) and each probe's state in the grid, in words,
    see the charts drawn, filter by flavour, click through to an image's page and back. The
    page raises no error and loads every file it names; screenshots go to `shots`."""
    page.send("Log.enable")
    page.open(index.as_uri())
    page.wait_for(READY.format("index.html", "#grid"))
    grid = page.evaluate(GRID)
    assert set(grid) == set(expected), f"images in the page: {sorted(grid)}"
    for image, probes in expected.items():
        for probe, state in probes.items():
            assert grid[image].get(probe) == [state, state], (image, probe, grid[image].get(probe))
    assert len(charts_drawn(page)) >= len(expected), "fewer charts than images"
    page.screenshot(shots / "run-page-index.png", full_page=True)

    flavours = {image: page.evaluate(
        f"document.querySelector('#grid tr[data-image=\"{image}\"]').dataset.flavour"
    ) for image in expected}  # fmt: skip
    flavour = sorted(flavours.values())[0]
    shown = choose(page, "f-flavour", flavour)
    assert sorted(shown) == sorted(i for i, f in flavours.items() if f == flavour)
    assert sorted(choose(page, "f-flavour", "")) == sorted(expected)

    image = sorted(expected)[0]
    page.click(f'#grid a[href="image/{image}.html"]')
    page.wait_for(READY.format(f"{image}.html", "#probes"))
    assert image in page.evaluate("document.querySelector('h1').innerText")
    states = page.evaluate(
        "Object.fromEntries([...document.querySelectorAll('#probes tr[data-probe]')].map("
        "(r) => [r.dataset.probe, r.querySelector('td.state').innerText.trim()]))"
    )
    assert states == {p: s for p, s in expected[image].items() if s != "not run"}, states
    assert charts_drawn(page), "the image's page draws no chart"
    page.screenshot(shots / "run-page-image.png", full_page=True)

    page.click("#back")
    page.wait_for(READY.format("index.html", "#grid"))
    assert set(page.evaluate(GRID)) == set(expected)
    assert page.errors == [], page.errors
