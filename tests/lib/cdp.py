"""A headless Chromium driven over the DevTools protocol, with the standard library only.

    with Browser(tmpdir) as b:
        page = b.page()
        page.navigate("http://127.0.0.1:8080/")
        page.wait_for("document.getElementById('x') !== null", timeout=10)
        page.eval("document.title")

find_chromium() names the browser (Debian's `chromium`), or None. The page records console
errors (console.error, uncaught exceptions, and the browser's own error entries: failed loads,
Content-Security-Policy violations) in page.errors, and JavaScript dialogs (alert, confirm) in
page.dialogs, which it dismisses. Every wait is bounded."""
import base64
import json
import os
import shutil
import socket
import struct
import subprocess
import time
import urllib.request


def find_chromium():
    for name in ("chromium", "chromium-browser", "google-chrome"):
        path = shutil.which(name)
        if path:
            return path
    return None


class WebSocket:
    """A client WebSocket (RFC 6455) for ws://host:port/path: text messages only."""

    def __init__(self, url, timeout=30):
        assert url.startswith("ws://")
        hostport, _, path = url[5:].partition("/")
        host, port = hostport.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=timeout)
        key = base64.b64encode(os.urandom(16)).decode()
        self.sock.sendall(("GET /%s HTTP/1.1\r\nHost: %s\r\nUpgrade: websocket\r\n"
                           "Connection: Upgrade\r\nSec-WebSocket-Key: %s\r\n"
                           "Sec-WebSocket-Version: 13\r\n\r\n" % (path, hostport, key)).encode())
        head = b""
        while b"\r\n\r\n" not in head:
            chunk = self.sock.recv(4096)
            if not chunk:
                raise ConnectionError("websocket: closed during the handshake")
            head += chunk
        head, _, self.buf = head.partition(b"\r\n\r\n")
        if not head.startswith(b"HTTP/1.1 101"):
            raise ConnectionError("websocket: %r" % head[:200])

    def send(self, text):
        data = text.encode()
        mask = os.urandom(4)
        n = len(data)
        if n < 126:
            hdr = struct.pack("!BB", 0x81, 0x80 | n)
        elif n < 65536:
            hdr = struct.pack("!BBH", 0x81, 0x80 | 126, n)
        else:
            hdr = struct.pack("!BBQ", 0x81, 0x80 | 127, n)
        masked = bytes(b ^ mask[i % 4] for i, b in enumerate(data))
        self.sock.sendall(hdr + mask + masked)

    def _read(self, n):
        while len(self.buf) < n:
            chunk = self.sock.recv(65536)
            if not chunk:
                raise ConnectionError("websocket: closed")
            self.buf += chunk
        out, self.buf = self.buf[:n], self.buf[n:]
        return out

    def recv(self, timeout):
        """The next text message, or None when none arrives within timeout seconds."""
        self.sock.settimeout(timeout)
        message = b""
        try:
            while True:
                b0, b1 = self._read(2)
                n = b1 & 0x7F
                if n == 126:
                    n = struct.unpack("!H", self._read(2))[0]
                elif n == 127:
                    n = struct.unpack("!Q", self._read(8))[0]
                payload = self._read(n)
                op = b0 & 0x0F
                if op == 8:
                    raise ConnectionError("websocket: closed by the browser")
                if op in (9, 10):
                    continue  # ping, pong
                message += payload
                if b0 & 0x80:
                    return message.decode()
        except socket.timeout:
            return None

    def close(self):
        self.sock.close()


