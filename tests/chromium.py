"""Headless Chromium driven over the DevTools protocol, for the server's page test.

Debian's `chromium` runs with `--remote-debugging-pipe`: it reads protocol
commands (JSON, each ended by a NUL byte) on file descriptor 3 and writes
answers and events on 4.  It is started with two pipes on those numbers,
so no port is opened and nothing but Python's standard library is needed.  Every read has a deadline; the browser runs
in a fresh profile folder, offline (no first-run, sync, updates or
background requests) and is killed on exit.
"""

import json
import os
import select
import signal
import time

CHROMIUM = "/usr/bin/chromium"
FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--remote-debugging-pipe")


class HeadlessChromium:
    """A browser and one page (`session`) attached to it.

    Args:
        profile: An empty folder for the browser's profile.
        timeout: Seconds any one command may take.
    """

    def __init__(self, profile, timeout=30):
        self.timeout = timeout
        commands_read, self._commands = os.pipe()
        self._answers, answers_write = os.pipe()
        arguments = [CHROMIUM, *FLAGS, f"--user-data-dir={profile}", "about:blank"]
        # posix_spawn puts the pipes on 3 and 4 in the child only (no fork of
        # this threaded process); every other descriptor of ours is closed at exec.
        self.pid = os.posix_spawn(CHROMIUM, arguments, os.environ, file_actions=[
            (os.POSIX_SPAWN_DUP2, commands_read, 3), (os.POSIX_SPAWN_DUP2, answers_write, 4),
            (os.POSIX_SPAWN_OPEN, 1, os.devnull, os.O_WRONLY, 0),
            (os.POSIX_SPAWN_OPEN, 2, os.devnull, os.O_WRONLY, 0)])
        os.close(commands_read)
        os.close(answers_write)
        self._buffer = b""
        self._next_id = 0
        self.session = None

    def call(self, method, session=None, **params):
        """Sends one command and returns its result (raises on a protocol error)."""
        self._next_id += 1
        message = {"id": self._next_id, "method": method, "params": params}
        if session:
            message["sessionId"] = session
        os.write(self._commands, json.dumps(message).encode() + b"\0")
        deadline = time.monotonic() + self.timeout
        while True:
            answer = self._read(deadline)
            if answer.get("id") == self._next_id:
                if "error" in answer:
                    raise RuntimeError(f"{method}: {answer['error']}")
                return answer.get("result", {})

    def _read(self, deadline):
        while b"\0" not in self._buffer:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self._answers], [], [], left)[0]:
                raise TimeoutError("Chromium did not answer in time")
            chunk = os.read(self._answers, 1 << 16)
            if not chunk:
                raise RuntimeError("Chromium closed its pipe")
            self._buffer += chunk
        message, self._buffer = self._buffer.split(b"\0", 1)
        return json.loads(message)

    def open(self, url):
        """Opens `url` in a new page and attaches to it."""
        target = self.call("Target.createTarget", url=url)["targetId"]
        self.session = self.call("Target.attachToTarget", targetId=target,
                                 flatten=True)["sessionId"]

    def evaluate(self, expression):
        """The value of a JavaScript expression in the page."""
        result = self.call("Runtime.evaluate", self.session, expression=expression,
                           returnByValue=True, awaitPromise=True)
        if "exceptionDetails" in result:
            raise RuntimeError(f"{expression}: {result['exceptionDetails']}")
        return result["result"].get("value")

    def wait_for(self, expression, timeout=None):
        """Polls `expression` until it is truthy; returns its value."""
        deadline = time.monotonic() + (timeout or self.timeout)
        while time.monotonic() < deadline:
            value = self.evaluate(expression)
            if value:
                return value
            time.sleep(0.05)
        raise TimeoutError(f"{expression} stayed false")

    def type_text(self, text):
        """Types `text` into the focused element, as a keyboard would."""
        self.call("Input.insertText", self.session, text=text)

    def click(self, selector):
        """A mouse click at the middle of the element `selector`."""
        box = self.evaluate(f"(() => {{ const r = document.querySelector({json.dumps(selector)})"
                            ".getBoundingClientRect(); return [r.x + r.width / 2, "
                            "r.y + r.height / 2]; })()")
        for kind in ("mousePressed", "mouseReleased"):
            self.call("Input.dispatchMouseEvent", self.session, type=kind, x=box[0], y=box[1],
                      button="left", clickCount=1)

    def close(self):
        try:
            self.call("Browser.close")
        except (OSError, RuntimeError, TimeoutError):
            pass
        deadline = time.monotonic() + 10
        while os.waitpid(self.pid, os.WNOHANG) == (0, 0):
            if time.monotonic() > deadline:
                os.kill(self.pid, signal.SIGKILL)
                os.waitpid(self.pid, 0)
                break
            time.sleep(0.05)
        os.close(self._commands)
        os.close(self._answers)

    def __enter__(self):
        return self

    def __exit__(self, *exc_info):
        self.close()
