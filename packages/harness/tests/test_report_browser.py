"""The HTML report in a real browser: headless Chromium over the DevTools protocol, on a pipe.

Skipped where no Chromium or Chrome is installed. Screenshots at 1400 px and at
phone width go to the repository's untracked out/.
"""

from __future__ import annotations

import base64
import fcntl
import json
import os
import select
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from popxl_addons.harness import Case, Outcome, TensorReport
from popxl_addons.harness.plot import plot_schedules
from popxl_addons.harness.report import write_html
from popxl_addons.harness.schedule import Event
from popxl_addons.layers import Linear, Scale

BROWSERS = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
BROWSER = next((path for name in BROWSERS if (path := shutil.which(name))), None)
OUT = Path(__file__).resolve().parents[3] / "out"
# As root in a container with the network closed: no sandbox, no GPU, and nothing that calls home.
FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--remote-debugging-pipe",
)
# Chromium reads the protocol from fd 3 and writes it to fd 4: this puts the pipe's ends there, then runs it.
LAUNCH = (
    "import os, sys; os.dup2(int(sys.argv[1]), 3); os.dup2(int(sys.argv[2]), 4); os.execv(sys.argv[3], sys.argv[3:])"
)

pytestmark = pytest.mark.skipif(
    BROWSER is None, reason=f"no headless browser: none of {', '.join(BROWSERS)} is on PATH (apt-get install chromium)"
)