class Page:
    def __init__(self, ws_url):
        self.ws = WebSocket(ws_url)
        self.next_id = 0
        self.errors = []
        self.dialogs = []
        self.events = []
        for domain in ("Page", "Runtime", "Log"):
            self.call(domain + ".enable")

    def _event(self, msg):
        method, p = msg.get("method"), msg.get("params", {})
        if method == "Runtime.consoleAPICalled" and p.get("type") in ("error", "assert"):
            self.errors.append("console.%s: %s" % (p["type"], " ".join(
                str(a.get("value", a.get("description", ""))) for a in p.get("args", []))))
        elif method == "Runtime.exceptionThrown":
            d = p.get("exceptionDetails", {})
            self.errors.append("exception: %s" % d.get("exception", {}).get(
                "description", d.get("text")))
        elif method == "Log.entryAdded" and p.get("entry", {}).get("level") == "error":
            e = p["entry"]
            self.errors.append("%s: %s (%s)" % (e.get("source"), e.get("text"), e.get("url", "")))
        elif method == "Page.javascriptDialogOpening":
            self.dialogs.append(p.get("message"))
            self.send("Page.handleJavaScriptDialog", {"accept": False})
        self.events.append(method)

    def send(self, method, params=None):
        self.next_id += 1
        self.ws.send(json.dumps({"id": self.next_id, "method": method, "params": params or {}}))
        return self.next_id

    def call(self, method, params=None, timeout=30):
        want = self.send(method, params)
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError("%s: no answer within %d s" % (method, timeout))
            raw = self.ws.recv(left)
            if raw is None:
                continue
            msg = json.loads(raw)
            if msg.get("id") == want:
                if "error" in msg:
                    raise RuntimeError("%s: %s" % (method, msg["error"]))
                return msg.get("result", {})
            if "method" in msg:
                self._event(msg)

    def pump(self, seconds):
        """Handles events for that long."""
        deadline = time.monotonic() + seconds
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                return
            raw = self.ws.recv(left)
            if raw is not None:
                msg = json.loads(raw)
                if "method" in msg:
                    self._event(msg)

    def eval(self, expr):
        r = self.call("Runtime.evaluate", {"expression": expr, "returnByValue": True,
                                           "awaitPromise": True})
        if "exceptionDetails" in r:
            raise RuntimeError("%s: %s" % (expr, r["exceptionDetails"]))
        return r.get("result", {}).get("value")

    def wait_for(self, expr, timeout=30, what=None):
        """Polls expr until it is truthy; returns its value. An expression that throws (the page
        is still loading) counts as false."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                v = self.eval(expr)
            except RuntimeError:
                v = None
            if v:
                return v
            if time.monotonic() > deadline:
                raise TimeoutError("%s: not true within %d s (console errors: %s)" % (
                    what or expr, timeout, self.errors))
            self.pump(0.1)

    def navigate(self, url):
        self.call("Page.navigate", {"url": url})

    def screenshot(self, path, width=1280, height=900):
        self.call("Emulation.setDeviceMetricsOverride",
                  {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": False})
        r = self.call("Page.captureScreenshot", {"format": "png"})
        with open(path, "wb") as f:
            f.write(base64.b64decode(r["data"]))

    def close(self):
        self.ws.close()


class Browser:
    """Headless Chromium with a fresh profile under tmp, started for a with block."""

    def __init__(self, tmp, binary=None):
        self.tmp = tmp
        self.binary = binary or find_chromium()
        self.proc = None

    def __enter__(self):
        profile = os.path.join(self.tmp, "chromium-profile")
        os.makedirs(profile, exist_ok=True)
        self.log = open(os.path.join(self.tmp, "chromium.log"), "wb")
        self.proc = subprocess.Popen(
            [self.binary, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
             "--no-default-browser-check", "--disable-extensions",
             "--disable-background-networking", "--disable-component-update",
             "--disable-sync", "--disable-dev-shm-usage", "--remote-debugging-port=0",
             "--user-data-dir=" + profile, "about:blank"],
            stdout=self.log, stderr=self.log, stdin=subprocess.DEVNULL)
        port_file = os.path.join(profile, "DevToolsActivePort")
        deadline = time.monotonic() + 60
        while not (os.path.exists(port_file) and open(port_file).read().strip()):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("chromium did not start: %s" % self.tail())
            time.sleep(0.1)
        self.port = int(open(port_file).read().split()[0])
        return self

    def tail(self):
        with open(os.path.join(self.tmp, "chromium.log"), errors="replace") as f:
            return f.read()[-2000:]

    def page(self):
        deadline = time.monotonic() + 30
        while True:
            with urllib.request.urlopen("http://127.0.0.1:%d/json/list" % self.port,
                                        timeout=10) as r:
                targets = [t for t in json.load(r) if t.get("type") == "page"]
            if targets:
                return Page(targets[0]["webSocketDebuggerUrl"])
            if time.monotonic() > deadline:
                raise RuntimeError("chromium has no page")
            time.sleep(0.1)

    def __exit__(self, *exc):
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()
