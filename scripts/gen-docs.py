#!/usr/bin/python3
"""Generates the documentation that follows from the sources and the binaries:

  docs/man/*.1     a man page per binary (sluice, sluice-dispatcher, sluice-worker) and per
                   `sluice` command (sluice-read.1, ...), from their --help output
  docs/errors.md   the error codes of the public API, from include/sluice/sluice.h (the enum
                   and the comments beside it) and src/common/error.c (sluice_strerror's texts)
  docs/metrics.md  the metric families of both servers, from the /metrics of a running
                   sluice-dispatcher (a group of one replica, so the journal's and the
                   replicas' metrics exist) and
                   sluice-worker after a small read (so the per-job and per-worker ones exist)

    gen-docs.py [--build DIR] [--only man,errors,metrics] [--check]

--build is the build tree whose bin/ holds the binaries (default: build/ in the repository).
Without --check the files are written into the repository's docs/. With --check nothing is
written: everything is generated in memory and compared with what is committed, and each file
that differs (or is missing, or is a man page no binary asks for) is named with a diff and the
command that regenerates it; exit status 1 then, 0 when all agree.

The output depends only on the sources and on what the binaries print: no dates, no paths of
the machine, no port numbers or other values of the run. The man pages' parser knows the shape
the --help texts share (a "usage:" block, paragraphs, indented option or command lists, an
"example:" line, an "Exit status:" paragraph) and stops with an error on anything else, so a
help text it would misread is noticed.
"""

import argparse
import difflib
import http.client
import os
import re
import selectors
import shutil
import socket
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SERVERS = ["sluice-dispatcher", "sluice-worker"]
KINDS = ["man", "errors", "metrics"]


class GenError(Exception):
    pass


def run_help(argv):
    """The --help text argv prints on stdout; it must exit 0."""
    p = subprocess.run(argv + ["--help"], capture_output=True, text=True, timeout=30,
                       env=clean_env())
    if p.returncode != 0:
        raise GenError("%s --help exited %d: %s" % (" ".join(argv), p.returncode, p.stderr))
    return p.stdout


def version_of(binary):
    p = subprocess.run([binary, "--version"], capture_output=True, text=True, timeout=30,
                       env=clean_env())
    out = p.stdout.strip()
    if p.returncode != 0 or not re.fullmatch(r"sluice \d+\.\d+\.\d+", out):
        raise GenError("%s --version printed %r (exit %d)" % (binary, out, p.returncode))
    return out


def clean_env():
    """The environment without SLUICE_* (a token file or host id of the caller's would change
    what the servers do), in a UTF-8 locale."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLUICE_")}
    env.setdefault("LC_ALL", "C.UTF-8")
    return env


# ---- --help text -> structure -----------------------------------------------------------------

def blocks(text):
    """The text's blank-line-separated blocks, as lists of right-stripped lines."""
    out, cur = [], []
    for line in text.split("\n"):
        line = line.rstrip()
        if line:
            cur.append(line)
        elif cur:
            out.append(cur)
            cur = []
    if cur:
        out.append(cur)
    return out


def indent(line):
    return len(line) - len(line.lstrip(" "))


def split_term(s):
    """An item line (without its two-space indent) as (term, description on the same line)."""
    m = re.search(r" {2,}", s)
    if m:
        return s[:m.start()], s[m.end():]
    toks = s.split(" ")
    if toks[0].startswith("-"):
        # A term too long for its column leaves one space: it is the flags and their metavars.
        n = 0
        while n < len(toks) and toks[n] and (toks[n][0] in "-[(" or toks[n][0].isupper()):
            n += 1
        return " ".join(toks[:n]), " ".join(toks[n:])
    return s, ""


def parse_list(lines, where):
    """An indented list: items start at column 2, their descriptions continue deeper."""
    items = []
    for line in lines:
        ind = indent(line)
        if ind == 2:
            term, desc = split_term(line[2:])
            items.append((term, [desc] if desc else []))
        elif ind > 2 and items:
            items[-1][1].append(line.strip())
        else:
            raise GenError("%s: cannot place this line of a list: %r" % (where, line))
    return items


