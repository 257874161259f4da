#!/usr/bin/python3
"""The dispatcher's dashboard and the Grafana dashboard, against a live cluster.

Usage: test_dashboard.py BUILD_DIR SOURCE_DIR (browser|grafana)

Both parts start a dispatcher with a token and one worker on loopback (port 0, the addresses
read from their `listening on` and `metrics on` lines) and two reads: a slow one, under the job
name <script>alert(1)</script>, still running while the checks look, and one that fails on its
first element.

browser: /api/status answers 401 without the token and, with it, the document `sluice status
--json` prints; a headless Chromium (Debian's `chromium`, over the DevTools protocol) shows the
login without the token, then, signed in through it, loads the page without console errors,
shows the slow job with an element count that grows across two refreshes, its name as text (no
script ran, no element was made of it), the failed job's message, and a worker's page; then
/api/history shows the slow job serving at a rate above 0 within a few samples. A screenshot
of the overview goes to BUILD_DIR/dashboard-overview.png. Without a browser the part is skipped
(exit 77) with a message saying so, unless SLUICE_REQUIRE_BROWSER is set (as scripts/test.sh
does after installing it), which makes that a failure.

grafana: every sluice_* metric that deploy/grafana/sluice.json queries is in the /metrics of
the dispatcher or of the worker.
"""
import http.client
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import cdp  # noqa: E402

TOKEN = "dashboard-test-token-6d1f"
SLOW_NAME = "<script>alert(1)</script>"
SKIP = 77


def fail(msg):
    print("FAIL: " + msg, flush=True)
    sys.exit(1)


# The servers are started and read as scripts/gen-docs.py does for the metrics reference.
_spec = importlib.util.spec_from_file_location(
    "gen_docs", os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts",
                             "gen-docs.py"))
gen_docs = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(gen_docs)
clean_env = gen_docs.clean_env


class Proc(gen_docs.Server):
    """A binary started with port 0; its stdout lines read as they come."""

    def wait_line(self, pattern, timeout=30):
        try:
            return super().wait_line(pattern, timeout)
        except gen_docs.GenError as e:
            fail(str(e))


def get(addr, path, token=None, method="GET"):
    host, port = addr.rsplit(":", 1)
    c = http.client.HTTPConnection(host, int(port), timeout=20)
    try:
        headers = {"Authorization": "Bearer " + token} if token else {}
        c.request(method, path, headers=headers)
        r = c.getresponse()
        return r.status, dict(r.getheaders()), r.read().decode(errors="replace")
    finally:
        c.close()


class Cluster:
    def __init__(self, bindir, tmp):
        self.bindir, self.tmp = bindir, tmp
        self.procs = []
        self.tokfile = os.path.join(tmp, "token")
        with open(self.tokfile, "w") as f:
            f.write(TOKEN)
        os.chmod(self.tokfile, 0o600)

    def start(self):
        d = Proc([os.path.join(self.bindir, "sluice-dispatcher"), "--port", "0", "--metrics-port",
                  "0", "--auth-token-file", self.tokfile, "--job-gc-timeout-ms", "600000",
                  "--log-level", "warn"], "sluice-dispatcher", self.tmp)
        self.procs.append(d)
        self.daddr = d.wait_line(r" listening on (\S+)$").group(1)
        self.metrics = d.wait_line(r" metrics on (\S+)$").group(1)
        w = Proc([os.path.join(self.bindir, "sluice-worker"), "--dispatcher", self.daddr, "--port",
                  "0", "--metrics-port", "0", "--auth-token-file", self.tokfile,
                  "--drain-timeout-ms", "1000", "--log-level", "warn"], "sluice-worker", self.tmp)
        self.procs.append(w)
        self.waddr = w.wait_line(r" listening on (\S+)$").group(1)
        self.wmetrics = w.wait_line(r" metrics on (\S+)$").group(1)
        # The failing read first: its job is the first, and it fails on its first element.
        r = subprocess.run(self.sluice("read", "range(5) | pack(8)", "--format", "count"),
                           capture_output=True, text=True, timeout=60, env=clean_env())
        if r.returncode == 0 or "pack: element 0" not in r.stderr:
            fail("the failing read exited %d: %s" % (r.returncode, r.stderr))
        # About 500 elements/s for minutes: running all along the checks.
        slow = Proc(self.sluice("read", "--job-name", SLOW_NAME,
                                "range(1000000) | map(wait_us, 2000)", "--mode", "distributed_epoch",
                                "--format", "count"),
                    "sluice-read", self.tmp)
        self.procs.append(slow)
        deadline = time.monotonic() + 30
        while True:
            st = self.status()
            jobs = {j.get("name"): j for j in st.get("jobs", [])}
            if SLOW_NAME in jobs and jobs[SLOW_NAME].get("elements", 0) > 0:
                return
            if time.monotonic() > deadline:
                fail("the slow job served nothing within 30 s: %s" % json.dumps(st))
            time.sleep(0.2)

    def sluice(self, *args):
        return [os.path.join(self.bindir, "sluice"), args[0], "--dispatcher", self.daddr,
                "--auth-token-file", self.tokfile, "--timeout-ms", "20000", *args[1:]]

    def status(self):
        code, _, body = get(self.metrics, "/api/status", TOKEN)
        if code != 200:
            fail("GET /api/status with the token: %d %s" % (code, body))
        return json.loads(body)

    def stop(self):
        for p in reversed(self.procs):
            p.stop()


