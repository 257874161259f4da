"""Checks deploy/ against the real binaries, so the files cannot drift from the flags.

    test_deploy.py BUILD_DIR SOURCE_DIR

Installs BUILD_DIR with `cmake --install` into a temporary prefix (the layout the image and the
units use), then:

- Kubernetes: runs the dispatcher's StatefulSet and the workers' Deployment container command
  and args exactly, with $(VAR) references substituted (the downward API's pod IP as 127.0.0.1),
  every mounted Secret, claim and emptyDir mapped to a temporary directory (the token Secret
  holding a real token, the TLS Secrets certificates that make-certs.sh made: the dispatcher's for
  127.0.0.1, the workers' for the name readers pass as --tls-worker-name and not for 127.0.0.1),
  Service names mapped to 127.0.0.1 and every containerPort mapped to a free port; checks that a
  client without TLS is refused; hits each probe's httpGet path on the port it names; checks the
  HPA's metric in the dispatcher's /metrics (with the bearer token), the adapter rule and the
  scrape config against the HPA and the Service, the grace period against the drain timeout;
  runs the Job docs/deploying.md applies (read-check.yaml, a trainer with the client
  certificate) against them, over TLS, once without its --tls-worker-name (which must fail on the
  worker's address) and once as written; drains the worker with SIGTERM and checks it exits 0
  within the grace period. Checks that the workers advertise their pod IP, runs
  docs/deploying.md's make-certs.sh command and checks with `openssl verify` that the
  certificate each pod mounts names what its peers dial or, for the workers, the name every
  reader passes, and no other. Builds the kustomization with `kubectl kustomize` when kubectl is
  installed.
- Kubernetes, three dispatcher replicas (dispatcher-replicas.yaml in dispatcher.yaml's place):
  the three pods' commands the same way (the shell that computes --raft-id run as written, each
  pod's DNS name mapped to 127.0.0.1 and its containerPorts to free ports of its own, the client
  Service to the three pods' RPC ports); waits for /healthz on all and /readyz on exactly one,
  reads range(1000) through a worker with the read Job's command, stops the leader with SIGTERM,
  waits for another pod to be the ready one and reads again; checks the certificate names the
  pods; runs docs/deploying.md's switch of the kustomization and builds it with kubectl.
- systemd: runs ExecStart of both units with specifiers, ${STATE_DIRECTORY},
  ${CREDENTIALS_DIRECTORY} and the example EnvironmentFile substituted, the same way; checks every
  directive against a list of known ones (and `systemd-analyze verify` when installed).
- Docker: runs docs/deploying.md's `docker run` commands the same way (-v mounts and container
  names mapped), reads through them and stops them within their stop timeouts.
- Dockerfile: checks the CMD and every binary the manifests and units name exist in the installed
  layout and run, the user is not root and matches the manifests' runAsUser, the runtime stage's
  packages provide every library the binaries link (when apt-cache works offline), and every
  package exists (same condition).

Every wait is bounded; every process started is killed on the way out.
"""

import ctypes
import http.client
import json
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

import yaml

BUILD, SOURCE = sys.argv[1], sys.argv[2]
DEPLOY = os.path.join(SOURCE, "deploy")
# The guide whose commands are checked: its "## Kubernetes", "## systemd" and "## Docker"
# sections, run as written.
GUIDE = os.path.join("docs", "deploying.md")
START_TIMEOUT = 20.0   # seconds for a server to print its listening line (ASan builds are slow)
READY_TIMEOUT = 15.0
READ_TIMEOUT = 60.0

procs = []


def fail(msg):
    raise SystemExit("test_deploy: FAIL: " + msg)


def note(msg):
    print("test_deploy: " + msg, flush=True)


def check(cond, msg):
    if not cond:
        fail(msg)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Proc:
    """A server started from an argv: stdout is read line by line on a thread, stderr goes to a
    log file shown when something fails."""

    def __init__(self, name, argv, tmp, env=None):
        self.name, self.argv = name, argv
        self.log_path = os.path.join(tmp, name + ".log")
        check_spelled_out(argv, name)
        self.log = open(self.log_path, "wb")
        self.lines = []
        self.cond = threading.Condition()
        note("start %s: %s" % (name, shlex.join(argv)))
        self.p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=self.log, env=env,
                                  stdin=subprocess.DEVNULL, preexec_fn=die_with_parent)
        procs.append(self)
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        for raw in self.p.stdout:
            with self.cond:
                self.lines.append(raw.decode(errors="replace").rstrip("\n"))
                self.cond.notify_all()
        with self.cond:
            self.cond.notify_all()

    def stderr(self):
        with open(self.log_path, "rb") as f:
            return f.read().decode(errors="replace")

    def wait_line(self, pattern, timeout=START_TIMEOUT):
        """Returns the match of the first stdout line matching pattern; fails when the process
        exits first or timeout passes."""
        rx = re.compile(pattern)
        deadline = time.monotonic() + timeout
        with self.cond:
            while True:
                for line in self.lines:
                    m = rx.search(line)
                    if m:
                        return m
                if self.p.poll() is not None:
                    fail("%s exited with %s before printing /%s/; stderr:\n%s"
                         % (self.name, self.p.returncode, pattern, self.stderr()))
                left = deadline - time.monotonic()
                if left <= 0:
                    fail("%s printed no /%s/ within %.0f s; stderr:\n%s"
                         % (self.name, pattern, timeout, self.stderr()))
                self.cond.wait(min(left, 0.1))

    def stop(self, sig, limit):
        """Sends sig and returns (exit status, seconds it took); fails after limit seconds."""
        t0 = time.monotonic()
        self.p.send_signal(sig)
        try:
            rc = self.p.wait(timeout=limit)
        except subprocess.TimeoutExpired:
            fail("%s did not exit within %.0f s of signal %d; stderr:\n%s"
                 % (self.name, limit, sig, self.stderr()))
        return rc, time.monotonic() - t0


def die_with_parent():
    """In the child before exec: SIGKILL when this test dies, even by SIGKILL (a CTest timeout),
    so no server outlives it."""
    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)   # PR_SET_PDEATHSIG


def kill_all():
    for pr in procs:
        if pr.p.poll() is None:
            pr.p.kill()
            try:
                pr.p.wait(timeout=5)
            except subprocess.TimeoutExpired:
                pass


def http_get(port, path, token=None, timeout=3.0):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        headers = {"Authorization": "Bearer " + token} if token else {}
        c.request("GET", path, headers=headers)
        r = c.getresponse()
        return r.status, r.read().decode(errors="replace")
    finally:
        c.close()


def wait_status(port, path, want, timeout=READY_TIMEOUT, token=None):
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        try:
            last = http_get(port, path, token)
            if last[0] == want:
                return last
        except OSError as e:
            last = (None, str(e))
        time.sleep(0.1)
    fail("GET %s on port %d: wanted %d within %.0f s, last answer %s" % (path, port, want,
                                                                           timeout, last))


def read_range_1000(argv, tmp, what, env):
    """Runs a `sluice read` argv whose pipeline is range(1000): once as given (it must print what
    its --format says: 1000 for count), once with --format text, whose elements must be 0..999
    each exactly once."""
    check("range(1000)" in argv, "%s: the documented read is not of range(1000): %s"
          % (what, shlex.join(argv)))
    for fmt in ("as documented", "text"):
        a = list(argv)
        if fmt == "text":
            if "--format" in a:
                a[a.index("--format") + 1] = "text"
            else:
                a += ["--format", "text"]
        a += ["--timeout-ms", str(int(READ_TIMEOUT * 1000))]
        note("%s read (%s): %s" % (what, fmt, shlex.join(a)))
        check_spelled_out(a, what)
        try:
            r = subprocess.run(a, capture_output=True, timeout=READ_TIMEOUT + 10, env=env,
                               preexec_fn=die_with_parent)
        except subprocess.TimeoutExpired:
            fail("%s: sluice read did not finish within %.0f s" % (what, READ_TIMEOUT + 10))
        out = r.stdout.decode()
        check(r.returncode == 0, "%s: sluice read exited %d: %s" % (what, r.returncode,
                                                                   r.stderr.decode()))
        if fmt == "text":
            got = sorted(int(x) for x in out.split())
            check(got == list(range(1000)),
                  "%s: read %d elements, sum %d; wanted 0..999 once each (1000, sum 499500)"
                  % (what, len(got), sum(got)))
            note("%s: read 1000 elements, sum %d, each once" % (what, sum(got)))
        elif "--format" in a and a[a.index("--format") + 1] == "count":
            check(out.strip() == "1000", "%s: count printed %r, wanted 1000" % (what, out))


HELP = {}


def check_spelled_out(argv, what):
    """Every --flag in argv appears as such in the binary's --help (or the subcommand's):
    getopt_long takes unambiguous abbreviations, which would hide a misspelling and break
    when a longer flag arrives."""
    if is_shell_exec(argv):
        # The flags of the exec'd binary: in the script and after $0.
        binary = shutil.which(shell_exec_binary(argv[2]), path=os.path.join(PREFIX[0], "bin"))
        check(binary, "%s: the shell runs %s, which is not installed" % (what, argv[2]))
        check_spelled_out([binary] + shlex.split(argv[2])[2:] + argv[4:], what)
        return
    key = tuple(argv[:2]) if os.path.basename(argv[0]) == "sluice" else (argv[0],)
    if key not in HELP:
        r = subprocess.run(list(key) + ["--help"], capture_output=True, timeout=10)
        HELP[key] = set(re.findall(r"--[a-z][a-z0-9-]*", (r.stdout + r.stderr).decode()))
    for a in argv[1:]:
        if a.startswith("--"):
            check(a in HELP[key], "%s: %s is not a flag of %s --help" % (what, a,
                                                                      " ".join(key)))


def is_shell_exec(argv):
    """Whether argv is ["/bin/sh", "-c", "exec BIN ARGS \"$@\"", "BIN", ...]: a wrapper that
    computes an argument and replaces itself by BIN (which keeps BIN the process signalled)."""
    if len(argv) < 4 or os.path.basename(argv[0]) != "sh" or argv[1] != "-c":
        return False
    words = shlex.split(argv[2])
    check(len(words) >= 2 and words[0] == "exec" and words[-1] == "$@" and
          argv[3] == words[1], "a shell command that is not `exec BIN ... \"$@\"` with $0 BIN: %s"
          % shlex.join(argv[:4]))
    return True


def shell_exec_binary(script):
    return shlex.split(script)[1]


PREFIX = [None]     # the install's prefix, once made


def server_env():
    env = dict(os.environ)
    env.pop("SLUICE_AUTH_TOKEN_FILE", None)
    return env


# ---- the install ---------------------------------------------------------------------------------

def install(tmp):
    prefix = os.path.join(tmp, "prefix")
    r = subprocess.run(["cmake", "--install", BUILD, "--prefix", prefix], capture_output=True)
    check(r.returncode == 0, "cmake --install failed: %s" % r.stderr.decode())
    version = None
    for b in ("sluice", "sluice-dispatcher", "sluice-worker"):
        path = os.path.join(prefix, "bin", b)
        check(os.access(path, os.X_OK), "the install has no bin/%s" % b)
        out = subprocess.run([path, "--version"], capture_output=True, timeout=10)
        check(out.returncode == 0 and out.stdout.startswith(b"sluice "),
              "bin/%s --version: %r" % (b, out.stdout))
        version = out.stdout.decode().split()[1]
    return prefix, version