def parse_usage(lines, where):
    """The synopses of a usage block: "usage: PROG ARGS" and indented continuation lines; a
    continuation line that starts with the program's name starts another synopsis."""
    first = lines[0][len("usage: "):]
    prog = first.split(" ")[0]
    syn = [first.strip()]
    for line in lines[1:]:
        if indent(line) == 0:
            raise GenError("%s: usage block has an unindented line: %r" % (where, line))
        s = line.strip()
        if s.split(" ")[0] == prog:
            syn.append(s)
        else:
            syn[-1] += " " + s
    return syn


def parse_help(text, where):
    """{"synopsis": [...], "sections": [(TITLE, [entry, ...]), ...]}, entries being
    ("para", lines), ("list", items) or ("example", lines), in the order of the text."""
    bl = blocks(text)
    if not bl or not bl[0][0].startswith("usage: "):
        raise GenError("%s: --help does not start with 'usage: '" % where)
    doc = {"synopsis": parse_usage(bl[0], where), "sections": []}

    def add(title, entry):
        for t, entries in doc["sections"]:
            if t == title:
                entries.append(entry)
                return
        doc["sections"].append((title, [entry]))

    current = "DESCRIPTION"
    for b in bl[1:]:
        head = b[0]
        indented = [indent(l) > 0 for l in b]
        if head.lower().startswith("example:"):
            lines = [head[len("example:"):].strip()] + [l.strip() for l in b[1:]]
            add("EXAMPLE", ("example", lines))
        elif head.lower().startswith("exit status:"):
            add("EXIT STATUS", ("para", [head[len("exit status:"):].strip()] + b[1:]))
        elif not indented[0] and head.endswith(":") and len(b) > 1 and all(indented[1:]):
            current = head[:-1].upper()
            add(current, ("list", parse_list(b[1:], where)))
        elif all(indented):
            items = parse_list(b, where)
            current = "OPTIONS" if items[0][0].startswith("-") else "COMMANDS"
            add(current, ("list", items))
        elif not any(indented):
            add(current, ("para", b))
        else:
            raise GenError("%s: a block mixes indented and unindented lines: %r" % (where, b))
    return doc


def section(doc, title):
    for t, entries in doc["sections"]:
        if t == title:
            return entries
    return None


def first_sentence(doc):
    """The first sentence of the description, up to a colon, in lower case: the NAME line."""
    entries = section(doc, "DESCRIPTION")
    if not entries or entries[0][0] != "para":
        return None
    text = " ".join(entries[0][1])
    s = re.split(r"(?<=\.)\s|:\s", text, maxsplit=1)[0].rstrip(".")
    return s[0].lower() + s[1:]


# ---- structure -> troff -----------------------------------------------------------------------

STYLE = re.compile(r"(?P<flag>(?<![\w-])--?[a-z][a-z0-9-]*)|(?P<meta>\b[A-Z][A-Z0-9_]*\b)")
NBSP = "\x00"
BREAK = "\x01"


def esc(s):
    return (s.replace("\\", "\\e").replace("-", "\\-").replace(NBSP, "\\ ")
            .replace(BREAK, "\\:"))


def text_line(s):
    """One line of running text: escaped, and kept from being read as a request."""
    e = esc(s)
    return "\\&" + e if e.startswith((".", "'")) else e


def styled(s, command=False):
    """Flags in bold, metavars (upper-case words) in italics, the rest roman; with command, the
    leading words (a command's name, as "snapshot save") in bold too."""
    out, pos = [], 0
    if command:
        m = re.match(r"[a-z][a-z0-9|-]*(?: [a-z][a-z0-9|-]*)*", s)
        if m:
            out.append("\\fB%s\\fR" % esc(m.group(0)))
            pos = m.end()
    for m in STYLE.finditer(s, pos):
        out.append(esc(s[pos:m.start()]))
        out.append(("\\fB%s\\fR" if m.group("flag") else "\\fI%s\\fR") % esc(m.group(0)))
        pos = m.end()
    out.append(esc(s[pos:]))
    line = "".join(out)
    return "\\&" + line if line.startswith((".", "'")) else line


def unbreakable_groups(s):
    """s with the spaces inside the innermost [...] and (...) made unbreakable, so an option
    and its value stay on one line of the synopsis; a line may still break after a '|'."""
    s = re.sub(r"[\[(][^\[\]()]*[\])]", lambda m: m.group(0).replace(" ", NBSP), s)
    return s.replace("|", "|" + BREAK)