# Figures that move from one moment to the next; the rest of the document must be equal.
VOLATILE = {"elements_per_second", "bytes_per_second", "elements", "bytes", "buffered",
            "buffered_bytes", "heartbeat_age_ms", "recommended_workers", "clients", "splits",
            "copies_cut", "rounds", "worker_time_share"}


def stable(doc):
    if isinstance(doc, dict):
        return {k: stable(v) for k, v in doc.items() if k not in VOLATILE}
    if isinstance(doc, list):
        return [stable(v) for v in doc]
    return doc


def check_http(c):
    for path in ("/api/status", "/api/history"):
        code, headers, _ = get(c.metrics, path)
        if code != 401 or "Bearer" not in headers.get("WWW-Authenticate", ""):
            fail("GET %s without the token: %d %s" % (path, code, headers))
        code, _, _ = get(c.metrics, path, "wrong-token")
        if code != 401:
            fail("GET %s with a wrong token: %d" % (path, code))
    code, headers, body = get(c.metrics, "/")
    csp = headers.get("Content-Security-Policy", "")
    if code != 200 or "script-src 'self'" not in csp or "default-src 'none'" not in csp:
        fail("GET /: %d, Content-Security-Policy %r" % (code, csp))
    if re.search(r"<script(?![^>]*\bsrc=)[^>]*>", body) or re.search(r"\son[a-z]+=", body):
        fail("GET /: inline script or handler in %r" % body)
    for path, want in (("/app.js", 405), ("/nope", 404), ("/../app.js", 404)):
        code, _, _ = get(c.metrics, path, method="POST" if want == 405 else "GET")
        if code != want:
            fail("%s: %d, expected %d" % (path, code, want))
    # The same document as `sluice status --json`, taken just after it.
    r = subprocess.run(c.sluice("status", "--json"), capture_output=True, text=True, timeout=60,
                       env=clean_env())
    if r.returncode != 0:
        fail("sluice status --json: %s" % r.stderr)
    cli = json.loads(r.stdout)
    api = c.status()
    if stable(cli) != stable(api):
        fail("/api/status differs from sluice status --json:\n%s\n%s" % (
            json.dumps(stable(cli), sort_keys=True), json.dumps(stable(api), sort_keys=True)))
    code, _, body = get(c.metrics, "/api/history", TOKEN)
    hist = json.loads(body)
    if code != 200 or hist.get("span_ms") != 900000 or not hist.get("samples"):
        fail("GET /api/history: %d %s" % (code, body[:300]))
    print("ok: /api/status and /api/history need the token; /api/status is sluice status --json")