# ---- Kubernetes ----------------------------------------------------------------------------------

def load_kustomization():
    kdir = os.path.join(DEPLOY, "kubernetes")
    with open(os.path.join(kdir, "kustomization.yaml")) as f:
        kust = yaml.safe_load(f)
    docs = []
    for res in kust["resources"]:
        with open(os.path.join(kdir, res)) as f:
            docs += [d for d in yaml.safe_load_all(f) if d]
    return kdir, kust, docs


def find(docs, kind, name=None):
    found = [d for d in docs if d["kind"] == kind and (name is None or
                                                       d["metadata"]["name"] == name)]
    check(len(found) == 1, "expected one %s %s in the kustomization's resources, found %d"
          % (kind, name or "", len(found)))
    return found[0]


class Pod:
    """One pod template's single container, run as a local process."""

    def __init__(self, name, workload, kust, tmp, pods, claims=(), ordinal=0):
        self.name, self.tmp = name, tmp
        spec = workload["spec"]["template"]["spec"]
        self.spec = spec
        # The pod as Kubernetes names it: a StatefulSet's pods are NAME-ORDINAL, a Deployment's
        # NAME-TEMPLATEHASH-RANDOM, a Job's NAME-RANDOM.
        wname = workload["metadata"]["name"]
        self.namespace = kust.get("namespace", "default")
        self.pod_name = wname + {"StatefulSet": "-%d" % ordinal,
                                 "Deployment": "-6f9c8d7b5-x2kqz"}.get(workload["kind"], "-x2kqz")
        self.secret_of_mount = {}
        check(len(spec["containers"]) == 1, "%s: expected one container" % name)
        self.c = c = spec["containers"][0]
        # Named and numbered container ports, each mapped to a free local port.
        self.port_by_name = {}
        self.port_map = {}
        for p in c.get("ports", []):
            local = free_port()
            self.port_map[p["containerPort"]] = local
            if "name" in p:
                self.port_by_name[p["name"]] = p["containerPort"]
        pods[name] = self
        self.labels = workload["spec"]["template"]["metadata"]["labels"]
        # Every mount gets a directory of its own; a Secret's holds its keys' files.
        volumes = {v["name"]: v for v in spec.get("volumes", [])}
        self.mounts = {}
        self.claim_dirs = []
        for m in c.get("volumeMounts", []):
            d = os.path.join(tmp, name + "-" + m["name"])
            os.makedirs(d, exist_ok=True)
            v = volumes.get(m["name"])
            if v is None:
                check(m["name"] in claims, "%s: mount %s names no volume or claim template"
                      % (name, m["name"]))
                self.claim_dirs.append(d)
            elif "secret" in v:
                write_secret(kust, v["secret"]["secretName"], d)
                self.secret_of_mount[m["mountPath"]] = v["secret"]["secretName"]
                check(m.get("readOnly") is True, "%s: Secret mount %s is not readOnly"
                      % (name, m["name"]))
            else:
                check("emptyDir" in v, "%s: volume %s: only secret and emptyDir are mapped"
                      % (name, m["name"]))
            self.mounts[m["mountPath"]] = d
        self.env = {}
        self.env_field = {}     # env name -> the downward API field it comes from
        for e in c.get("env", []):
            if "value" in e:
                self.env[e["name"]] = e["value"]
            else:
                field = e["valueFrom"]["fieldRef"]["fieldPath"]
                fields = {"status.podIP": "127.0.0.1", "status.hostIP": "127.0.0.1",
                          "metadata.name": self.pod_name, "metadata.namespace": self.namespace}
                # A pod label, as the pod template sets it.
                fields.update({"metadata.labels['%s']" % k: str(v)
                               for k, v in self.labels.items()})
                check(field in fields, "%s: env %s from %s is not mapped" % (name, e["name"],
                                                                              field))
                self.env[e["name"]] = fields[field]
                self.env_field[e["name"]] = field

    def local_port(self, port):
        """A probe's or Service's port (a number or a containerPort's name) as the local one."""
        if isinstance(port, str):
            check(port in self.port_by_name, "%s: no containerPort named %s" % (self.name, port))
            port = self.port_by_name[port]
        check(port in self.port_map, "%s: port %s is not a containerPort" % (self.name, port))
        return self.port_map[port]

    def map_path(self, arg):
        best = None
        for mp in self.mounts:
            if arg == mp or arg.startswith(mp.rstrip("/") + "/"):
                if best is None or len(mp) > len(best):
                    best = mp
        return arg if best is None else self.mounts[best] + arg[len(best):]

    def argv(self, prefix, services, pods, addr_map=None):
        """The container's command and args as a local argv. addr_map maps HOST:PORT values
        (after $(VAR) substitution) of the address flags to local ones; the rest is mapped as
        described in the docstring at the top. A command of ["/bin/sh", "-c", "exec BIN ...",
        ...] runs as written: the shell from this machine, BIN from the install's bin/ (the
        image's PATH, see env())."""
        c = self.c
        check(c.get("command"), "%s: no command (the image's entrypoint is tini)" % self.name)
        raw = list(c["command"]) + [str(a) for a in c.get("args", [])]
        addr_map = addr_map or {}

        def subst(s):
            # Kubernetes' expansion: $$ is a literal $, $(NAME) the variable.
            def var(m):
                if m.group(0) == "$$":
                    return "$"
                check(m.group(1) in self.env, "%s: $(%s) is not defined in env"
                      % (self.name, m.group(1)))
                return self.env[m.group(1)]
            return re.sub(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_]*)\)", var, s)

        def map_addr(a, what):
            check(a in addr_map, "%s: %s %s is not an address of the pods" % (self.name, what, a))
            return addr_map[a]

        shell = is_shell_exec(raw)
        out = []
        for i, a in enumerate(raw):
            a = subst(a)
            prev = raw[i - 1] if i else ""
            if shell and i < 4:
                if i == 0:
                    check(os.access(a, os.X_OK), "%s: %s is not a shell here" % (self.name, a))
                elif i == 2:
                    binary = shell_exec_binary(a)
                    check(os.access(os.path.join(prefix, "bin", binary), os.X_OK),
                          "%s: the shell runs %s, which is not in the install's bin/"
                          % (self.name, binary))
                    for w in shlex.split(a):
                        check(not w.startswith("/"), "%s: the shell command names the path %s"
                              % (self.name, w))
                out.append(a)
                continue
            if i == 0:
                path = os.path.join(prefix, "bin", a)
                check(os.access(path, os.X_OK), "%s: command %s is not in the install's bin/"
                      % (self.name, a))
                a = path
            elif prev in ("--raft-address", "--raft-bind") or \
                    (prev in ("--dispatcher", "--advertise") and a in addr_map):
                a = map_addr(a, prev)
            elif prev == "--raft-cluster":
                members = []
                for m in a.split(","):
                    rid, eq, addr = m.partition("=")
                    check(eq and rid.isdigit(), "%s: --raft-cluster member %r is not ID=HOST:PORT"
                          % (self.name, m))
                    members.append("%s=%s" % (rid, map_addr(addr, "--raft-cluster member")))
                a = ",".join(members)
            elif prev in ("--port", "--metrics-port"):
                check(int(a) in self.port_map, "%s: %s %s is not a containerPort"
                      % (self.name, prev, a))
                a = str(self.port_map[int(a)])
            elif prev in ("--dispatcher", "--advertise"):
                host, port = a.rsplit(":", 1)
                if host in services:
                    svc_port = [p for p in services[host]["spec"]["ports"]
                                if p["port"] == int(port)]
                    check(svc_port, "%s: Service %s has no port %s" % (self.name, host, port))
                    target = find_service_pod(services[host], pods)
                    a = "127.0.0.1:%d" % target.local_port(svc_port[0]["targetPort"])
                else:
                    # The pod's own IP, from the downward API: only a pod's own --advertise.
                    m = re.fullmatch(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\):(\d+)", raw[i])
                    check(prev == "--advertise" and m and
                          self.env_field.get(m.group(1)) == "status.podIP",
                          "%s: %s %s is neither a Service nor $(POD_IP):PORT with POD_IP from "
                          "status.podIP" % (self.name, prev, raw[i]))
                    a = "127.0.0.1:%d" % self.local_port(int(port))
            elif a.startswith("/"):
                a = self.map_path(a)
                check(a.startswith(self.tmp + "/"),
                      "%s: the path %s is on no mounted volume" % (self.name, raw[i]))
            out.append(a)
        return out

    def process_env(self, prefix):
        """The environment the container's process sees: the container's env, the install's
        bin/ first on PATH (the image's /usr/local/bin), HOSTNAME the pod's name."""
        env = server_env()
        env.update(self.env)
        env["PATH"] = os.path.join(prefix, "bin") + ":" + env.get("PATH", "/usr/bin:/bin")
        env["HOSTNAME"] = self.pod_name
        return env

    def tls_files(self, argv_raw):
        """{flag: (Secret name, key)} for the --tls-* flags of the unmapped argv."""
        out = {}
        for i, a in enumerate(argv_raw[:-1]):
            if a in ("--tls-cert", "--tls-key", "--tls-ca"):
                path = argv_raw[i + 1]
                mount = os.path.dirname(path)
                check(mount in self.secret_of_mount, "%s: %s %s is not in a mounted Secret"
                      % (self.name, a, path))
                out[a] = (self.secret_of_mount[mount], os.path.basename(path))
        return out

    def raw_args(self):
        return list(self.c["command"]) + [str(a) for a in self.c.get("args", [])]

    def probes(self):
        return [(kind, self.c[kind]) for kind in ("startupProbe", "livenessProbe", "readinessProbe")
                if kind in self.c]


def find_service_pod(svc, pods):
    sel = svc["spec"]["selector"]
    for pod in pods.values():
        labels = pod.labels
        if all(labels.get(k) == v for k, v in sel.items()):
            return pod
    fail("Service %s selects no pod template" % svc["metadata"]["name"])


def write_secret(kust, secret_name, d):
    gens = [g for g in kust.get("secretGenerator", []) if g["name"] == secret_name]
    check(gens, "Secret %s is not made by the kustomization's secretGenerator" % secret_name)
    for key, src in secret_files(gens[0]).items():
        if src == "token":
            with open(os.path.join(d, key), "w") as out:
                out.write(TOKEN + "\n")
        else:
            check(src in SECRET_FILES, "secretGenerator %s: the file %s is not one make-certs.sh "
                  "writes" % (secret_name, src))
            shutil.copy(SECRET_FILES[src], os.path.join(d, key))


def secret_files(gen):
    """A secretGenerator's files as {key: file name}."""
    out = {}
    for f in gen.get("files", []):
        key, _, src = f.partition("=") if "=" in f else (os.path.basename(f), "", f)
        out[key] = os.path.basename(src)
    return out


def generator(kust, secret_name):
    gens = [g for g in kust.get("secretGenerator", []) if g["name"] == secret_name]
    check(len(gens) == 1, "Secret %s is not made by the kustomization's secretGenerator"
          % secret_name)
    return gens[0]


def token_of(argv):
    return argv[argv.index("--auth-token-file") + 1] if "--auth-token-file" in argv else None