def render_man(page, doc, version, source, name_line, exit_status, see_also):
    title = page.upper()
    out = [
        '.\\" Generated by scripts/gen-docs.py from `%s --help`: do not edit.' % source,
        '.TH %s 1 "" "%s" "sluice manual"' % (title, version),
        ".SH NAME",
        "%s \\- %s" % (esc(page), esc(name_line)),
        ".SH SYNOPSIS",
    ]
    for syn in doc["synopsis"]:
        words = syn.split(" ")
        # The program's name: the words before the first argument (flag, metavar, group).
        n = 1
        while n < len(words) and re.fullmatch(r"[a-z][a-z0-9-]*", words[n]):
            n += 1
        out.append('.SY "%s"' % esc(" ".join(words[:n])))
        if n < len(words):
            out.append(styled(unbreakable_groups(" ".join(words[n:]))))
        out.append(".YS")
    sections = list(doc["sections"])
    if exit_status and section(doc, "EXIT STATUS") is None:
        sections.append(("EXIT STATUS", exit_status))
    order = ["DESCRIPTION", "COMMANDS", "OPTIONS", "EXIT STATUS", "EXAMPLE"]
    sections.sort(key=lambda s: order.index(s[0]) if s[0] in order else len(order))
    for t, entries in sections:
        out.append(".SH %s" % t)
        for i, (kind, body) in enumerate(entries):
            if kind == "para":
                if i > 0:
                    out.append(".PP")
                out.extend(text_line(l.strip()) for l in body)
            elif kind == "list":
                for term, desc in body:
                    out.append(".TP")
                    out.append(styled(term, command=(t == "COMMANDS")))
                    out.extend(text_line(l) for l in desc)
                out.append(".PP")
            elif kind == "example":
                out.append(".RS 4")
                out.append(".nf")
                out.extend(text_line(l) for l in body)
                out.append(".fi")
                out.append(".RE")
    while out[-1] == ".PP":
        out.pop()
    out.append(".SH SEE ALSO")
    for i, ref in enumerate(see_also):
        out.append(".BR %s (1)%s" % (esc(ref), "," if i < len(see_also) - 1 else ""))
    out.append(".PP")
    out.append("The guides in the docs/ folder of sluice's sources, listed in docs/README.md.")
    # Drop a .PP that directly follows a section heading or precedes another heading.
    clean = []
    for line in out:
        if line == ".PP" and clean and clean[-1].startswith((".SH", ".PP")):
            continue
        if line.startswith(".SH") and clean and clean[-1] == ".PP":
            clean.pop()
        clean.append(line)
    text = "\n".join(clean) + "\n"
    for c in text:
        if ord(c) > 126 or (ord(c) < 32 and c != "\n"):
            raise GenError("%s: character %r in the page; the pages are ASCII" % (page, c))
    return text


def gen_man(bindir):
    """{file name: contents} of every man page."""
    bins = {b: os.path.join(bindir, b) for b in ["sluice"] + SERVERS}
    for b, path in bins.items():
        if not os.access(path, os.X_OK):
            raise GenError("%s not found (build first: cmake --build BUILD)" % path)
    version = version_of(bins["sluice"])
    cli = parse_help(run_help([bins["sluice"]]), "sluice")
    commands = []  # (command, [descriptions]) in the order of sluice --help
    for kind, items in section(cli, "COMMANDS") or []:
        if kind != "list":
            continue
        for term, desc in items:
            cmd = term.split(" ")[0]
            if not commands or commands[-1][0] != cmd:
                commands.append((cmd, []))
            commands[-1][1].append(" ".join(desc))
    if not commands:
        raise GenError("sluice --help lists no commands")
    exit_status = section(cli, "EXIT STATUS")
    pages = ["sluice-" + c for c, _ in commands]
    out = {}
    for b in ["sluice"] + SERVERS:
        doc = cli if b == "sluice" else parse_help(run_help([bins[b]]), b)
        name_line = first_sentence(doc)
        if not name_line:
            raise GenError("%s --help has no description paragraph for NAME" % b)
        see_also = pages + SERVERS if b == "sluice" else ["sluice"] + [s for s in SERVERS if s != b]
        out[b + ".1"] = render_man(b, doc, version, b, name_line, None, see_also)
    for cmd, descs in commands:
        doc = parse_help(run_help([bins["sluice"], cmd]), "sluice " + cmd)
        out["sluice-%s.1" % cmd] = render_man("sluice-" + cmd, doc, version, "sluice " + cmd,
                                              "; ".join(descs), exit_status,
                                              ["sluice"] + SERVERS)
    return {"docs/man/" + k: v for k, v in out.items()}