def check_history(c):
    """The charts' rates are differences of what the heartbeats reported served, between two
    samples (5 s apart): within a few samples of the slow job's start, one shows it serving, the
    cluster at least as fast, and a worker serving."""
    slow = next(j for j in c.status()["jobs"] if j.get("name") == SLOW_NAME)
    deadline = time.time() + 30
    while True:
        code, _, body = get(c.metrics, "/api/history", TOKEN)
        if code != 200:
            fail("GET /api/history: %d %s" % (code, body[:300]))
        samples = json.loads(body)["samples"]
        for s in samples:
            job = next((j for j in s["jobs"] if j["id"] == slow["id"]), None)
            if (job and job["elements_per_second"] > 0 and job["elements"] > 0
                    and s["elements_per_second"] >= job["elements_per_second"] - 1e-6
                    and any(w["elements_per_second"] > 0 for w in s["worker_rates"])):
                print("ok: /api/history shows the slow job at %.0f elements/s (%d samples)"
                      % (job["elements_per_second"], len(samples)))
                return
        if time.time() > deadline:
            fail("no sample of /api/history shows the slow job serving after 30 s: %s"
                 % body[:600])
        time.sleep(0.5)


def js_str(s):
    return json.dumps(s)


def check_browser(c, build, tmp):
    browser = cdp.find_chromium()
    base = "http://%s/" % c.metrics
    st = c.status()
    slow = next(j for j in st["jobs"] if j.get("name") == SLOW_NAME)
    failed = next(j for j in st["jobs"] if j.get("error"))
    worker = st["workers"][0]
    with cdp.Browser(tmp, browser) as b:
        page = b.page()
        # Without the token: the login, and no data.
        page.navigate(base)
        page.wait_for("document.getElementById('login') && !document.getElementById('login').hidden",
                      what="the login form shows")
        if page.eval("document.getElementById('view').childElementCount") != 0:
            fail("data shown without the token")
        if page.eval("sessionStorage.length") != 0:
            fail("session storage not empty before signing in")
        # Signing in through the form; the token goes to session storage, not into the URL.
        page.eval("document.getElementById('token').value = %s;"
                  "document.getElementById('login-form').requestSubmit(); true" % js_str(TOKEN))
        page.wait_for("document.getElementById('jobs') !== null", what="the jobs table shows")
        if page.eval("sessionStorage.getItem('sluice.token')") != TOKEN:
            fail("the token is not in session storage")
        if TOKEN in page.eval("location.href"):
            fail("the token is in the URL")
        # A fresh load with the token kept: no console errors from here on.
        page.errors.clear()
        page.call("Page.reload", {"ignoreCache": True})
        row = "document.querySelector('tr[data-job-id=\"%d\"]')" % slow["id"]
        page.wait_for(row + " !== null", what="the slow job's row")
        count = row + ".querySelector('.elements').getAttribute('data-value')"
        updated = "document.getElementById('updated').textContent"
        # Each refresh shows what the worker's last heartbeat reported: on a loaded machine two
        # refreshes may fall between the same two heartbeats, so equal counts are allowed, a
        # smaller one is not, and two refreshes must each show a larger count.
        seen = [int(page.wait_for(count, timeout=30))]
        stamp = page.eval(updated)
        deadline = time.monotonic() + 60
        while sum(b > a for a, b in zip(seen, seen[1:])) < 2:
            if time.monotonic() > deadline:
                fail("the element count did not grow across two refreshes within 60 s: %s" % seen)
            page.pump(0.2)
            now = page.eval(updated)
            if now != stamp:
                stamp = now
                seen.append(int(page.eval(count)))
                if seen[-1] < seen[-2]:
                    fail("the element count went back: %s" % seen)
        print("ok: the slow job's element count across refreshes: %s" % seen)
        # The job's name is text: shown as written, no element made of it, no script ran.
        name = page.eval(row + ".querySelector('.name').textContent")
        if name != SLOW_NAME:
            fail("the job's name shows as %r" % name)
        if page.eval("document.querySelectorAll('script').length") != 2:
            fail("a script element was made from data")
        if page.dialogs:
            fail("a dialog opened: %s" % page.dialogs)
        # The failed job's message.
        msg = page.wait_for("(document.querySelector('#failures li[data-job-id=\"%d\"] .message')"
                            " || {}).textContent" % failed["id"], what="the failure's message")
        if msg != failed["error"] or "pack: element 0" not in msg:
            fail("the failure shows %r, the status says %r" % (msg, failed["error"]))
        shot = os.path.join(build, "dashboard-overview.png")
        page.screenshot(shot)
        print("ok: screenshot of the overview in %s" % shot)
        # A worker's page: its address and the slow job's task.
        page.eval("location.hash = '#/worker/%d'; true" % worker["id"])
        page.wait_for("document.getElementById('worker-page') !== null", what="the worker page")
        addr = page.eval("document.querySelector('#worker-page .address').textContent")
        if addr != worker["address"]:
            fail("the worker page shows %r, expected %r" % (addr, worker["address"]))
        names = page.wait_for("Array.from(document.querySelectorAll('#worker-tasks .name'))"
                              ".map(e => e.textContent).join('\\n')", what="the worker's tasks")
        if SLOW_NAME not in names.split("\n"):
            fail("the worker page lists tasks of %r" % names)
        # The failed job's page.
        page.eval("location.hash = '#/job/%d'; true" % failed["id"])
        jmsg = page.wait_for("(document.querySelector('#job-error .message') || {}).textContent",
                             what="the failed job's page")
        if jmsg != failed["error"]:
            fail("the job page shows %r" % jmsg)
        page.pump(0.5)
        if page.errors:
            fail("console errors: %s" % page.errors)
        if page.dialogs:
            fail("a dialog opened: %s" % page.dialogs)
        page.close()
    print("ok: the page loads without console errors; the login, a job, a failure, a worker")