def check_kubernetes(tmp, prefix):
    kdir, kust, docs = load_kustomization()
    sts = find(docs, "StatefulSet", "sluice-dispatcher")
    dep = find(docs, "Deployment", "sluice-worker")
    hpa = find(docs, "HorizontalPodAutoscaler")
    services = {d["metadata"]["name"]: d for d in docs if d["kind"] == "Service"}
    check(sts["spec"]["replicas"] == 1, "the dispatcher StatefulSet must have one replica")
    check(sts["spec"]["serviceName"] in services, "StatefulSet serviceName names no Service")
    claims = [t["metadata"]["name"] for t in sts["spec"].get("volumeClaimTemplates", [])]
    check(claims, "the dispatcher has no volumeClaimTemplate for its work dir")
    check("replicas" not in dep["spec"], "the worker Deployment sets replicas: %s, which every "
          "apply would reset the HPA's count to" % dep["spec"].get("replicas"))
    check_guide_rollouts(docs)

    # The name readers verify workers against, from the Job docs/deploying.md runs; the Secrets
    # the pods mount below hold certificates for it.
    job, job_path = guide_job(kust)
    worker_name = tls_worker_name(job_path, job["spec"]["template"]["spec"]["containers"][0])
    make_local_certs(tmp, worker_name)

    pods = {}
    disp = Pod("k8s-dispatcher", sts, kust, tmp, pods, claims)
    work = Pod("k8s-worker", dep, kust, tmp, pods)
    for pod, wl in ((disp, sts), (work, dep)):
        sel = wl["spec"]["selector"]["matchLabels"]
        check(all(pod.labels.get(k) == v for k, v in sel.items()),
              "%s: the selector does not match the template's labels" % pod.name)
        sc = wl["spec"]["template"]["spec"].get("securityContext", {})
        check(sc.get("runAsNonRoot") is True and sc.get("runAsUser", 0) != 0,
              "%s: not runAsNonRoot with a non-zero runAsUser" % pod.name)
        csc = pod.c.get("securityContext", {})
        check(csc.get("readOnlyRootFilesystem") is True and
              csc.get("allowPrivilegeEscalation") is False,
              "%s: the container's root filesystem is writable or it may escalate" % pod.name)
        res = pod.c.get("resources", {})
        check("requests" in res and "limits" in res, "%s: no resource requests and limits"
              % pod.name)
    for svc in services.values():
        target = find_service_pod(svc, pods)
        for p in svc["spec"]["ports"]:
            target.local_port(p.get("targetPort", p["port"]))
    check_worker_advertise(dep, work)
    for pod in (disp, work):
        tls = pod.tls_files(pod.raw_args())
        check(sorted(tls) == ["--tls-ca", "--tls-cert", "--tls-key"],
              "%s: not all of --tls-cert, --tls-key and --tls-ca (has %s)" % (pod.name,
                                                                            sorted(tls)))

    dargv = disp.argv(prefix, services, pods)
    check("--fault-tolerant" in dargv and "--work-dir" in dargv,
          "the dispatcher is not --fault-tolerant with a --work-dir")
    work_dir = dargv[dargv.index("--work-dir") + 1]
    check(work_dir in disp.claim_dirs, "--work-dir is not the mount of a volumeClaimTemplate")
    token_path = token_of(dargv)
    check(token_path and open(token_path).read().strip() == TOKEN,
          "the dispatcher's --auth-token-file is not the mounted Secret's token")

    d = Proc("k8s-dispatcher", dargv, tmp, server_env())
    m = d.wait_line(r"listening on (\S+):(\d+)$")
    check(int(m.group(2)) == disp.local_port("rpc"),
          "the dispatcher listens on %s, not on its containerPort" % m.group(0))
    mm = d.wait_line(r"metrics on (\S+):(\d+)$")
    metrics_port = int(mm.group(2))
    for kind, probe in disp.probes():
        port = disp.local_port(probe["httpGet"]["port"])
        check(port == metrics_port, "dispatcher %s: port %s is not the metrics port"
              % (kind, probe["httpGet"]["port"]))
        st, body = wait_status(port, probe["httpGet"]["path"], 200)
        note("dispatcher %s GET %s: %d %s" % (kind, probe["httpGet"]["path"], st, body.strip()))

    # The HPA's metric, scraped as Prometheus would (with the token, refused without).
    st, _ = http_get(metrics_port, "/metrics")
    check(st == 401, "/metrics without the token answered %d, wanted 401" % st)
    st, body = http_get(metrics_port, "/metrics", TOKEN)
    check(st == 200, "/metrics with the token answered %d" % st)
    check(hpa["apiVersion"] == "autoscaling/v2", "the HPA is not autoscaling/v2")
    check(hpa["spec"]["scaleTargetRef"]["kind"] == dep["kind"] and
          hpa["spec"]["scaleTargetRef"]["name"] == dep["metadata"]["name"],
          "the HPA does not scale the worker %s" % dep["kind"])
    check(1 <= hpa["spec"]["minReplicas"] <= hpa["spec"]["maxReplicas"], "HPA min/max replicas")
    sd = hpa["spec"].get("behavior", {}).get("scaleDown", {})
    check(sd.get("stabilizationWindowSeconds", 0) > 0, "the HPA has no scale-down stabilization")
    hpa_metrics = []
    for mt in hpa["spec"]["metrics"]:
        check(mt["type"] == "External", "HPA metric type %s, wanted External" % mt["type"])
        target = mt["external"]["target"]
        check(target["type"] == "AverageValue" and str(target["averageValue"]) == "1",
              "the HPA's target is not AverageValue 1")
        # Checked on /metrics once the worker registered (below): the family has no series
        # before the dispatcher's first window.
        name = mt["external"]["metric"]["name"]
        hpa_metrics.append((name, mt["external"]["metric"].get("selector", {})
                            .get("matchLabels", {})))
    targets = scrape_target_labels(kdir)
    check_adapter_and_scrape(kdir, hpa_metrics, services, kust)

    # The worker.
    wargv = work.argv(prefix, services, pods)
    grace = dep["spec"]["template"]["spec"].get("terminationGracePeriodSeconds", 30)
    drain_ms = int(wargv[wargv.index("--drain-timeout-ms") + 1]) if "--drain-timeout-ms" in wargv \
        else 30000
    check(grace * 1000 >= drain_ms + 5000,
          "terminationGracePeriodSeconds %d is not comfortably above --drain-timeout-ms %d"
          % (grace, drain_ms))
    check(token_of(wargv) and open(token_of(wargv)).read().strip() == TOKEN,
          "the worker's --auth-token-file is not the mounted Secret's token")
    w = Proc("k8s-worker", wargv, tmp, server_env())
    m = w.wait_line(r"listening on (\S+):(\d+)$")
    check(int(m.group(2)) == work.local_port("rpc"),
          "the worker listens on %s, not on its containerPort" % m.group(0))
    wm = w.wait_line(r"metrics on (\S+):(\d+)$")
    for kind, probe in work.probes():
        port = work.local_port(probe["httpGet"]["port"])
        check(port == int(wm.group(2)), "worker %s: port %s is not the metrics port"
              % (kind, probe["httpGet"]["port"]))
        st, body = wait_status(port, probe["httpGet"]["path"], 200)
        note("worker %s GET %s: %d %s" % (kind, probe["httpGet"]["path"], st, body.strip()))

    # The HPA's metric, with the labels its selector names that the series carries itself (the
    # worker's pool), once the worker registered and a window closed (10 s by default).
    for name, labels in hpa_metrics:
        own = sorted((k, v) for k, v in labels.items() if k not in targets)
        deadline = time.monotonic() + 30
        while True:
            st, body = http_get(metrics_port, "/metrics", TOKEN)
            found = [line for line in body.splitlines()
                     if re.match(r"^%s(\{.*\})? \d+(\.\d+)?$" % re.escape(name), line) and
                     all('%s="%s"' % (k, v) in line for k, v in own)]
            if st == 200 and found:
                break
            check(time.monotonic() < deadline, "no series %s with %s in the dispatcher's /metrics"
                  % (name, own))
            time.sleep(0.5)
        note("dispatcher /metrics has %s" % found[0])

    # The servers speak TLS only: a client without --tls-ca is refused.
    plain = [os.path.join(prefix, "bin", "sluice"), "status", "--dispatcher",
             "127.0.0.1:%d" % disp.local_port("rpc"), "--auth-token-file", token_path,
             "--timeout-ms", "5000"]
    r = subprocess.run(plain, capture_output=True, timeout=20, preexec_fn=die_with_parent)
    check(r.returncode != 0 and b"this server requires TLS" in r.stderr,
          "a client without TLS was not refused by the dispatcher: exit %d, %s"
          % (r.returncode, r.stderr.decode()))

    # docs/deploying.md's read: the trainer Job it applies, its container run like the servers'
    # with its Secrets (the client certificate) mounted. The worker's certificate does not name the
    # address it advertises, so without --tls-worker-name the read fails on the worker, and with
    # it, it reads everything: the flag is what makes TLS to pods work.
    trainer = Pod("k8s-read-check", job, kust, tmp, {})
    tls = trainer.tls_files(trainer.raw_args())
    check(sorted(tls) == ["--tls-ca", "--tls-cert", "--tls-key"],
          "the read Job has not all of --tls-cert, --tls-key and --tls-ca")
    argv = trainer.argv(prefix, services, pods)
    i = argv.index("--tls-worker-name")
    without = argv[:i] + argv[i + 2:] + ["--timeout-ms", "20000"]
    note("kubernetes read without --tls-worker-name: %s" % shlex.join(without))
    r = subprocess.run(without, capture_output=True, timeout=40, env=server_env(),
                       preexec_fn=die_with_parent)
    check(r.returncode != 0 and b"tls: certificate verify failed: IP address mismatch" in r.stderr,
          "a read without --tls-worker-name did not fail on the worker's address: exit %d, %s"
          % (r.returncode, r.stderr.decode()))
    note("without --tls-worker-name: exit %d, %s" % (r.returncode,
                                                     r.stderr.decode().strip().splitlines()[-1]))
    read_range_1000(argv, tmp, "kubernetes (%s)" % job_path, server_env())
    check_cert_names(tmp, kust, services, disp, work, trainer, worker_name)

    rc, took = w.stop(signal.SIGTERM, grace)
    check(rc == 0, "the worker exited %d after SIGTERM, wanted 0 (drained)" % rc)
    note("worker drained and exited 0 in %.1f s (grace period %d s)" % (took, grace))
    dgrace = sts["spec"]["template"]["spec"].get("terminationGracePeriodSeconds", 30)
    rc, took = d.stop(signal.SIGTERM, dgrace)
    check(rc == 0, "the dispatcher exited %d after SIGTERM" % rc)
    check(os.path.isdir(os.path.join(work_dir, "journal")),
          "the dispatcher wrote no journal into the claim's mount")
    # A rescheduled pod: the same args on the same claim keep the datasets the reads registered.
    d = Proc("k8s-dispatcher-again", dargv, tmp, server_env())
    d.wait_line(r"listening on (\S+):(\d+)$")
    wait_status(disp.local_port("metrics"), "/readyz", 200)
    r = subprocess.run([os.path.join(prefix, "bin", "sluice"), "status", "--dispatcher",
                        "127.0.0.1:%d" % disp.local_port("rpc"), "--auth-token-file", token_path,
                        "--tls-ca", SECRET_FILES["ca.pem"], "--tls-cert",
                        SECRET_FILES["client.pem"], "--tls-key", SECRET_FILES["client.key"],
                        "--json", "--timeout-ms", "10000"], capture_output=True, timeout=20,
                       preexec_fn=die_with_parent)
    check(r.returncode == 0, "sluice status after the restart: %s" % r.stderr.decode())
    datasets = json.loads(r.stdout)["datasets"]
    check(len(datasets) >= 1, "the restarted dispatcher lost its datasets (the claim's journal)")
    note("dispatcher restarted on its claim: %d dataset(s) kept" % len(datasets))
    rc, _ = d.stop(signal.SIGTERM, dgrace)
    check(rc == 0, "the restarted dispatcher exited %d after SIGTERM" % rc)

    kubectl = shutil.which("kubectl")
    if kubectl:
        copy = os.path.join(tmp, "kustomize")
        shutil.copytree(kdir, copy)
        with open(os.path.join(copy, "token"), "w") as f:
            f.write(TOKEN + "\n")
        for g in kust["secretGenerator"]:
            for src in secret_files(g).values():
                if src != "token":
                    shutil.copy(SECRET_FILES[src], os.path.join(copy, src))
        r = subprocess.run([kubectl, "kustomize", copy], capture_output=True, timeout=30)
        check(r.returncode == 0, "kubectl kustomize failed: %s" % r.stderr.decode())
        built = [x for x in yaml.safe_load_all(r.stdout) if x]
        kinds = sorted(x["kind"] for x in built)
        check("Secret" in kinds and "HorizontalPodAutoscaler" in kinds,
              "kubectl kustomize built %s" % kinds)
        tls_secrets = sorted(x["metadata"]["name"] for x in built if x["kind"] == "Secret" and
                             x.get("type") == "kubernetes.io/tls")
        check(len(tls_secrets) == 3, "kubectl kustomize built TLS Secrets %s, wanted 3"
              % tls_secrets)
        note("kubectl kustomize builds: %s" % ", ".join(kinds))
    else:
        note("kubectl is not installed: the kustomization was not built")