# ---- errors -----------------------------------------------------------------------------------

def read(rel):
    with open(os.path.join(ROOT, rel), encoding="utf-8") as f:
        return f.read()


def uncomment(block):
    """The text of a /* ... */ comment, its lines joined."""
    body = re.sub(r"^\s*/\*|\*/\s*$", "", block.strip())
    return " ".join(l.strip().lstrip("*").strip() for l in body.split("\n")).strip()


def gen_errors():
    header = read("include/sluice/sluice.h")
    m = re.search(r"(/\*(?:(?!\*/).)*\*/)\s*enum sluice_err\s*\{(.*?)\};", header, re.S)
    if not m:
        raise GenError("include/sluice/sluice.h: no commented enum sluice_err")
    intro, body = uncomment(m.group(1)), m.group(2)
    codes, pending = [], None  # (name, value, comment)
    for line in body.split("\n"):
        if pending is not None:
            pending[2] += " " + line.strip().rstrip("*/").strip()
            if "*/" in line:
                codes.append(tuple(pending))
                pending = None
            continue
        e = re.match(r"\s*(SLUICE_\w+)\s*=\s*(-?\d+)\s*,?\s*(/\*.*)?$", line)
        if not e:
            if line.strip():
                raise GenError("include/sluice/sluice.h: enum sluice_err: cannot read %r" % line)
            continue
        name, value, comment = e.group(1), int(e.group(2)), e.group(3) or ""
        if comment and "*/" not in comment:
            pending = [name, value, comment[2:].strip()]
        else:
            codes.append((name, value, uncomment(comment) if comment else ""))
    values = {n: v for n, v, _ in codes}
    base, last = values.get("SLUICE_ERR_BASE"), values.get("SLUICE_ERR_LAST")
    if base is None or last is None:
        raise GenError("include/sluice/sluice.h: SLUICE_ERR_BASE or SLUICE_ERR_LAST is missing")
    messages = dict(re.findall(r'\[-\((SLUICE_ERR_\w+) - SLUICE_ERR_BASE\)\]\s*=\s*"([^"]*)"',
                               read("src/common/error.c")))
    rows = []
    for name, value, comment in sorted(codes, key=lambda c: -c[1]):
        if not last < value < base:
            continue
        if name not in messages:
            raise GenError("src/common/error.c: %s has no message" % name)
        if not comment:
            raise GenError("include/sluice/sluice.h: %s has no comment saying what it means" % name)
        rows.append("| %d | `%s` | %s | %s |" % (value, name, md(messages[name]), md(comment)))
    unknown = set(messages) - {n for n, v, _ in codes if last < v < base}
    if unknown:
        raise GenError("src/common/error.c: messages for unknown codes %s" % sorted(unknown))
    intro = re.sub(r"<(sluice/\w+\.h)>", r"`<\1>`", intro)
    intro = re.sub(r"(?<![\w`])(SLUICE_ERR_\w+|-E[A-Z]+)\b", r"`\1`", intro)
    text = [
        "# Error codes",
        "",
        "<!-- Generated by scripts/gen-docs.py from include/sluice/sluice.h and"
        " src/common/error.c: do not edit. -->",
        "",
        wrap(intro),
        "",
        wrap("The message is what `sluice_strerror(code)` returns (for a negative errno value it "
             "returns `strerror(-code)`, and `\"success\"` for 0); the meaning is the comment "
             "beside the code in `<sluice/sluice.h>`. A failure usually comes with a message of "
             "its own that says more: the `err` buffer of the call, or the line a binary "
             "prints."),
        "",
        "| code | name | message | meaning |",
        "|---:|---|---|---|",
    ] + rows
    return {"docs/errors.md": "\n".join(text) + "\n"}