def metric_names(text):
    names = set()
    for line in text.split("\n"):
        m = re.match(r"# TYPE (\S+) (\S+)", line)
        if m:
            names.add(m.group(1))
            if m.group(2) == "histogram":
                names.update(m.group(1) + s for s in ("_bucket", "_sum", "_count"))
    return names


def exprs_of(node):
    if isinstance(node, dict):
        for k, v in node.items():
            if k == "expr" and isinstance(v, str):
                yield v
            else:
                yield from exprs_of(v)
    elif isinstance(node, list):
        for v in node:
            yield from exprs_of(v)


def check_grafana(c, src):
    path = os.path.join(src, "deploy", "grafana", "sluice.json")
    with open(path) as f:
        board = json.load(f)
    exprs = list(exprs_of(board))
    queried = set()
    for e in exprs:
        queried.update(re.findall(r"\bsluice_[a-z0-9_]+\b", e))
    if len(exprs) < 10 or len(queried) < 10:
        fail("%s: %d queries of %d metrics; expected a dashboard" % (path, len(exprs),
                                                                     len(queried)))
    exported = set()
    for addr, who in ((c.metrics, "dispatcher"), (c.wmetrics, "worker")):
        code, _, body = get(addr, "/metrics", TOKEN)
        if code != 200:
            fail("GET /metrics of the %s: %d" % (who, code))
        exported |= metric_names(body)
    missing = sorted(queried - exported)
    if missing:
        fail("%s queries metrics the binaries do not export: %s" % (path, ", ".join(missing)))
    print("ok: the %d metrics the %d queries of %s use are exported" % (len(queried), len(exprs),
                                                                      path))


def main():
    if len(sys.argv) != 4 or sys.argv[3] not in ("browser", "grafana"):
        print(__doc__)
        sys.exit(2)
    build, src, part = sys.argv[1:]
    if part == "browser" and not cdp.find_chromium():
        if os.environ.get("SLUICE_REQUIRE_BROWSER"):
            fail("no chromium on PATH, and SLUICE_REQUIRE_BROWSER is set (scripts/test.sh)")
        print("SKIP: no chromium on PATH (scripts/deps.sh installs Debian's chromium)")
        sys.exit(SKIP)
    tmp = tempfile.mkdtemp(prefix="sluice-dashboard-")
    c = Cluster(os.path.join(build, "bin"), tmp)
    try:
        c.start()
        if part == "browser":
            check_http(c)
            check_browser(c, build, tmp)
            check_history(c)
        else:
            check_grafana(c, src)
    finally:
        c.stop()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