def check_kubernetes_replicas(tmp, prefix):
    """dispatcher-replicas.yaml, the three-replica alternative to dispatcher.yaml, with the
    kustomization's other resources (worker.yaml) and the read Job: its three pods run as local
    processes like the single dispatcher's, each pod's DNS name (NAME-N.SERVICE.NAMESPACE.svc)
    mapped to 127.0.0.1 and each pod's containerPorts to free ports of its own. The client
    Service sluice-dispatcher, which routes to the one ready pod, is mapped to the list of the
    three pods' RPC ports, so callers find the leader as through the Service after a leader
    change: a follower sends them on. Checks that exactly one pod is ready and all are live,
    reads range(1000) through a worker, stops the leader with SIGTERM within its grace period,
    checks another pod becomes the ready one, and reads again."""
    kdir, kust, docs = load_kustomization()
    check("dispatcher-replicas.yaml" not in kust["resources"],
          "kustomization.yaml has dispatcher-replicas.yaml: it replaces dispatcher.yaml, it does "
          "not go beside it")
    with open(os.path.join(kdir, "dispatcher-replicas.yaml")) as f:
        rdocs = [d for d in yaml.safe_load_all(f) if d]
    # The kustomization as docs/deploying.md has it used: dispatcher.yaml's documents replaced.
    with open(os.path.join(kdir, "dispatcher.yaml")) as f:
        single = {(d["kind"], d["metadata"]["name"]) for d in yaml.safe_load_all(f) if d}
    docs = [d for d in docs if (d["kind"], d["metadata"]["name"]) not in single] + rdocs
    sts = find(docs, "StatefulSet", "sluice-dispatcher")
    dep = find(docs, "Deployment", "sluice-worker")
    services = {d["metadata"]["name"]: d for d in docs if d["kind"] == "Service"}
    spec = sts["spec"]
    n = spec["replicas"]
    check(n == 3, "dispatcher-replicas.yaml: %s replicas, wanted 3" % n)
    check(spec.get("podManagementPolicy") == "Parallel", "the replicas are not started in "
          "parallel (podManagementPolicy: Parallel): OrderedReady waits for pod 0 to be ready, "
          "which needs a leader, which needs a majority")
    raft_svc = services.get(spec["serviceName"])
    check(raft_svc is not None, "the StatefulSet's serviceName %s names no Service"
          % spec["serviceName"])
    check(raft_svc["spec"].get("clusterIP") == "None" and
          raft_svc["spec"].get("publishNotReadyAddresses") is True,
          "Service %s is not headless with publishNotReadyAddresses: true (peers must find "
          "each other before any is ready)" % spec["serviceName"])
    claims = [t["metadata"]["name"] for t in spec.get("volumeClaimTemplates", [])]
    ns = kust.get("namespace", "default")
    grace = spec["template"]["spec"].get("terminationGracePeriodSeconds", 30)
    check(grace >= 10, "terminationGracePeriodSeconds %d leaves no time for a leadership "
          "handover" % grace)

    pods = {}
    disps = [Pod("k8s-replica-%d" % i, sts, kust, tmp, pods, claims, ordinal=i) for i in range(n)]
    work = Pod("k8s-replicas-worker", dep, kust, tmp, pods)
    job, job_path = guide_job(kust)
    trainer = Pod("k8s-replicas-read-check", job, kust, tmp, {})
    probes = dict(disps[0].probes())
    check(probes.get("readinessProbe", {}).get("httpGet", {}).get("path") == "/readyz" and
          probes.get("livenessProbe", {}).get("httpGet", {}).get("path") == "/healthz",
          "the replicas' readiness is not /readyz or their liveness not /healthz")

    # Every name the pods are known by: NAME-N.SERVICE.NAMESPACE.svc[.cluster.local] on each
    # containerPort, the client Service's names, and the --raft-bind wildcard.
    addr_map = {}
    for d in disps:
        for cport, local in d.port_map.items():
            for suffix in ("", ".cluster.local"):
                addr_map["%s.%s.%s.svc%s:%d" % (d.pod_name, spec["serviceName"], ns, suffix,
                                                cport)] = "127.0.0.1:%d" % local
    client_svc = [nm for nm, sv in services.items() if nm != spec["serviceName"] and
                  all(disps[0].labels.get(k) == v for k, v in sv["spec"]["selector"].items())]
    check(client_svc == ["sluice-dispatcher"], "the replicas' client Services are %s, wanted "
          "sluice-dispatcher (the name worker.yaml and read-check.yaml dial)" % client_svc)
    for p in services["sluice-dispatcher"]["spec"]["ports"]:
        local = ",".join("127.0.0.1:%d" % d.local_port(p["targetPort"]) for d in disps)
        for host in ("sluice-dispatcher", "sluice-dispatcher.%s.svc" % ns,
                     "sluice-dispatcher.%s.svc.cluster.local" % ns):
            addr_map["%s:%d" % (host, p["port"])] = local

    argvs = []
    for d in disps:
        amap = dict(addr_map)
        amap["0.0.0.0:%d" % d.port_by_name["raft"]] = "0.0.0.0:%d" % d.local_port("raft")
        a = d.argv(prefix, services, pods, amap)
        check(is_shell_exec(a), "%s: the command is not a shell computing --raft-id" % d.name)
        argvs.append(a)
        raw = d.raw_args()
        adv = raw[raw.index("--advertise") + 1]
        check(adv.startswith("$(POD_NAME).%s.$(POD_NAMESPACE).svc:" % spec["serviceName"]) and
              d.env_field.get("POD_NAME") == "metadata.name" and
              d.env_field.get("POD_NAMESPACE") == "metadata.namespace",
              "%s: --advertise %s is not the pod's own DNS name" % (d.name, adv))
        wd = a[a.index("--work-dir") + 1]
        check(wd in d.claim_dirs, "%s: --work-dir is not a volumeClaimTemplate's mount" % d.name)
        tls = d.tls_files(raw)
        check(sorted(tls) == ["--tls-ca", "--tls-cert", "--tls-key"],
              "%s: not all of --tls-cert, --tls-key and --tls-ca" % d.name)
        check(token_of(a) and open(token_of(a)).read().strip() == TOKEN,
              "%s: --auth-token-file is not the mounted Secret's token" % d.name)
    clusters = {d.raw_args()[d.raw_args().index("--raft-cluster") + 1] for d in disps}
    check(len(clusters) == 1, "the pods' --raft-cluster differ")
    # Each pod's Raft address is its own entry of the cluster list, under the id the shell
    # computes from its ordinal.
    for i, d in enumerate(disps):
        script = shlex.split(argvs[i][2])
        check("--raft-id" in script, "%s: the shell passes no --raft-id" % d.name)
        r = subprocess.run(["/bin/sh", "-c", 'echo "%s"' % script[script.index("--raft-id") + 1]],
                           capture_output=True, timeout=10, env=d.process_env(prefix))
        rid = r.stdout.decode().strip()
        check(rid == str(i + 1), "%s: the shell computes --raft-id %r, wanted %d" % (d.name, rid,
                                                                                  i + 1))
        a = argvs[i]
        members = dict(m.split("=", 1) for m in a[a.index("--raft-cluster") + 1].split(","))
        check(members.get(rid) == a[a.index("--raft-address") + 1],
              "%s: --raft-address is not member %s of --raft-cluster" % (d.name, rid))

    # The certificate the guide's make-certs.sh makes names every pod's name the peers dial and
    # redirected callers verify, and serves as a client certificate (a replica dials its peers).
    cmd = guide_command("Kubernetes", r"make-certs\.sh")
    out = os.path.join(tmp, "certs-replicas")
    env = {k: v for k, v in os.environ.items() if k not in ("DISPATCHER_SAN", "WORKER_SAN")}
    r = subprocess.run([os.path.join(SOURCE, cmd[0]), out] + cmd[2:], capture_output=True,
                       timeout=60, env=env)
    check(r.returncode == 0, "make-certs.sh: %s" % r.stderr.decode())
    names = sorted({h.rsplit(":", 1)[0] for h in addr_map if ".svc" in h})
    for h in names:
        check(openssl_verify(out, "dispatcher.pem", "sslserver", h),
              "the dispatcher certificate does not verify for %s" % h)
    check(openssl_verify(out, "dispatcher.pem", "sslclient"),
          "the dispatcher certificate is not for client use (a replica dials its peers)")
    note("dispatcher certificate: verifies for the replicas' %s, and as a client"
         % ", ".join(names))

    procs_ = []
    for d, a in zip(disps, argvs):
        pr = Proc(d.name, a, tmp, d.process_env(prefix))
        procs_.append(pr)
    metrics = []
    for d, pr in zip(disps, procs_):
        m = pr.wait_line(r"listening on (\S+):(\d+)$")
        check(int(m.group(2)) == d.local_port("rpc"), "%s listens on %s, not on its "
              "containerPort" % (d.name, m.group(0)))
        metrics.append(d.local_port(probes["readinessProbe"]["httpGet"]["port"]))

    def ready_set(alive, timeout):
        """Waits until every live pod answers /healthz 200 and exactly one /readyz 200; returns
        its index."""
        deadline = time.monotonic() + timeout
        last = None
        while time.monotonic() < deadline:
            states = []
            for i in alive:
                try:
                    states.append((i, http_get(metrics[i], "/healthz")[0],
                                   http_get(metrics[i], "/readyz")[0]))
                except OSError as e:
                    states.append((i, None, str(e)))
            last = states
            ready = [i for i, h, r in states if r == 200]
            if all(h == 200 for _, h, _ in states) and len(ready) == 1:
                return ready[0]
            time.sleep(0.1)
        fail("the replicas %s: wanted /healthz 200 on all and /readyz 200 on exactly one within "
             "%.0f s; last (pod, /healthz, /readyz): %s" % (alive, timeout, last))

    leader = ready_set(range(n), READY_TIMEOUT + 15)
    note("replicas: %s is the one ready (the leader); /healthz 200 on all" % disps[leader].pod_name)

    wargv = work.argv(prefix, services, pods, addr_map)
    w = Proc("k8s-replicas-worker", wargv, tmp, server_env())
    w.wait_line(r"listening on (\S+):(\d+)$")
    wm = w.wait_line(r"metrics on (\S+):(\d+)$")
    wait_status(int(wm.group(2)), "/readyz", 200)
    targv = trainer.argv(prefix, services, pods, addr_map)
    read_range_1000(targv, tmp, "replicas (%s)" % job_path, server_env())

    rc, took = procs_[leader].stop(signal.SIGTERM, grace)
    check(rc == 0, "the leader %s exited %d after SIGTERM" % (disps[leader].pod_name, rc))
    note("leader %s exited 0 in %.1f s of SIGTERM (grace period %d s)"
         % (disps[leader].pod_name, took, grace))
    alive = [i for i in range(n) if i != leader]
    t0 = time.monotonic()
    new = ready_set(alive, 15.0)
    note("replicas: %s is ready %.1f s later" % (disps[new].pod_name, time.monotonic() - t0))
    wait_status(int(wm.group(2)), "/readyz", 200)
    read_range_1000(targv, tmp, "replicas after the leader's SIGTERM (%s)" % job_path,
                    server_env())
    rc, _ = w.stop(signal.SIGTERM, dep["spec"]["template"]["spec"].get(
        "terminationGracePeriodSeconds", 30))
    check(rc == 0, "the worker exited %d after SIGTERM" % rc)
    for i in alive:
        rc, _ = procs_[i].stop(signal.SIGTERM, grace)
        check(rc == 0, "%s exited %d after SIGTERM" % (disps[i].pod_name, rc))

    # docs/deploying.md's switch, run on a copy of the kustomization and built by kubectl.
    sec = "Kubernetes: three dispatcher replicas"
    swap = guide_command(sec, r"^sed -i .*kustomization\.yaml")
    kubectl = shutil.which("kubectl")
    copy = os.path.join(tmp, "kustomize-replicas")
    shutil.copytree(kdir, copy)
    r = subprocess.run(swap[:-1] + [os.path.join(copy, "kustomization.yaml")],
                       capture_output=True, timeout=10)
    check(r.returncode == 0, "%s: %s" % (shlex.join(swap), r.stderr.decode()))
    with open(os.path.join(copy, "kustomization.yaml")) as f:
        res = yaml.safe_load(f)["resources"]
    check("dispatcher-replicas.yaml" in res and "dispatcher.yaml" not in res,
          "%s's switch leaves the resources %s" % (GUIDE, res))
    if not kubectl:
        note("kubectl is not installed: the switched kustomization was not built")
        return
    with open(os.path.join(copy, "token"), "w") as f:
        f.write(TOKEN + "\n")
    for g in kust["secretGenerator"]:
        for src in secret_files(g).values():
            if src != "token":
                shutil.copy(SECRET_FILES[src], os.path.join(copy, src))
    r = subprocess.run([kubectl, "kustomize", copy], capture_output=True, timeout=30)
    check(r.returncode == 0, "kubectl kustomize (replicas) failed: %s" % r.stderr.decode())
    built = [x for x in yaml.safe_load_all(r.stdout) if x]
    ssets = [x for x in built if x["kind"] == "StatefulSet"]
    check(len(ssets) == 1 and ssets[0]["spec"]["replicas"] == 3 and
          sorted(x["metadata"]["name"] for x in built if x["kind"] == "Service") ==
          ["sluice-dispatcher", "sluice-dispatcher-raft"],
          "kubectl kustomize (replicas) built %s" % sorted((x["kind"], x["metadata"]["name"])
                                                         for x in built))
    note("kubectl kustomize builds the replicas' kustomization: %s"
         % ", ".join(sorted(x["kind"] for x in built)))