# ---- metrics ----------------------------------------------------------------------------------

class Server:
    """A server binary started with port 0; its stdout lines read as they come (also used by
    tests/dashboard/test_dashboard.py)."""

    def __init__(self, argv, name, tmp):
        self.name = name
        # stderr into a file: a pipe nobody reads could fill and stop the server.
        self.errpath = os.path.join(tmp, name + ".stderr")
        with open(self.errpath, "wb") as err:
            self.p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=err, env=clean_env(),
                                      stdin=subprocess.DEVNULL)
        self.lines = []
        self.buf = b""  # the start of a line not yet whole, kept for the next wait_line

    def stderr(self):
        with open(self.errpath, errors="replace") as f:
            return f.read()[-4000:]

    def wait_line(self, pattern, timeout=60):
        rx = re.compile(pattern)
        deadline = time.monotonic() + timeout
        with selectors.DefaultSelector() as sel:
            sel.register(self.p.stdout, selectors.EVENT_READ)
            while True:
                for line in self.lines:
                    m = rx.search(line)
                    if m:
                        return m
                left = deadline - time.monotonic()
                if left <= 0:
                    raise GenError("%s printed no /%s/ within %d s: %s" % (
                        self.name, pattern, timeout, self.stderr()))
                if sel.select(min(left, 0.5)):
                    chunk = os.read(self.p.stdout.fileno(), 4096)
                    if not chunk:
                        self.p.wait(timeout=10)
                        raise GenError("%s exited %s before printing /%s/: %s" % (
                            self.name, self.p.returncode, pattern, self.stderr()))
                    self.buf += chunk
                    *done, self.buf = self.buf.split(b"\n")
                    self.lines.extend(l.decode(errors="replace") for l in done)

    def stop(self):
        if self.p.poll() is None:
            self.p.terminate()
            try:
                self.p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.p.kill()
                self.p.wait()
        self.p.stdout.close()


def scrape(addr):
    host, port = addr.rsplit(":", 1)
    c = http.client.HTTPConnection(host, int(port), timeout=30)
    try:
        c.request("GET", "/metrics")
        r = c.getresponse()
        body = r.read().decode()
        if r.status != 200:
            raise GenError("GET http://%s/metrics: %d %s" % (addr, r.status, body))
        return body
    finally:
        c.close()


LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


def parse_exposition(text, where):
    """[(name, type, help, {label: [values in order]})] in the order of the exposition."""
    fams, by_name = [], {}
    for line in text.split("\n"):
        if not line:
            continue
        m = re.match(r"# (HELP|TYPE) (\S+) ?(.*)$", line)
        if m:
            kind, name, rest = m.groups()
            if name not in by_name:
                by_name[name] = {"name": name, "type": "untyped", "help": "", "labels": {}}
                fams.append(by_name[name])
            if kind == "TYPE":
                by_name[name]["type"] = rest
            else:
                by_name[name]["help"] = rest.replace("\\n", "\n").replace("\\\\", "\\")
            continue
        if line.startswith("#"):
            continue
        s = re.match(r"([a-zA-Z_:][\w:]*)(\{.*\})?\s", line)
        if not s:
            raise GenError("%s: cannot read sample %r" % (where, line))
        name = s.group(1)
        fam = by_name.get(name)
        if fam is None:
            base = re.sub(r"_(bucket|sum|count)$", "", name)
            fam = by_name.get(base)
        if fam is None:
            raise GenError("%s: sample %s has no # TYPE" % (where, name))
        for k, v in LABEL.findall(s.group(2) or ""):
            if k == "le" and fam["type"] == "histogram":
                continue
            vals = fam["labels"].setdefault(k, [])
            if v not in vals:
                vals.append(v)
    return fams


def md(s):
    return s.replace("|", "\\|").replace("\n", " ")


def md_help(s):
    """Help text for a table cell: flags as code."""
    return re.sub(r"(?<![\w`-])(--[a-z][a-z0-9-]*)", r"`\1`", md(s))


