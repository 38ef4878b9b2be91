"""A headless Chromium driven through chromedriver's W3C WebDriver HTTP API, with the standard library only.

For the page tests (tests/test_page.py): Debian's `chromium` and `chromium-driver` packages (.ci/run installs them).
`find_browser()` says why a test must skip when they are missing.
"""

from __future__ import annotations

import base64
import json
import shutil
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

ELEMENT = "element-6066-11e4-a52e-4f735466cecf"  # the W3C key of an element reference
# Chromium started clean and alone: no sandbox (root in CI), no GPU, nothing fetched in the background, a new
# empty profile each time (added in Browser.__init__).
ARGS = [
    "--headless=new",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]


def find_browser() -> tuple[str | None, str | None, str]:
    """(chromium, chromedriver, why not): the two programs' paths, or a reason to skip naming what is missing."""
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    driver = shutil.which("chromedriver")
    missing = [name for name, path in (("chromium", chromium), ("chromium-driver", driver)) if path is None]
    why = f"no headless browser: install Debian's {' and '.join(missing)} (apt-get install -y chromium chromium-driver)"
    return chromium, driver, why if missing else ""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Browser:
    """One chromedriver process and one Chromium session; close() ends both (use it as a context manager)."""

    def __init__(self, chromium: str, driver: str, width: int = 1366, height: int = 900) -> None:
        self.profile = tempfile.mkdtemp(prefix="memprobe-chromium-")
        port = _free_port()
        self.base = f"http://127.0.0.1:{port}"
        self.driver = subprocess.Popen([driver, f"--port={port}"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.session = ""
        try:
            self._wait_ready()
            options = {
                "binary": chromium,
                "args": [*ARGS, f"--user-data-dir={self.profile}", f"--window-size={width},{height}"],
            }
            caps = {"browserName": "chrome", "goog:chromeOptions": options, "goog:loggingPrefs": {"browser": "ALL"}}
            answer = self._call("POST", "/session", {"capabilities": {"alwaysMatch": caps}})
            self.session = answer["sessionId"]
        except BaseException:
            self.close()
            raise

    def _wait_ready(self, timeout: float = 30.0) -> None:
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            try:
                if self._call("GET", "/status").get("ready"):
                    return
            except (OSError, urllib.error.URLError):
                pass
            if self.driver.poll() is not None:
                raise RuntimeError(f"chromedriver exited with {self.driver.returncode}")
            time.sleep(0.2)
        raise RuntimeError("chromedriver did not get ready in 30 s")

    def _call(self, method: str, path: str, body: Any = None) -> Any:
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(self.base + path, data=data, method=method)
        request.add_header("Content-Type", "application/json")
        try:
            with urllib.request.urlopen(request, timeout=120) as response:
                return json.loads(response.read() or b"{}").get("value")
        except urllib.error.HTTPError as exc:
            raise RuntimeError(f"{method} {path}: {exc.code} {exc.read()[:500]!r}") from None

    def call(self, method: str, path: str, body: Any = None) -> Any:
        """A command of this session: `path` after /session/<id>."""
        return self._call(method, f"/session/{self.session}{path}", body)

    def open(self, url: str) -> None:
        self.call("POST", "/url", {"url": url})

    def run(self, script: str, *args: Any) -> Any:
        """Run `script` (a function body; `arguments` holds args) in the page; its return value."""
        return self.call("POST", "/execute/sync", {"script": script, "args": list(args)})

    def find(self, css: str) -> dict[str, str]:
        """The first element matching `css` (a reference to pass to click, hover or run)."""
        return self.call("POST", "/element", {"using": "css selector", "value": css})

    def click(self, element: dict[str, str]) -> None:
        self.call("POST", f"/element/{element[ELEMENT]}/click", {})

    def hover(self, element: dict[str, str]) -> None:
        """Move the mouse onto the element's centre, as a person does."""
        move = {"type": "pointerMove", "duration": 0, "origin": element, "x": 0, "y": 0}
        actions = [{"type": "pointer", "id": "mouse", "parameters": {"pointerType": "mouse"}, "actions": [move]}]
        self.call("POST", "/actions", {"actions": actions})

    def console(self) -> list[dict[str, Any]]:
        """The browser's console entries since the last call (level, message)."""
        return self.call("POST", "/se/log", {"type": "browser"}) or []

    def screenshot(self, path: Path) -> Path:
        path.write_bytes(base64.b64decode(self.call("GET", "/screenshot")))
        return path

    def close(self) -> None:
        try:
            if self.session:
                self.call("DELETE", "")
        finally:
            self.driver.terminate()
            try:
                self.driver.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.driver.kill()
                self.driver.wait()
            shutil.rmtree(self.profile, ignore_errors=True)

    def __enter__(self) -> Browser:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