def check_worker_advertise(wl, pod):
    """Each worker advertises its pod IP from the downward API ($(POD_IP):PORT, PORT its rpc
    containerPort): a Deployment's pods have no DNS name of their own, and readers dial the
    address directly."""
    check(wl["kind"] == "Deployment", "the workers are a %s, not a Deployment" % wl["kind"])
    raw = pod.raw_args()
    adv = raw[raw.index("--advertise") + 1] if "--advertise" in raw else ""
    m = re.fullmatch(r"\$\((\w+)\):(\d+)", adv)
    check(m and pod.env_field.get(m.group(1)) == "status.podIP",
          "the worker advertises %r, not $(POD_IP):PORT with POD_IP from status.podIP" % adv)
    check(int(m.group(2)) == pod.port_by_name.get("rpc") and "--port" in raw and
          raw[raw.index("--port") + 1] == m.group(2),
          "the worker advertises port %s, not its --port and rpc containerPort" % m.group(2))
    tspec = wl["spec"]["template"]["spec"]
    check(tspec.get("hostNetwork") is not True, "the worker pods use the host's network: pod IPs "
          "would be node IPs shared by several workers")
    note("workers advertise %s (%s from status.podIP)" % (adv, m.group(1)))


def tls_worker_name(what, container):
    """The --tls-worker-name a reader's container passes; every reader must pass one."""
    raw = list(container.get("command", [])) + [str(a) for a in container.get("args", [])]
    check("--tls-worker-name" in raw, "%s: the reader gives no --tls-worker-name: it would check "
          "each worker's certificate against the worker's pod IP" % what)
    name = raw[raw.index("--tls-worker-name") + 1]
    check(re.fullmatch(r"[a-z0-9]([a-z0-9.-]*[a-z0-9])?", name) and "." in name,
          "%s: --tls-worker-name %r is not a DNS name" % (what, name))
    return name


def check_guide_rollouts(docs):
    """docs/deploying.md's `kubectl rollout status KIND/NAME` commands name the workloads as they
    are."""
    kinds = {(d["kind"].lower(), d["metadata"]["name"]) for d in docs}
    seen = []
    for line, words in guide_commands("Kubernetes"):
        if "rollout" in words and "status" in words:
            ref = words[words.index("status") + 1]
            kind, _, name = ref.partition("/")
            check((kind, name) in kinds, "%s: %s names no workload of the kustomization"
                  % (GUIDE, line.strip()))
            seen.append(ref)
    workloads = sorted("%s/%s" % k for k in kinds if k[0] in ("deployment", "statefulset"))
    check(sorted(seen) == workloads, "%s waits for the rollout of %s, the kustomization "
          "has %s" % (GUIDE, sorted(seen), workloads))


def guide_job(kust):
    """The Job docs/deploying.md's Kubernetes part applies to read through the cluster, and its
    file."""
    cmd = guide_command("Kubernetes", r"kubectl .*apply -f \S+\.yaml")
    path = cmd[cmd.index("-f") + 1]
    with open(os.path.join(SOURCE, path)) as f:
        docs = [d for d in yaml.safe_load_all(f) if d]
    check(len(docs) == 1 and docs[0]["kind"] == "Job", "%s is not one Job" % path)
    job = docs[0]
    logs = guide_command("Kubernetes", r"kubectl .* logs ")
    check("job/" + job["metadata"]["name"] in logs, "%s shows no logs of job/%s"
          % (GUIDE, job["metadata"]["name"]))
    img = [i for i in kust.get("images", []) if i["name"] == "sluice"]
    check(img, "the kustomization names no image sluice")
    want = "%s:%s" % (img[0]["newName"], img[0]["newTag"])
    got = job["spec"]["template"]["spec"]["containers"][0]["image"]
    check(got == want, "%s runs the image %s, the kustomization %s" % (path, got, want))
    return job, path


def openssl_verify(d, cert, purpose, host=None):
    """Whether openssl verifies d/cert against d/ca.pem for purpose and, if given, host (a DNS
    name, or an IPv4 address checked as one)."""
    argv = ["openssl", "verify", "-CAfile", os.path.join(d, "ca.pem"), "-purpose", purpose]
    if host and re.fullmatch(r"[\d.]+", host):
        argv += ["-verify_ip", host]
    elif host:
        argv += ["-verify_hostname", host]
    r = subprocess.run(argv + [os.path.join(d, cert)], capture_output=True, timeout=10)
    return r.returncode == 0


def dns_names(path):
    """The DNS entries of a certificate's subjectAltName."""
    r = subprocess.run(["openssl", "x509", "-noout", "-ext", "subjectAltName", "-in", path],
                       capture_output=True, timeout=10)
    check(r.returncode == 0, "openssl x509 %s: %s" % (path, r.stderr.decode()))
    return re.findall(r"DNS:([^,\s]+)", r.stdout.decode())