def labels_cell(labels):
    """Label names; the values too where they are words (states, reasons) rather than ids,
    which vary from run to run."""
    cells = []
    for k, vals in labels.items():
        if vals and all(re.fullmatch(r"[a-z][a-z_]*", v) for v in vals):
            cells.append("`%s`: %s" % (k, ", ".join("`%s`" % v for v in vals)))
        else:
            cells.append("`%s`" % k)
    return "; ".join(cells)


def table(fams):
    rows = ["| metric | type | labels | help |", "|---|---|---|---|"]
    for f in fams:
        rows.append("| `%s` | %s | %s | %s |" % (f["name"], f["type"], labels_cell(f["labels"]),
                                               md_help(f["help"])))
    return rows


def gen_metrics(bindir):
    tmp = tempfile.mkdtemp(prefix="sluice-gen-docs-")
    servers = []
    try:
        # A group of one replica (it elects itself at once): the journal's metrics and the
        # replicas' (sluice_raft_*) both exist.
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            raft = "127.0.0.1:%d" % s.getsockname()[1]
        d = Server([os.path.join(bindir, "sluice-dispatcher"), "--port", "0",
                    "--metrics-port", "0", "--work-dir", os.path.join(tmp, "work"),
                    "--raft-id", "1", "--raft-address", raft, "--raft-cluster", "1=" + raft,
                    "--job-gc-timeout-ms", "600000", "--autoscale-window-ms", "200",
                    "--log-level", "warn"],
                   "sluice-dispatcher", tmp)
        servers.append(d)
        daddr = d.wait_line(r" listening on (\S+)$").group(1)
        dmetrics = d.wait_line(r" metrics on (\S+)$").group(1)
        w = Server([os.path.join(bindir, "sluice-worker"), "--dispatcher", daddr, "--port", "0",
                    "--metrics-port", "0", "--drain-timeout-ms", "1000", "--log-level", "warn"],
                   "sluice-worker", tmp)
        servers.append(w)
        w.wait_line(r" listening on (\S+)$")
        wmetrics = w.wait_line(r" metrics on (\S+)$").group(1)
        # A read, so that the families of a job and of a worker have series (a family without
        # series is not in the exposition); the job stays until collected (600 s).
        r = subprocess.run([os.path.join(bindir, "sluice"), "read", "--dispatcher", daddr,
                            "range(10)", "--format", "count", "--timeout-ms", "60000", "--quiet"],
                           capture_output=True, text=True, timeout=120, env=clean_env())
        if r.returncode != 0 or r.stdout.strip() != "10":
            raise GenError("sluice read range(10) printed %r, exit %d: %s" % (
                r.stdout, r.returncode, r.stderr))
        # The per-pool recommendation has series once a window closed (200 ms here).
        deadline = time.monotonic() + 10
        while True:
            dfams = parse_exposition(scrape(dmetrics), "sluice-dispatcher /metrics")
            if any(f["name"] == "sluice_autoscale_recommended_workers" for f in dfams):
                break
            if time.monotonic() > deadline:
                raise GenError("no autoscaling window closed within 10 s")
            time.sleep(0.1)
        wfams = parse_exposition(scrape(wmetrics), "sluice-worker /metrics")
    finally:
        for s in reversed(servers):
            s.stop()
        shutil.rmtree(tmp, ignore_errors=True)

    def key(f):
        return (f["name"], f["type"], f["help"], tuple(f["labels"]))

    wkeys = {key(f) for f in wfams}
    both = [f for f in dfams if key(f) in wkeys]
    bkeys = {key(f) for f in both}
    text = [
        "# Metrics",
        "",
        "<!-- Generated by scripts/gen-docs.py from the /metrics of a running sluice-dispatcher"
        " and sluice-worker: do not edit. -->",
        "",
        wrap("Every metric family `sluice-dispatcher` and `sluice-worker` serve at `GET /metrics` "
             "(`--metrics-port`), with its type and help text as the servers give them, in the "
             "order they are served. Labels list their values where those are fixed words; "
             "`job` and `worker` are ids, as in `sluice status --json`. How to scrape, the "
             "probes on the same port and how the gauges match `sluice status` are in "
             "[operations.md](operations.md#metrics)."),
        "",
        "## Both servers",
        "",
    ] + table(both) + [
        "",
        "## Dispatcher",
        "",
    ] + table([f for f in dfams if key(f) not in bkeys]) + [
        "",
        "## Worker",
        "",
    ] + table([f for f in wfams if key(f) not in bkeys])
    return {"docs/metrics.md": "\n".join(text) + "\n"}