class Chromium:
    """A headless Chromium with one page, driven over the DevTools protocol (JSON messages ending in NUL)."""

    def __init__(self, executable: str, profile: Path) -> None:
        command_r, command_w = os.pipe()
        reply_r, reply_w = os.pipe()
        # Moved to 10 or above, so that putting the child's ends on 3 and 4 overwrites neither.
        child_r, child_w = (fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 10) for fd in (command_r, reply_w))
        for fd in (command_r, reply_w):
            os.close(fd)
        args = [sys.executable, "-c", LAUNCH, str(child_r), str(child_w), executable, *FLAGS]
        self.process = subprocess.Popen(
            [*args, f"--user-data-dir={profile}", "about:blank"],
            pass_fds=(child_r, child_w),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        os.close(child_r)
        os.close(child_w)
        self.writer, self.reader = command_w, reply_r
        self.buffer = b""
        self.last_id = 0
        self.events: list[dict[str, Any]] = []
        # Commands go to the browser until a page is attached, then to the page (Target.* always to the browser).
        self.session: str | None = None
        target = self.send("Target.createTarget", url="about:blank")["targetId"]
        self.session = self.send("Target.attachToTarget", targetId=target, flatten=True)["sessionId"]
        for domain in ("Page", "Runtime", "Log"):
            self.send(f"{domain}.enable")

    def _message(self, deadline: float) -> dict[str, Any]:
        while b"\0" not in self.buffer:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self.reader], [], [], left)[0]:
                raise TimeoutError("Chromium did not answer in time")
            chunk = os.read(self.reader, 1 << 20)
            if not chunk:
                raise RuntimeError("Chromium closed its end of the pipe")
            self.buffer += chunk
        message, _, self.buffer = self.buffer.partition(b"\0")
        return json.loads(message)  # type: ignore[no-any-return]

    def send(self, method: str, timeout: float = 20, **params: Any) -> dict[str, Any]:
        """Call a protocol method (on the page once attached) and return its result; events are kept."""
        self.last_id += 1
        message: dict[str, Any] = {"id": self.last_id, "method": method, "params": params}
        if self.session is not None and not method.startswith("Target."):
            message["sessionId"] = self.session
        data = json.dumps(message).encode() + b"\0"
        while data:
            data = data[os.write(self.writer, data) :]
        deadline = time.monotonic() + timeout
        while True:
            reply = self._message(deadline)
            if reply.get("id") != self.last_id:
                self.events.append(reply)
            elif "error" in reply:
                raise RuntimeError(f"{method}: {reply['error']}")
            else:
                return reply.get("result", {})  # type: ignore[no-any-return]

    def wait_for(self, method: str, timeout: float = 20) -> dict[str, Any]:
        """The first kept or coming event named `method`, taken off the list."""
        deadline = time.monotonic() + timeout
        while True:
            for event in self.events:
                if event.get("method") == method:
                    self.events.remove(event)
                    return event
            self.events.append(self._message(deadline))

    def open(self, path: Path, width: int, height: int, mobile: bool) -> None:
        """Load `path` in a viewport of `width` x `height` CSS pixels."""
        self.send("Emulation.setDeviceMetricsOverride", width=width, height=height, deviceScaleFactor=1, mobile=mobile)
        self.send("Page.navigate", url=path.resolve().as_uri())
        self.wait_for("Page.loadEventFired")

    def js(self, expression: str) -> Any:
        """The value of a JavaScript expression in the page."""
        result = self.send("Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True)
        if "exceptionDetails" in result:
            raise AssertionError(f"{expression}: {result['exceptionDetails']}")
        return result["result"].get("value")

    def click(self, selector: str) -> None:
        """Click the middle of the element `selector` with the mouse, as a user would."""
        element = f"document.querySelector({json.dumps(selector)})"
        self.js(f"{element}.scrollIntoView({{block: 'center'}})")
        x, y = self.js(f"(r => [r.x + r.width / 2, r.y + r.height / 2])({element}.getBoundingClientRect())")
        for kind in ("mousePressed", "mouseReleased"):
            self.send("Input.dispatchMouseEvent", type=kind, x=x, y=y, button="left", clickCount=1)

    def type(self, selector: str, text: str) -> None:
        """Click into the field `selector` and type `text`."""
        self.click(selector)
        self.send("Input.insertText", text=text)

    def screenshot(self, path: Path) -> None:
        """Write what the viewport shows as a PNG."""
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(base64.b64decode(self.send("Page.captureScreenshot", format="png")["data"]))

    def problems(self) -> list[str]:
        """Console errors and uncaught exceptions so far."""
        found = []
        for event in self.events:
            method, params = event.get("method"), event.get("params", {})
            if method == "Runtime.exceptionThrown":
                found.append(str(params["exceptionDetails"]))
            elif method == "Runtime.consoleAPICalled" and params.get("type") in ("error", "assert"):
                found.append(str(params.get("args")))
            elif method == "Log.entryAdded" and params["entry"].get("level") == "error":
                found.append(str(params["entry"]))
        return found

    def close(self) -> None:
        """Close the browser, killing it if it does not go."""
        try:
            self.session = None
            self.send("Browser.close", timeout=5)
        except (OSError, RuntimeError, TimeoutError):
            pass
        try:
            self.process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        os.close(self.writer)
        os.close(self.reader)


def _outcomes() -> list[Outcome]:
    """Two cases' results, made up: passes with varied figures, a skip, a failure and an error."""
    scale = Case("scale", lambda layout: Scale(), (2, 2), steps=(1, 4), rows=(1, 2), remote_memories=("host",))
    grad = Case("linear_grad", lambda layout: Linear(2), (2, 2), grad=True, steps=(2,), rows=(1, 2))
    outcomes = []
    for i, v in enumerate([*scale.variants(), *grad.variants()]):
        if v.skip_reason is not None:
            outcomes.append(Outcome(v, skipped=v.skip_reason))
            continue
        # Figures out of run order, so that sorting visibly moves rows.
        device = 24 + (i * 7919) % 5000 * v.steps
        memory = {
            "normal": {"device_bytes": 24 * v.rows, "host_bytes": 64, "temp": 0},
            "serialised": {"device_bytes": device, "host_bytes": 128, "temp": device // 2},
        }
        seconds = {"normal": 2.5e-4 * v.rows, "serialised": 2.5e-4 * v.rows * (0.8 + (i % 5) / 10)}
        tensors = [TensorReport("y", 1e-7 * i, 2e-7 * i, (0, 1), True)]
        if v.case.grad:
            tensors.append(TensorReport("dx", 3e-8 * i, 1e-7, (1, 0), True))
        outcomes.append(Outcome(v, tensors, memory, seconds))
    failing = next(o for o in outcomes if o.variant.id == "scale[io-steps4-rows2]")
    failing.tensors = [TensorReport("y", 0.5, 1.0, (1, 1), False)]
    erring = next(o for o in outcomes if o.variant.id == "linear_grad[compute-steps2-rows2-device]")
    erring.tensors, erring.memory, erring.seconds = [], {}, {}
    erring.error = 'Traceback (most recent call last):\n  File "x.py", line 1\nValueError: no such slot 7'
    return outcomes


def _schedule_png(path: Path) -> dict[str, Any]:
    lanes = ("load", "compute", "store")
    events = [Event(lane, step, 3 * step + k, "io") for step in range(2) for k, lane in enumerate(lanes)]
    plot_schedules({("scale, 2 steps", "io"): {"forward": events}}, path)
    panel = {"case": "scale", "io_mode": "io", "steps": 2, "variant": "scale[io-steps2-rows1]"}
    return {"path": str(path), "panels": [panel]}


def _shown(table: str, cell: str) -> str:
    """JavaScript: `cell` (an expression of the row `r`) for each row of `table` shown, in order."""
    return f"Array.from(document.querySelectorAll('{table} tbody tr')).filter(r => !r.hidden).map(r => {cell})"


def _all(selector: str, value: str) -> str:
    """JavaScript: `value` (an expression of the element `e`) for each element matching `selector`."""
    return f"Array.from(document.querySelectorAll({json.dumps(selector)})).map(e => {value})"


def test_the_report_reads_sorts_and_filters_in_chromium(tmp_path: Path) -> None:
    assert BROWSER is not None
    page = tmp_path / "report.html"
    write_html(_outcomes(), page, _schedule_png(tmp_path / "schedule.png"))
    browser = Chromium(BROWSER, tmp_path / "profile")
    try:
        browser.open(page, 1400, 900, mobile=False)
        # The summary names every case; failures and errors come before the cases, with their messages.
        assert browser.js(_all("table.summary tbody th", "e.textContent")) == ["scale", "linear_grad"]
        assert browser.js(_all("main > section", "e.id")) == ["summary", "problems", "cases", "schedules"]
        problems = browser.js("document.getElementById('problems').innerText")
        assert "scale[io-steps4-rows2]" in problems and "y differs by 0.5" in problems
        assert "linear_grad[compute-steps2-rows2-device]" in problems and "ValueError: no such slot 7" in problems
        charts = "e.checkVisibility() && e.querySelectorAll('svg.chart').length"
        assert browser.js(_all("section.case", charts)) == [2, 2]
        assert browser.js("document.querySelector('#schedules img').naturalWidth") > 0
        browser.screenshot(OUT / "report_screenshot.png")

        # A case's table is collapsed until its summary is clicked.
        table = "#t-case-scale"
        visible = f"document.querySelector('{table}').checkVisibility()"
        assert not browser.js(visible)
        browser.click("#case-scale details.variants > summary")
        assert browser.js(visible)
        # The first "serialised" column: device bytes.
        column = browser.js(_all(f"{table} thead th[data-col]", "e.textContent")).index("serialised")
        figures = _shown(table, f"r.cells[{column}].getAttribute('data-v')")
        before = browser.js(figures)
        measured = sorted(float(v) for v in before if v)
        browser.click(f"{table} th[data-col='{column}'] button")
        after = browser.js(figures)
        # Ascending, the unmeasured (skipped) variants last.
        assert after != before and [float(v) for v in after[: len(measured)]] == measured
        readings = browser.js(_shown(table, f"r.cells[{column}].textContent"))
        assert readings[0] == "24 B" and all(r.endswith((" B", " KiB", "\u2013")) for r in readings)
        assert after[len(measured) :] == [""] * (len(after) - len(measured))
        browser.click(f"{table} th[data-col='{column}'] button")
        assert [float(v) for v in browser.js(figures)[: len(measured)]] == measured[::-1]

        browser.type("input[data-filter='t-case-scale']", "steps4 rows2")
        shown = browser.js(_shown(table, "r.title"))
        assert sorted(shown) == [f"scale[{mode}-steps4-rows2]" for mode in ("compute", "io", "io_overlapped")]
        assert browser.js("document.getElementById('t-case-scale-shown').textContent") == "3 of 12 shown"

        # At phone width, nothing but the tables' own boxes scrolls sideways.
        browser.open(page, 420, 900, mobile=True)
        assert browser.js("document.documentElement.scrollWidth") <= 420
        browser.screenshot(OUT / "report_screenshot_phone.png")
        assert browser.problems() == []
    finally:
        browser.close()