def check_cert_names(tmp, kust, services, disp, work, trainer, worker_name):
    """Runs docs/deploying.md's certificate command as given (into a temporary directory) and checks
    with openssl that the certificate each pod mounts names what its peers check: the worker's
    the name every reader passes as --tls-worker-name (a DNS entry of its own, no wildcard) and
    no other name or address, the dispatcher's its Service's names, the trainer's for client use
    only; every pod trusts the one CA; each key matches its certificate."""
    cmd = guide_command("Kubernetes", r"make-certs\.sh")
    script = os.path.join(SOURCE, cmd[0])
    check(os.path.normpath(cmd[1]) == os.path.join("deploy", "kubernetes"),
          "%s writes the certificates to %s, not next to kustomization.yaml" % (GUIDE, cmd[1]))
    out = os.path.join(tmp, "certs-guide")
    env = {k: v for k, v in os.environ.items() if k not in ("DISPATCHER_SAN", "WORKER_SAN")}
    r = subprocess.run([script, out] + cmd[2:], capture_output=True, timeout=60, env=env)
    check(r.returncode == 0, "%s failed: %s" % (" ".join(cmd), r.stderr.decode()))

    def source(pod, flag):
        secret, key = pod.tls_files(pod.raw_args())[flag]
        files = secret_files(generator(kust, secret))
        check(key in files, "%s: %s names the key %s, which Secret %s has not"
              % (pod.name, flag, key, secret))
        return files[key]

    for pod in (disp, work, trainer):
        check(source(pod, "--tls-ca") == "ca.pem", "%s: --tls-ca is not the CA" % pod.name)
        crt, key = source(pod, "--tls-cert"), source(pod, "--tls-key")
        pubs = [subprocess.run(a, capture_output=True, timeout=10).stdout for a in
                (["openssl", "x509", "-noout", "-pubkey", "-in", os.path.join(out, crt)],
                 ["openssl", "pkey", "-pubout", "-in", os.path.join(out, key)])]
        check(pubs[0] and pubs[0] == pubs[1], "%s: %s is not the key of %s" % (pod.name, key,
                                                                               crt))

    # Every reader docs/deploying.md shows passes the same name: the Job's, and any trainer
    # instructions (--tls-worker-name NAME, tls_worker_name="NAME" in Python; a name has a dot,
    # a placeholder has not).
    sec = guide_section("Kubernetes")
    shown = re.findall(r"--tls-worker-name\s+([\w-]+\.[\w.-]*\w)|tls_worker_name=[\"']([^\"']+)",
                       sec)
    check(any(py for _, py in shown), "%s's Kubernetes part shows trainers no "
          "tls_worker_name= for Python" % GUIDE)
    for cli, py in shown:
        check((cli or py) == worker_name, "%s's Kubernetes part passes the worker name %s, "
              "the read Job %s" % (GUIDE, cli or py, worker_name))

    wcrt = source(work, "--tls-cert")
    names = dns_names(os.path.join(out, wcrt))
    check(worker_name in names, "the readers' --tls-worker-name %s is not a DNS name of the worker "
          "certificate %s (%s)" % (worker_name, wcrt, ", ".join(names)))
    check(not any("*" in n for n in names), "the worker certificate %s has a wildcard: %s"
          % (wcrt, ", ".join(names)))
    check(openssl_verify(out, wcrt, "sslserver", worker_name),
          "the worker certificate %s does not verify for %s" % (wcrt, worker_name))
    check(openssl_verify(out, wcrt, "sslclient"),
          "the worker certificate %s is not for client use (it dials the dispatcher)" % wcrt)
    first, rest = worker_name.split(".", 1)
    others = ["x." + worker_name, worker_name + ".cluster.local", first, rest,
              "%s.elsewhere.svc" % first, "other." + rest, "127.0.0.1", "10.0.0.5"]
    for name in services:
        others += [name, "%s.%s.svc" % (name, disp.namespace)]
    for bad in others:
        check(bad == worker_name or not openssl_verify(out, wcrt, "sslserver", bad),
              "the worker certificate %s also verifies for %s" % (wcrt, bad))
    note("worker certificate: verifies for %s (the readers' --tls-worker-name), not for %s"
         % (worker_name, ", ".join(others)))

    dcrt = source(disp, "--tls-cert")
    svc = [n for n, sv in services.items()
           if all(disp.labels.get(k) == v for k, v in sv["spec"]["selector"].items())]
    hosts = set()
    for name in svc:
        hosts |= {name, "%s.%s.svc" % (name, disp.namespace),
                  "%s.%s.svc.cluster.local" % (name, disp.namespace)}
    for pod in (work, trainer):
        raw = pod.raw_args()
        hosts.add(raw[raw.index("--dispatcher") + 1].rsplit(":", 1)[0])
    for h in sorted(hosts):
        check(openssl_verify(out, dcrt, "sslserver", h),
              "the dispatcher certificate %s does not verify for %s" % (dcrt, h))
    check(not openssl_verify(out, dcrt, "sslserver", worker_name),
          "the dispatcher certificate %s verifies for the workers' name %s" % (dcrt, worker_name))
    note("dispatcher certificate: verifies for %s" % ", ".join(sorted(hosts)))
    ccrt = source(trainer, "--tls-cert")
    check(openssl_verify(out, ccrt, "sslclient"), "the client certificate %s is not for client "
          "use" % ccrt)
    # A trainer's key must not let it pose as a server (a worker's would).
    check(not openssl_verify(out, ccrt, "sslserver"), "the trainer's certificate %s can serve: "
          "it must be the client certificate, not a server's" % ccrt)
    note("client certificate %s: client use only" % ccrt)


def scrape_target_labels(kdir):
    """The labels prometheus-scrape.yaml sets on every series it scrapes (namespace, service)."""
    with open(os.path.join(kdir, "prometheus-scrape.yaml")) as f:
        scrape = yaml.safe_load(f)["scrape_configs"]
    return {r["target_label"] for sc in scrape for r in sc["relabel_configs"]
            if "target_label" in r}


def check_adapter_and_scrape(kdir, hpa_metrics, services, kust):
    with open(os.path.join(kdir, "prometheus-adapter-values.yaml")) as f:
        values = yaml.safe_load(f)
    rules = values["rules"]["external"]
    for name, labels in hpa_metrics:
        rule = [r for r in rules if r["name"].get("as") == name]
        check(rule, "the adapter exposes no external metric %s" % name)
        check(name in rule[0]["seriesQuery"], "the adapter rule for %s queries another series"
              % name)
    with open(os.path.join(kdir, "prometheus-scrape.yaml")) as f:
        scrape = yaml.safe_load(f)["scrape_configs"]
    check(len(scrape) == 1, "one scrape config expected")
    sc = scrape[0]
    auth = sc["authorization"]
    check(auth.get("type", "Bearer") == "Bearer" and "credentials_file" in auth,
          "the scrape config does not send the token as a bearer credential")
    keys = [os.path.basename(f) for g in kust["secretGenerator"] for f in g.get("files", [])]
    check(os.path.basename(auth["credentials_file"]) in keys,
          "the scrape's credentials_file is not a key of the generated Secret")
    keep = [r for r in sc["relabel_configs"] if r.get("action") == "keep"]
    check(keep, "the scrape config keeps every endpoint")
    svc, port = keep[0]["regex"].split(";")
    check(svc in services and any(p.get("name") == port for p in services[svc]["spec"]["ports"]),
          "the scrape config keeps %s;%s, not a Service's named port" % (svc, port))
    targets = {r["target_label"] for r in sc["relabel_configs"] if "target_label" in r}
    for name, labels in hpa_metrics:
        for k, v in labels.items():
            # A label the scrape does not set must be the series' own (the pool): the caller
            # checks it on /metrics.
            if k == "service":
                check(v == svc, "the HPA selects service=%s, the scrape keeps %s" % (v, svc))


def guide_section(subsection):
    """The text of GUIDE's "## SUBSECTION" section, up to the next "## " heading."""
    with open(os.path.join(SOURCE, GUIDE)) as f:
        text = f.read()
    sec = re.search(r"^## %s\n(.*?)(?=^## |\Z)" % re.escape(subsection), text, re.S | re.M)
    check(sec, "%s has no '## %s'" % (GUIDE, subsection))
    return sec.group(1)


def guide_commands(subsection):
    """The command lines in the code blocks of GUIDE's "## SUBSECTION" (continuation lines
    joined), each as (text, words as the shell splits them)."""
    out = []
    for block in re.findall(r"^```sh\n(.*?)^```", guide_section(subsection), re.S | re.M):
        for line in block.replace("\\\n", " ").splitlines():
            if line.strip():
                out.append((line, shlex.split(line, comments=True)))
    return out


def guide_command(subsection, pattern):
    """The first of guide_commands(subsection) matching pattern."""
    for line, words in guide_commands(subsection):
        if re.search(pattern, line):
            return words
    fail("%s, %s, shows no command matching /%s/" % (GUIDE, subsection, pattern))


# ---- systemd -------------------------------------------------------------------------------------

KNOWN = {
    "Unit": {"Description", "Documentation", "After", "Before", "Wants", "Requires", "BindsTo",
             "PartOf", "Conflicts", "ConditionPathExists", "StartLimitIntervalSec",
             "StartLimitBurst"},
    "Service": {"Type", "ExecStart", "ExecStartPre", "ExecStartPost", "ExecReload", "ExecStop",
                "Restart", "RestartSec", "KillSignal", "KillMode", "TimeoutStopSec",
                "TimeoutStartSec", "SendSIGKILL", "Environment", "EnvironmentFile", "User",
                "Group", "DynamicUser", "StateDirectory", "StateDirectoryMode",
                "RuntimeDirectory", "LoadCredential", "SetCredential", "UMask", "LimitNOFILE",
                "ProtectSystem", "ProtectHome", "PrivateTmp", "PrivateDevices",
                "NoNewPrivileges", "ReadOnlyPaths", "ReadWritePaths", "InaccessiblePaths",
                "ProtectKernelTunables", "ProtectKernelModules", "ProtectKernelLogs",
                "ProtectControlGroups", "ProtectClock", "ProtectHostname",
                "RestrictAddressFamilies", "RestrictNamespaces", "RestrictRealtime",
                "RestrictSUIDSGID", "LockPersonality", "MemoryDenyWriteExecute",
                "SystemCallArchitectures", "SystemCallFilter", "CapabilityBoundingSet",
                "AmbientCapabilities", "WorkingDirectory"},
    "Install": {"WantedBy", "RequiredBy", "Alias", "DefaultInstance"},
}


def parse_unit(path):
    sections, cur = {}, None
    with open(path) as f:
        text = f.read().replace("\\\n", " ")
    for n, line in enumerate(text.splitlines(), 1):
        s = line.strip()
        if not s or s[0] in "#;":
            continue
        if s.startswith("["):
            cur = s.strip("[]")
            check(cur in KNOWN, "%s: unknown section [%s]" % (path, cur))
            sections.setdefault(cur, [])
            continue
        check(cur is not None and "=" in s, "%s: line %d is not KEY=VALUE in a section"
              % (path, n))
        k, v = s.split("=", 1)
        k = k.strip()
        check(k in KNOWN[cur], "%s: %s= is not a known [%s] directive" % (path, k, cur))
        sections[cur].append((k, v.strip()))
    return sections


def values(sec, key):
    return [v for k, v in sec.get("Service", []) if k == key]


def one(sec, key, path):
    v = values(sec, key)
    check(len(v) == 1, "%s: expected one %s=" % (path, key))
    return v[0]


def seconds(v):
    m = re.fullmatch(r"(\d+)(s|min)?", v)
    check(m, "cannot read the time span %r" % v)
    return int(m.group(1)) * (60 if m.group(2) == "min" else 1)