def wrap(s, width=100):
    """s filled to width columns, never breaking inside a `code span`."""
    out, line = [], ""
    for word in re.findall(r"(?:`[^`]*`|[^\s`])+", s):
        if line and len(line) + 1 + len(word) > width:
            out.append(line)
            line = word
        else:
            line = line + " " + word if line else word
    if line:
        out.append(line)
    return "\n".join(out)


# ---- main -------------------------------------------------------------------------------------

def generate(kinds, bindir):
    out = {}
    if "man" in kinds:
        out.update(gen_man(bindir))
    if "errors" in kinds:
        out.update(gen_errors())
    if "metrics" in kinds:
        out.update(gen_metrics(bindir))
    return out


def committed(kinds):
    """The generated files present in the repository now, for the kinds asked."""
    files = []
    if "man" in kinds:
        mandir = os.path.join(ROOT, "docs", "man")
        if os.path.isdir(mandir):
            files += ["docs/man/" + f for f in sorted(os.listdir(mandir)) if f.endswith(".1")]
    for kind, rel in (("errors", "docs/errors.md"), ("metrics", "docs/metrics.md")):
        if kind in kinds and os.path.exists(os.path.join(ROOT, rel)):
            files.append(rel)
    return files


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--build", default=os.path.join(ROOT, "build"),
                    help="build tree whose bin/ holds the binaries (default: build/)")
    ap.add_argument("--only", default=",".join(KINDS),
                    help="comma-separated: man, errors, metrics (default: all)")
    ap.add_argument("--check", action="store_true",
                    help="write nothing; exit 1 when a committed file differs from what would "
                         "be generated")
    a = ap.parse_args()
    kinds = [k for k in a.only.split(",") if k]
    for k in kinds:
        if k not in KINDS:
            ap.error("--only: unknown kind %r (man, errors, metrics)" % k)
    bindir = os.path.join(a.build, "bin")
    try:
        gen = generate(kinds, bindir)
    except (GenError, OSError, subprocess.SubprocessError) as e:
        print("gen-docs: %s" % e, file=sys.stderr)
        return 1

    regen = "scripts/gen-docs.py --build %s --only %s" % (a.build, ",".join(kinds))
    if a.check:
        stale = []
        for rel in sorted(set(gen) | set(committed(kinds))):
            path = os.path.join(ROOT, rel)
            old = open(path, encoding="utf-8").read() if os.path.exists(path) else None
            new = gen.get(rel)
            if old == new:
                continue
            if new is None:
                stale.append(rel)
                print("gen-docs: %s is not generated any more (no binary or command asks for "
                      "it): remove it" % rel)
                continue
            stale.append(rel)
            if old is None:
                print("gen-docs: %s is missing" % rel)
                continue
            print("gen-docs: %s is stale; what the sources and binaries give now:" % rel)
            diff = list(difflib.unified_diff(old.split("\n"), new.split("\n"),
                                             "committed/" + rel, "generated/" + rel, lineterm=""))
            for line in diff[:60]:
                print("    " + line)
            if len(diff) > 60:
                print("    ... (%d more lines)" % (len(diff) - 60))
        if stale:
            print("gen-docs: %d file(s) out of date: %s\ngen-docs: regenerate with: %s "
                  "(after building), and commit the result"
                  % (len(stale), ", ".join(stale), regen))
            return 1
        print("gen-docs: %d file(s) up to date (%s)" % (len(gen), ", ".join(kinds)))
        return 0

    for rel in committed(kinds):
        if rel not in gen:
            os.remove(os.path.join(ROOT, rel))
            print("gen-docs: removed %s" % rel)
    for rel, text in sorted(gen.items()):
        path = os.path.join(ROOT, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        old = open(path, encoding="utf-8").read() if os.path.exists(path) else None
        if old != text:
            with open(path, "w", encoding="utf-8") as f:
                f.write(text)
            print("gen-docs: wrote %s" % rel)
    return 0


if __name__ == "__main__":
    sys.exit(main())