class Unit:
    """A unit's ExecStart as a local argv: specifiers, the state and credentials directories and
    the environment substituted; /usr/local/bin mapped to the install, data roots, the
    credentials' sources and every fixed port to temporary ones."""

    def __init__(self, name, instance, tmp, prefix, ports, env_files):
        self.path = os.path.join(DEPLOY, "systemd", name)
        self.sec = sec = parse_unit(self.path)
        self.name = name.replace("@.", "@%s." % instance) if instance else name
        svc = sec.get("Service", [])
        check(svc, "%s: no [Service]" % name)
        for key, want in (("DynamicUser", "yes"), ("ProtectSystem", "strict"),
                          ("PrivateTmp", "yes"), ("NoNewPrivileges", "yes"),
                          ("KillSignal", "SIGTERM")):
            check(one(sec, key, name) == want, "%s: %s= is not %s" % (name, key, want))
        check(one(sec, "ProtectHome", name) in ("yes", "read-only", "tmpfs"),
              "%s: ProtectHome= is off" % name)
        env = {}
        for ef in values(sec, "EnvironmentFile"):
            ef = ef.lstrip("-")
            check(os.path.basename(ef) in env_files, "%s: EnvironmentFile=%s has no example in "
                  "deploy/systemd" % (name, ef))
            with open(env_files[os.path.basename(ef)]) as f:
                for line in f:
                    line = line.strip()
                    if line and not line.startswith("#"):
                        k, v = line.split("=", 1)
                        env[k] = v
        for e in values(sec, "Environment"):
            for kv in shlex.split(e):
                k, v = kv.split("=", 1)
                env[k] = v
        state_root = os.path.join(tmp, "state")
        for sd in values(sec, "StateDirectory"):
            env["STATE_DIRECTORY"] = os.path.join(state_root, sd)
            os.makedirs(env["STATE_DIRECTORY"], exist_ok=True)
        creds = values(sec, "LoadCredential")
        if creds:
            cdir = os.path.join(tmp, "credentials", self.name)
            os.makedirs(cdir, exist_ok=True)
            for c in creds:
                cname, src = c.split(":", 1)
                check(src in TOKEN_PATHS, "%s: LoadCredential=%s: only the token is mapped"
                      % (name, c))
                shutil.copy(TOKEN_PATHS[src], os.path.join(cdir, cname))
            env["CREDENTIALS_DIRECTORY"] = cdir
        self.env = env
        self.read_only = [p.lstrip("-") for v in values(sec, "ReadOnlyPaths") for p in v.split()]
        data = os.path.join(tmp, "srv-data")
        os.makedirs(data, exist_ok=True)
        self.data_map = {p: data for p in self.read_only}

        spec = {"%i": instance or "", "%I": instance or "", "%S": state_root, "%%": "%"}
        line = one(sec, "ExecStart", name).lstrip("-+!@")
        line = re.sub(r"%[iIS%]", lambda m: spec[m.group(0)], line)
        check("%" not in line, "%s: ExecStart has a specifier this test does not map" % name)

        def braced(m):
            check(m.group(1) in env, "%s: ${%s} is not set" % (name, m.group(1)))
            return shlex.quote(env[m.group(1)])
        line = re.sub(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}", braced, line)
        check("$" not in line, "%s: ExecStart has an unbraced $ variable" % name)
        raw = shlex.split(line)
        check(raw[0].startswith("/usr/local/bin/"), "%s: ExecStart is not in /usr/local/bin"
              % name)
        argv = [os.path.join(prefix, "bin", os.path.basename(raw[0]))]
        check(os.access(argv[0], os.X_OK), "%s: %s is not in the install" % (name, raw[0]))
        for i in range(1, len(raw)):
            a, prev = raw[i], raw[i - 1]
            if prev in ("--port", "--metrics-port"):
                a = str(ports.setdefault(int(a), free_port()))
            elif prev in ("--dispatcher", "--advertise"):
                host, port = a.rsplit(":", 1)
                check(re.fullmatch(r"[\d.]+", host), "%s: %s %s" % (name, prev, a))
                a = "127.0.0.1:%d" % ports.setdefault(int(port), free_port())
            elif prev == "--data-root":
                check(a in self.read_only, "%s: --data-root %s is not in ReadOnlyPaths="
                      % (name, a))
                a = self.data_map[a]
            out_of_tmp = a.startswith("/") and not a.startswith(tmp)
            check(not out_of_tmp, "%s: the path %s is not mapped" % (name, a))
            argv.append(a)
        self.argv = argv

    def timeout_stop(self):
        v = values(self.sec, "TimeoutStopSec")
        return seconds(v[0]) if v else 90


def check_systemd(tmp, prefix):
    ports = {}
    env_files = {f: os.path.join(DEPLOY, "systemd", f) for f in os.listdir(
        os.path.join(DEPLOY, "systemd")) if f.endswith(".env")}
    # docs/deploying.md's instance of the template.
    start = guide_command("systemd", r"systemctl .*sluice-worker@\d+")
    inst = re.search(r"sluice-worker@(\d+)", " ".join(start)).group(1)
    du = Unit("sluice-dispatcher.service", None, tmp, prefix, ports, env_files)
    wu = Unit("sluice-worker@.service", inst, tmp, prefix, ports, env_files)
    check("--fault-tolerant" in du.argv and "--work-dir" in du.argv and
          du.argv[du.argv.index("--work-dir") + 1] == du.env.get("STATE_DIRECTORY"),
          "the dispatcher unit is not --fault-tolerant in its StateDirectory")
    check(values(du.sec, "Restart") == ["always"], "the dispatcher unit is not Restart=always")
    drain_ms = int(wu.argv[wu.argv.index("--drain-timeout-ms") + 1]) \
        if "--drain-timeout-ms" in wu.argv else 30000
    check(wu.timeout_stop() * 1000 >= drain_ms + 5000,
          "the worker's TimeoutStopSec= %d s is not comfortably above --drain-timeout-ms %d"
          % (wu.timeout_stop(), drain_ms))

    d = Proc("systemd-dispatcher", du.argv, tmp, server_env())
    d.wait_line(r"listening on (\S+):(\d+)$")
    if "--metrics-port" in du.argv:
        mp = int(d.wait_line(r"metrics on (\S+):(\d+)$").group(2))
        wait_status(mp, "/readyz", 200)
    w = Proc("systemd-worker", wu.argv, tmp, server_env())
    m = w.wait_line(r"listening on (\S+):(\d+)$")
    check(int(m.group(2)) == ports[int(inst)], "sluice-worker@%s listens on %s" % (inst,
                                                                                 m.group(0)))
    cmd = guide_command("systemd", r"(^|\s)sluice read ")
    cmd = cmd[cmd.index("sluice"):]
    argv = [os.path.join(prefix, "bin", "sluice")] + cmd[1:]
    for i in range(1, len(argv)):
        if argv[i - 1] == "--dispatcher":
            host, port = argv[i].rsplit(":", 1)
            check(int(port) in ports,
                  "deploying.md read: --dispatcher %s is no unit's port" % argv[i])
            argv[i] = "127.0.0.1:%d" % ports[int(port)]
        elif argv[i].startswith("/"):
            check(argv[i] in TOKEN_PATHS, "deploying.md read: the path %s is not mapped" % argv[i])
            argv[i] = TOKEN_PATHS[argv[i]]
    read_range_1000(argv, tmp, "systemd", server_env())
    rc, took = w.stop(signal.SIGTERM, wu.timeout_stop())
    check(rc == 0, "sluice-worker@%s exited %d after SIGTERM" % (inst, rc))
    note("sluice-worker@%s drained and exited 0 in %.1f s (TimeoutStopSec %d s)"
         % (inst, took, wu.timeout_stop()))
    rc, _ = d.stop(signal.SIGTERM, du.timeout_stop())
    check(rc == 0, "the dispatcher unit's process exited %d after SIGTERM" % rc)

    sa = shutil.which("systemd-analyze")
    if sa:
        vdir = os.path.join(tmp, "units")
        os.makedirs(vdir, exist_ok=True)
        for u in ("sluice-dispatcher.service", "sluice-worker@.service"):
            with open(os.path.join(DEPLOY, "systemd", u)) as f:
                text = f.read().replace("/usr/local/bin/", os.path.join(prefix, "bin") + "/")
            with open(os.path.join(vdir, u), "w") as f:
                f.write(text)
        r = subprocess.run([sa, "verify", os.path.join(vdir, "sluice-dispatcher.service"),
                            os.path.join(vdir, "sluice-worker@%s.service" % inst)],
                           capture_output=True, timeout=30)
        out = (r.stdout + r.stderr).decode()
        bad = [ln for ln in out.splitlines() if "/units/sluice" in ln]
        check(not bad, "systemd-analyze verify: %s" % "\n".join(bad))
        note("systemd-analyze verify: no complaints about the units")
    else:
        note("systemd-analyze is not installed: the units were not verified by it")


# ---- Dockerfile ----------------------------------------------------------------------------------

def parse_dockerfile(path):
    with open(path) as f:
        text = re.sub(r"\\\n", " ", f.read())
    stages = []
    for line in text.splitlines():
        s = line.strip()
        if not s or s.startswith("#"):
            continue
        instr, _, rest = s.partition(" ")
        instr = instr.upper()
        if instr == "FROM":
            stages.append({"from": rest.split()[0], "run": [], "user": None, "entrypoint": None,
                           "cmd": None, "copy": []})
        else:
            check(stages, "Dockerfile: %s before FROM" % instr)
            st = stages[-1]
            if instr == "RUN":
                st["run"].append(rest)
            elif instr == "USER":
                st["user"] = rest.strip()
            elif instr in ("ENTRYPOINT", "CMD"):
                st[instr.lower()] = json.loads(rest)
            elif instr == "COPY":
                st["copy"].append(rest.split())
    return stages


def apt_packages(stage):
    """The packages a stage's apt-get install commands name, as written: NAME, or NAME/SUITE for
    one taken from another suite (bookworm-backports)."""
    pkgs = []
    for run in stage["run"]:
        for cmd in run.split("&&"):
            words = cmd.split()
            if "apt-get" in words and "install" in words:
                args = words[words.index("install") + 1:]
                check("-t" not in args and "--target-release" not in args,
                      "Dockerfile: apt-get install -t: name the suite per package (NAME/SUITE)")
                pkgs += [w for w in args if not w.startswith("-")]
    return pkgs


def apt_suites_added(stage):
    """The suites a stage's RUN commands add an apt source for (a deb822 Suites: line written
    by printf), which NAME/SUITE packages may name."""
    return set(w for run in stage["run"] for m in re.finditer(r"Suites: ([\w -]+?)\\n", run)
               for w in m.group(1).split())


def apt_cache_works():
    try:
        r = subprocess.run(["apt-cache", "show", "--no-all-versions", "libc6"],
                           capture_output=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return r.returncode == 0 and b"Package: libc6" in r.stdout


def check_docker(tmp, prefix, k8s_uid):
    stages = parse_dockerfile(os.path.join(DEPLOY, "Dockerfile"))
    check(len(stages) >= 2, "the Dockerfile is not multi-stage")
    for st in stages:
        check(st["from"].startswith("debian:bookworm"), "FROM %s is not Debian bookworm"
              % st["from"])
    build, run = stages[0], stages[-1]
    with open(os.path.join(SOURCE, "scripts", "deps.sh")) as f:
        m = re.search(r"^packages=\((.*?)\)", f.read(), re.S | re.M)
    deps = set(m.group(1).split())
    # C-Raft: deps.sh installs libraft-dev outside the list, from bookworm-backports on Debian 12.
    with open(os.path.join(SOURCE, "scripts", "deps.sh")) as f:
        for m in re.finditer(r"apt-get install .*-t (\S+) (\S+)", f.read()):
            deps.add("%s/%s" % (m.group(2), m.group(1)))
    strays = [p for p in apt_packages(build) if p not in deps]
    check(not strays, "the build stage installs %s, which scripts/deps.sh does not (from that "
          "suite)" % strays)
    for st in (build, run):
        for p in apt_packages(st):
            if "/" in p:
                check(p.split("/", 1)[1] in apt_suites_added(st),
                      "Dockerfile: %s: the stage adds no apt source for that suite" % p)
    build_cmds = " ".join(build["run"])
    check("cmake --build" in build_cmds and "-DCMAKE_BUILD_TYPE=Release" in build_cmds,
          "the build stage does not build a Release with cmake")
    m = re.search(r"cmake --install \S+ --prefix (\S+)", build_cmds)
    check(m, "the build stage does not cmake --install into a prefix")
    inst_prefix = m.group(1)
    for c in run["copy"]:
        if c[0].startswith("--from="):
            check(c[1].startswith(inst_prefix + "/"), "COPY %s is not from the install prefix %s"
                  % (c[1], inst_prefix))
    user = run["user"]
    check(user is not None, "the runtime stage sets no USER")
    uid = user.split(":")[0]
    check(uid.isdigit() and int(uid) != 0, "USER %s is not a numeric non-root id (runAsNonRoot "
          "needs a number)" % user)
    check(int(uid) == k8s_uid, "USER %s differs from the manifests' runAsUser %d" % (uid, k8s_uid))
    check(re.search(r"useradd .*--uid %s\b" % uid, " ".join(run["run"])),
          "the runtime stage does not create the user %s" % uid)
    check(inst_prefix == "/usr/local", "the install prefix %s is not /usr/local, where the units "
          "and the image's PATH look" % inst_prefix)

    runtime_pkgs = apt_packages(run)
    runtime_names = [p.split("/")[0] for p in runtime_pkgs]
    entry = run["entrypoint"] or []
    cmd = run["cmd"] or []
    for binary in entry[:1]:
        name = os.path.basename(binary)
        check(name in runtime_names or os.path.exists(os.path.join(prefix, "bin", name)),
              "ENTRYPOINT %s comes from neither the install nor a runtime package" % binary)
    check(cmd, "the image has no CMD")
    path = os.path.join(prefix, "bin", os.path.basename(cmd[0]))
    check(os.access(path, os.X_OK), "CMD %s is not in the install's bin/" % cmd[0])
    r = subprocess.run([path] + cmd[1:], capture_output=True, timeout=10)
    check(r.returncode == 0, "the image's CMD %s exits %d" % (cmd, r.returncode))
    note("image CMD %s runs (exit 0); USER %s" % (shlex.join(cmd), user))

    if not apt_cache_works():
        note("apt-cache does not answer offline: the Dockerfile's package names were not checked")
        return
    # One apt-cache call for all the names (each call reads the whole cache).
    names = apt_packages(build) + runtime_pkgs
    r = subprocess.run(["apt-cache", "show", "--no-all-versions"] + names, capture_output=True,
                       timeout=60)
    known = set(re.findall(r"^Package: (\S+)$", r.stdout.decode(), re.M))
    missing = [n for n in names if n.split("/")[0] not in known]
    check(not missing, "Dockerfile: apt-cache knows no package %s" % ", ".join(missing))
    # Every library the installed binaries link comes from a runtime package or one of its
    # dependencies (the sanitizer runtimes of an ASan build excepted).
    r = subprocess.run(["apt-cache", "depends", "--recurse", "--no-recommends", "--no-suggests",
                        "--no-conflicts", "--no-breaks", "--no-replaces", "--no-enhances"]
                       + runtime_pkgs, capture_output=True, timeout=60)
    closure = set(runtime_names)
    for line in r.stdout.decode().splitlines():
        m = re.match(r"\s*(?:\|?(?:Pre)?Depends: )?<?([a-z0-9][a-z0-9+.-]+)>?$", line.strip())
        if m:
            closure.add(m.group(1).split(":")[0])
    libs = {}
    for b in ("sluice", "sluice-dispatcher", "sluice-worker"):
        out = subprocess.run(["ldd", os.path.join(prefix, "bin", b)], capture_output=True,
                             timeout=10).stdout.decode()
        for m in re.finditer(r"^\s*(\S+) => (/\S+)", out, re.M):
            if not re.match(r"lib(asan|ubsan|lsan)", m.group(1)):
                libs.setdefault(m.group(1), (b, m.group(2)))
    # The file as ldd found it, resolved, and under / and /usr (Debian's merged /usr).
    cands = {}
    for lib, (b, lpath) in libs.items():
        real = os.path.realpath(lpath)
        cands[lib] = {lpath, real} | {re.sub(r"^/usr/", "/", p) for p in (lpath, real)} | \
            {"/usr" + p for p in (lpath, real) if not p.startswith("/usr/")}
    queries = sorted(set().union(*cands.values()))
    out = subprocess.run(["dpkg", "-S"] + queries, capture_output=True, timeout=30)
    owners = {}
    for line in out.stdout.decode().splitlines():
        pk, _, path = line.partition(": ")
        owners.setdefault(path.strip(), set()).update(p.strip().split(":")[0]
                                                      for p in pk.split(","))
    for lib, (b, lpath) in sorted(libs.items()):
        pkgs = set().union(*(owners.get(c, set()) for c in cands[lib]))
        check(pkgs, "%s links %s, which no Debian package holds" % (b, lpath))
        check(pkgs & closure, "%s links %s (%s), which the runtime stage does not install"
              % (b, lib, ", ".join(sorted(pkgs))))
    note("apt-cache: %d package names exist; the runtime stage provides every linked library"
         % (len(apt_packages(build)) + len(runtime_pkgs)))


def check_docker_guide(tmp, prefix, version):
    """Runs docs/deploying.md's `docker run` commands (its Docker section) without Docker: each
    container's command from the install, its -v mounts mapped to temporary files and
    directories, container names to 127.0.0.1 and its fixed ports to free ones."""
    cmds = guide_commands("Docker")
    build = [w for _, w in cmds if w[:2] == ["docker", "build"]]
    check(build and "-t" in build[0], "%s's Docker shows no docker build -t" % GUIDE)
    image = build[0][build[0].index("-t") + 1]
    with_value = {"--name", "--network", "-v", "--volume", "--stop-timeout", "-e", "--env", "-p"}
    containers = {}     # name -> {"ports": {fixed: free}, "proc": Proc, "stop": seconds}
    ran = 0
    for line, words in cmds:
        if words[:2] != ["docker", "run"]:
            continue
        opts, i = {}, 2
        while words[i].startswith("-"):
            if words[i] in with_value:
                opts.setdefault(words[i], []).append(words[i + 1])
                i += 2
            else:
                check(words[i] in ("-d", "--rm"), "deploying.md docker run: option %s is not mapped"
                      % words[i])
                opts[words[i]] = True
                i += 1
        check(words[i] == image,
              "deploying.md docker run: image %s, built as %s" % (words[i], image))
        raw = words[i + 1:]
        name = opts.get("--name", ["docker-%d" % ran])[0]
        ran += 1
        mounts = {}
        for v in opts.get("-v", []):
            src, dst = v.split(":")[:2]
            if os.path.basename(src) == "token":
                mounts[dst] = TOKEN_PATHS["/etc/sluice/token"]
            else:
                check("/" not in src, "deploying.md docker run: -v %s is neither the token nor a "
                      "named volume" % v)
                mounts[dst] = os.path.join(tmp, "docker-volume-" + src)
                os.makedirs(mounts[dst], exist_ok=True)
        ports = {}
        argv = [os.path.join(prefix, "bin", raw[0])]
        check(os.access(argv[0], os.X_OK),
              "deploying.md docker run: %s is not in the install" % raw[0])
        for j in range(1, len(raw)):
            a, prev = raw[j], raw[j - 1]
            if prev in ("--port", "--metrics-port"):
                a = str(ports.setdefault(int(a), free_port()))
            elif prev in ("--dispatcher", "--advertise"):
                host, port = a.rsplit(":", 1)
                if host == name:
                    check(int(port) in ports, "deploying.md docker run %s: %s %s is not its --port"
                          % (name, prev, a))
                    a = "127.0.0.1:%d" % ports[int(port)]
                else:
                    check(host in containers and int(port) in containers[host]["ports"],
                          "deploying.md docker run %s: %s %s is no container's port"
                          % (name, prev, a))
                    a = "127.0.0.1:%d" % containers[host]["ports"][int(port)]
            elif a.startswith("/"):
                best = max((d for d in mounts if a == d or a.startswith(d + "/")), key=len,
                           default=None)
                check(best is not None,
                      "deploying.md docker run %s: %s is on no -v mount" % (name, a))
                a = mounts[best] + a[len(best):]
            argv.append(a)
        if "-d" in opts:
            check("--host" in argv and "--port" in argv,
                  "deploying.md docker run %s: a server needs --host and a fixed --port" % name)
            pr = Proc("docker-" + name, argv, tmp, server_env())
            pr.wait_line(r"listening on (\S+):(\d+)$")
            stop = int(opts.get("--stop-timeout", ["10"])[0])
            containers[name] = {"ports": ports, "proc": pr, "stop": stop, "argv": argv}
        elif raw[:2] == ["sluice", "read"]:
            read_range_1000(argv, tmp, "docker", server_env())
        else:
            r = subprocess.run(argv, capture_output=True, timeout=10)
            check(r.returncode == 0, "deploying.md docker run: %s exits %d" % (line, r.returncode))
            if raw[1:] == ["--version"]:
                check(r.stdout.decode().strip() == "sluice " + version,
                      "deploying.md docker run: --version printed %r" % r.stdout)
    check(containers, "%s's Docker runs no server" % GUIDE)
    for name, c in reversed(list(containers.items())):
        if os.path.basename(c["argv"][0]) == "sluice-worker":
            a = c["argv"]
            drain = int(a[a.index("--drain-timeout-ms") + 1]) if "--drain-timeout-ms" in a \
                else 30000
            check(c["stop"] * 1000 >= drain + 5000,
                  "deploying.md docker run %s: --stop-timeout %d s is not comfortably above the "
                  "drain timeout %d ms" % (name, c["stop"], drain))
        rc, took = c["proc"].stop(signal.SIGTERM, c["stop"])
        check(rc == 0, "docker container %s exited %d after SIGTERM" % (name, rc))
    note("docs/deploying.md docker commands: %s ran, stopped with exit 0 within their stop timeouts"
         % ", ".join(containers))


# ---- main ----------------------------------------------------------------------------------------

TOKEN = None
TOKEN_PATHS = {}
SECRET_FILES = {}   # make-certs.sh's files made by make_local_certs: what the test's Secrets hold


def make_local_certs(tmp, worker_name):
    """The certificates the servers run with here: make-certs.sh's, the dispatcher's naming
    127.0.0.1 (the test maps the Service name to it), the workers' naming only worker_name, as
    in the cluster, where no worker certificate names the pod IP a worker advertises (here
    127.0.0.1)."""
    out = os.path.join(tmp, "certs-local")
    env = dict(os.environ, DISPATCHER_SAN="IP:127.0.0.1", WORKER_SAN="DNS:" + worker_name)
    r = subprocess.run([os.path.join(DEPLOY, "kubernetes", "make-certs.sh"), out],
                       capture_output=True, timeout=60, env=env)
    check(r.returncode == 0, "make-certs.sh failed: %s" % r.stderr.decode())
    for f in os.listdir(out):
        SECRET_FILES[f] = os.path.join(out, f)
    check(openssl_verify(out, "dispatcher.pem", "sslserver", "127.0.0.1"),
          "the local dispatcher certificate does not verify for 127.0.0.1")
    check(openssl_verify(out, "worker.pem", "sslserver", worker_name) and
          not openssl_verify(out, "worker.pem", "sslserver", "127.0.0.1"),
          "the local worker certificate is not for %s only" % worker_name)


def main():
    global TOKEN
    signal.signal(signal.SIGTERM, lambda *_: fail("terminated"))
    t0 = time.monotonic()
    tmp = tempfile.mkdtemp(prefix="sluice-deploy-")
    try:
        TOKEN = os.urandom(24).hex()
        token_file = os.path.join(tmp, "token")
        with open(token_file, "w") as f:
            f.write(TOKEN + "\n")
        TOKEN_PATHS["/etc/sluice/token"] = token_file
        prefix, version = install(tmp)
        PREFIX[0] = prefix
        note("installed sluice %s into %s" % (version, prefix))
        check_kubernetes(tmp, prefix)
        check_kubernetes_replicas(tmp, prefix)
        check_systemd(tmp, prefix)
        with open(os.path.join(DEPLOY, "kubernetes", "worker.yaml")) as f:
            uid = [d for d in yaml.safe_load_all(f) if d and "template" in d.get("spec", {})][
                0]["spec"]["template"]["spec"]["securityContext"]["runAsUser"]
        check_docker(tmp, prefix, uid)
        check_docker_guide(tmp, prefix, version)
    finally:
        kill_all()
        shutil.rmtree(tmp, ignore_errors=True)
    note("ok (%.1f s)" % (time.monotonic() - t0))


if __name__ == "__main__":
    main()
