/* The Dispatcher and Worker types of _sluice: in-process servers of <sluice/server.h>, each on
 * its own thread. join() waits in slices with the GIL released, so Ctrl-C interrupts it; stop()
 * is idempotent and also runs when the object is collected. */
#include "pysluice.h"

#include <stdbool.h>
#include <string.h>

/* Borrows a sequence of str (None: none) as a C array (PyMem; free with PyMem_Free); *seq keeps
 * the strings alive. Returns 0 or -1 with an exception. */
int pys_strs_get(PyObject *obj, const char *what, struct pys_strs *out)
{
    memset(out, 0, sizeof *out);
    if (!obj || obj == Py_None)
        return 0;
    if (PyUnicode_Check(obj)) {
        PyErr_Format(PyExc_TypeError, "%s must be a sequence of str, not a str", what);
        return -1;
    }
    out->seq = PySequence_Fast(obj, what);
    if (!out->seq)
        return -1;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(out->seq);
    out->v = PyMem_Calloc((size_t)n + 1, sizeof *out->v);
    if (!out->v) {
        pys_strs_release(out);
        PyErr_NoMemory();
        return -1;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        out->v[i] = PyUnicode_AsUTF8(PySequence_Fast_GET_ITEM(out->seq, i));
        if (!out->v[i]) {
            pys_strs_release(out);
            return -1;
        }
    }
    out->n = (size_t)n;
    return 0;
}

void pys_strs_release(struct pys_strs *s)
{
    PyMem_Free(s->v);
    Py_XDECREF(s->seq);
    memset(s, 0, sizeof *s);
}

int pys_started(int rc, const char *err)
{
    if (rc) {
        pys_raise(rc, err);
        return -1;
    }
    return 0;
}

/* Waits with wait(server, slice) until it returns something else than a timeout, the total
 * timeout_ms (0: no limit) passes, or a signal handler raises. Returns the code, or 1 for a
 * pending Python exception. */
static int join_loop(int (*wait)(void *, uint32_t, char *, size_t), void *server,
                     uint32_t timeout_ms, char *err, size_t errlen)
{
    uint32_t waited = 0;
    for (;;) {
        uint32_t slice = PYS_SLICE_MS;
        if (timeout_ms && timeout_ms - waited < slice)
            slice = timeout_ms - waited;
        PyThreadState *ts = PyEval_SaveThread();
        int rc = wait(server, slice, err, errlen);
        PyEval_RestoreThread(ts);
        if (rc != SLUICE_ERR_TIMEOUT)
            return rc;
        waited += slice;
        if (PyErr_CheckSignals() < 0)
            return 1;
        if (timeout_ms && waited >= timeout_ms)
            return rc;
    }
}

static int join_result(int rc, const char *err)
{
    if (rc == 1)
        return -1;
    if (rc < 0) {
        pys_raise(rc, err);
        return -1;
    }
    return 0;
}

/* The keywords both servers take, in this order, with their format units and their targets in
 * o (a sluice_dispatcher_options or a sluice_worker_options; insecure is an int for "p"). The
 * three stand together so they cannot drift apart. */
#define SERVER_KEYWORDS                                                                            \
    "auth_token_file", "tls_cert", "tls_key", "tls_ca", "insecure", "metrics_host",                \
        "handshake_timeout_ms", "max_connections", "max_handshakes"
#define SERVER_FORMAT "zzzzpzIII"
#define SERVER_TARGETS(o, insecure)                                                                \
    &(o).security.auth_token_file, &(o).security.tls_cert, &(o).security.tls_key,                  \
        &(o).security.tls_ca, &(insecure), &(o).metrics_host, &(o).handshake_timeout_ms,           \
        &(o).max_connections, &(o).max_handshakes

/* ---- Dispatcher --------------------------------------------------------------------------- */

typedef struct {
    PyObject ob_base;
    struct sluice_dispatcher *d;
} DispatcherObject;

static int dispatcher_wait(void *d, uint32_t ms, char *err, size_t errlen)
{
    return sluice_dispatcher_wait(d, ms, err, errlen);
}

static int dispatcher_init(DispatcherObject *self, PyObject *args, PyObject *kw)
{
    static char *names[] = {"host",
                            "port",
                            "work_dir",
                            "fault_tolerant",
                            "worker_timeout_ms",
                            "client_timeout_ms",
                            "job_gc_timeout_ms",
                            "autoscale_window_ms",
                            "snapshot_every",
                            "journal_max_mb",
                            "worker_addresses",
                            "metrics_port",
                            "log_level",
                            "data_roots",
                            SERVER_KEYWORDS,
                            "max_datasets",
                            "max_pipeline_bytes",
                            "max_jobs_per_client",
                            "max_jobs_per_address",
                            "raft_id",
                            "raft_address",
                            "raft_cluster",
                            "raft_bind",
                            "advertise",
                            "raft_election_timeout_ms",
                            "autoscale_pool_label",
                            "disconnect_grace_ms",
                            NULL};
    struct sluice_dispatcher_options o = {0};
    int ft = 0, metrics_port = -1, insecure = 0;
    unsigned long long snapshot_every = 0, journal_max_mb = 0;
    unsigned long long max_datasets = 0, max_pipeline_bytes = 0, max_jobs_per_client = 0;
    unsigned long long max_jobs_per_address = 0, raft_id = 0;
    PyObject *addresses = NULL, *data_roots = NULL;
    if (!PyArg_ParseTupleAndKeywords(
            args, kw, "|zizpIIIIKKOizO" SERVER_FORMAT "KKKKKzzzzIzI", names, &o.host, &o.port,
            &o.work_dir, &ft, &o.worker_timeout_ms, &o.client_timeout_ms, &o.job_gc_timeout_ms,
            &o.autoscale_window_ms, &snapshot_every, &journal_max_mb, &addresses, &metrics_port,
            &o.log_level, &data_roots, SERVER_TARGETS(o, insecure), &max_datasets,
            &max_pipeline_bytes, &max_jobs_per_client, &max_jobs_per_address, &raft_id,
            &o.raft_address, &o.raft_cluster, &o.raft_bind, &o.advertise,
            &o.raft_election_timeout_ms, &o.autoscale_pool_label, &o.disconnect_grace_ms))
        return -1;
    o.raft_id = raft_id;
    o.security.insecure = insecure;
    o.max_datasets = max_datasets;
    o.max_pipeline_bytes = max_pipeline_bytes;
    o.max_jobs_per_client = max_jobs_per_client;
    o.max_jobs_per_address = max_jobs_per_address;
    if (self->d) {
        PyErr_SetString(PyExc_RuntimeError, "Dispatcher already started");
        return -1;
    }
    o.fault_tolerant = ft;
    o.snapshot_every = snapshot_every;
    o.journal_max_mb = journal_max_mb;
    o.metrics = metrics_port >= 0;
    o.metrics_port = metrics_port >= 0 ? metrics_port : 0;
    struct pys_strs addrs;
    struct pys_strs roots;
    if (pys_strs_get(addresses, "worker_addresses", &addrs) < 0)
        return -1;
    if (pys_strs_get(data_roots, "data_roots", &roots) < 0) {
        pys_strs_release(&addrs);
        return -1;
    }
    o.worker_addresses = addrs.v;
    o.nworker_addresses = addrs.n;
    o.data_roots = roots.v;
    o.ndata_roots = roots.n;
    char err[SLUICE_ERRMSG_SIZE] = "";
    PyThreadState *ts = PyEval_SaveThread();
    int rc = sluice_dispatcher_start(&o, &self->d, err, sizeof err);
    PyEval_RestoreThread(ts);
    pys_strs_release(&roots);
    pys_strs_release(&addrs);
    return pys_started(rc, err);
}

static void dispatcher_stop_now(DispatcherObject *self)
{
    if (self->d) {
        struct sluice_dispatcher *d = self->d;
        self->d = NULL;
        PyThreadState *ts = PyEval_SaveThread();
        sluice_dispatcher_stop(d);
        PyEval_RestoreThread(ts);
    }
}

static void dispatcher_dealloc(DispatcherObject *self)
{
    dispatcher_stop_now(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static bool dispatcher_live(DispatcherObject *self)
{
    if (self->d)
        return true;
    PyErr_SetString(PyExc_RuntimeError, "the dispatcher was stopped");
    return false;
}

static PyObject *dispatcher_target(DispatcherObject *self, void *unused)
{
    if (!dispatcher_live(self))
        return NULL;
    return PyUnicode_FromString(sluice_dispatcher_target(self->d));
}

static PyObject *dispatcher_metrics_address(DispatcherObject *self, void *unused)
{
    if (!dispatcher_live(self))
        return NULL;
    const char *a = sluice_dispatcher_metrics_address(self->d);
    if (!a)
        Py_RETURN_NONE;
    return PyUnicode_FromString(a);
}

static PyObject *dispatcher_join(DispatcherObject *self, PyObject *args)
{
    unsigned int timeout_ms = 0;
    if (!PyArg_ParseTuple(args, "|I", &timeout_ms) || !dispatcher_live(self))
        return NULL;
    char err[SLUICE_ERRMSG_SIZE] = "";
    int rc = join_loop(dispatcher_wait, self->d, timeout_ms, err, sizeof err);
    if (join_result(rc, err) < 0)
        return NULL;
    Py_RETURN_NONE;
}

static PyObject *dispatcher_stop(DispatcherObject *self, PyObject *unused)
{
    dispatcher_stop_now(self);
    Py_RETURN_NONE;
}

static PyObject *dispatcher_shutdown(DispatcherObject *self, PyObject *unused)
{
    if (self->d)
        sluice_dispatcher_shutdown(self->d);
    Py_RETURN_NONE;
}

static PyMethodDef dispatcher_methods[] = {
    {"join", (PyCFunction)dispatcher_join, METH_VARARGS,
     "join(timeout_ms=0): waits until the dispatcher stops (0: without limit)."},
    {"stop", (PyCFunction)dispatcher_stop, METH_NOARGS,
     "stop(): stops the dispatcher, its journal written, and frees it."},
    {"shutdown", (PyCFunction)dispatcher_shutdown, METH_NOARGS,
     "shutdown(): asks the dispatcher to stop and returns at once."},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef dispatcher_getset[] = {
    {"target", (getter)dispatcher_target, NULL, "HOST:PORT of the dispatcher", NULL},
    {"metrics_address", (getter)dispatcher_metrics_address, NULL,
     "HOST:PORT of its metrics server, or None", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject dispatcher_type = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "_sluice.Dispatcher",
    .tp_basicsize = sizeof(DispatcherObject),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE,
    .tp_doc = "An in-process dispatcher.",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)dispatcher_init,
    .tp_dealloc = (destructor)dispatcher_dealloc,
    .tp_methods = dispatcher_methods,
    .tp_getset = dispatcher_getset,
};

/* ---- Worker ------------------------------------------------------------------------------- */

typedef struct {
    PyObject ob_base;
    struct sluice_worker *w;
} WorkerObject;

static int worker_wait(void *w, uint32_t ms, char *err, size_t errlen)
{
    return sluice_worker_wait(w, ms, err, errlen);
}

static int worker_init(WorkerObject *self, PyObject *args, PyObject *kw)
{
    static char *names[] = {"dispatcher",
                            "host",
                            "port",
                            "advertise",
                            "heartbeat_ms",
                            "threads",
                            "plugins",
                            "metrics_port",
                            "drain_timeout_ms",
                            "log_level",
                            "python_path",
                            "data_roots",
                            SERVER_KEYWORDS,
                            "max_element_bytes",
                            "max_tasks",
                            "max_buffer_bytes",
                            "labels",
                            "task_slots",
                            NULL};
    struct sluice_worker_options o = {0};
    int metrics_port = -1, insecure = 0;
    unsigned long long max_element_bytes = 0, max_buffer_bytes = 0;
    PyObject *plugins = NULL, *python_path = NULL, *data_roots = NULL, *labels = NULL;
    if (!PyArg_ParseTupleAndKeywords(
            args, kw, "s|zizIIOiIzOO" SERVER_FORMAT "KIKOI", names, &o.dispatcher, &o.host, &o.port,
            &o.advertise, &o.heartbeat_ms, &o.threads, &plugins, &metrics_port, &o.drain_timeout_ms,
            &o.log_level, &python_path, &data_roots, SERVER_TARGETS(o, insecure),
            &max_element_bytes, &o.max_tasks, &max_buffer_bytes, &labels, &o.task_slots))
        return -1;
    o.security.insecure = insecure;
    o.max_element_bytes = max_element_bytes;
    o.max_buffer_bytes = max_buffer_bytes;
    if (self->w) {
        PyErr_SetString(PyExc_RuntimeError, "Worker already started");
        return -1;
    }
    o.metrics = metrics_port >= 0;
    o.metrics_port = metrics_port >= 0 ? metrics_port : 0;
    struct pys_strs paths, dirs, roots, kvs;
    if (pys_strs_get(labels, "labels", &kvs) < 0)
        return -1;
    if (pys_strs_get(plugins, "plugins", &paths) < 0) {
        pys_strs_release(&kvs);
        return -1;
    }
    if (pys_strs_get(python_path, "python_path", &dirs) < 0) {
        pys_strs_release(&paths);
        pys_strs_release(&kvs);
        return -1;
    }
    if (pys_strs_get(data_roots, "data_roots", &roots) < 0) {
        pys_strs_release(&dirs);
        pys_strs_release(&paths);
        pys_strs_release(&kvs);
        return -1;
    }
    o.labels = kvs.v;
    o.nlabels = kvs.n;
    o.plugins = paths.v;
    o.nplugins = paths.n;
    o.python_path = dirs.v;
    o.npython_path = dirs.n;
    o.data_roots = roots.v;
    o.ndata_roots = roots.n;
    char err[SLUICE_ERRMSG_SIZE] = "";
    /* The worker takes the GIL itself where it needs it (sys.path, py functions). */
    PyThreadState *ts = PyEval_SaveThread();
    int rc = sluice_worker_start(&o, &self->w, err, sizeof err);
    PyEval_RestoreThread(ts);
    pys_strs_release(&roots);
    pys_strs_release(&dirs);
    pys_strs_release(&paths);
    pys_strs_release(&kvs);
    return pys_started(rc, err);
}

static void worker_stop_now(WorkerObject *self)
{
    if (self->w) {
        struct sluice_worker *w = self->w;
        self->w = NULL;
        PyThreadState *ts = PyEval_SaveThread();
        sluice_worker_stop(w);
        PyEval_RestoreThread(ts);
    }
}

static void worker_dealloc(WorkerObject *self)
{
    worker_stop_now(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static bool worker_live(WorkerObject *self)
{
    if (self->w)
        return true;
    PyErr_SetString(PyExc_RuntimeError, "the worker was stopped");
    return false;
}

static PyObject *worker_address(WorkerObject *self, void *unused)
{
    if (!worker_live(self))
        return NULL;
    return PyUnicode_FromString(sluice_worker_address(self->w));
}

static PyObject *worker_metrics_address(WorkerObject *self, void *unused)
{
    if (!worker_live(self))
        return NULL;
    const char *a = sluice_worker_metrics_address(self->w);
    if (!a)
        Py_RETURN_NONE;
    return PyUnicode_FromString(a);
}

static PyObject *worker_join(WorkerObject *self, PyObject *args)
{
    unsigned int timeout_ms = 0;
    if (!PyArg_ParseTuple(args, "|I", &timeout_ms) || !worker_live(self))
        return NULL;
    char err[SLUICE_ERRMSG_SIZE] = "";
    int rc = join_loop(worker_wait, self->w, timeout_ms, err, sizeof err);
    if (join_result(rc, err) < 0)
        return NULL;
    Py_RETURN_NONE;
}

static PyObject *worker_stop(WorkerObject *self, PyObject *unused)
{
    worker_stop_now(self);
    Py_RETURN_NONE;
}

static PyObject *worker_drain(WorkerObject *self, PyObject *unused)
{
    if (self->w)
        sluice_worker_drain(self->w);
    Py_RETURN_NONE;
}

static PyObject *worker_shutdown(WorkerObject *self, PyObject *unused)
{
    if (self->w)
        sluice_worker_shutdown(self->w);
    Py_RETURN_NONE;
}

static PyMethodDef worker_methods[] = {
    {"join", (PyCFunction)worker_join, METH_VARARGS,
     "join(timeout_ms=0): waits until the worker stops (0: without limit)."},
    {"stop", (PyCFunction)worker_stop, METH_NOARGS,
     "stop(): drains the worker (its readers receive what it holds), stops and frees it."},
    {"drain", (PyCFunction)worker_drain, METH_NOARGS,
     "drain(): starts a drain and returns at once (as SIGTERM to sluice-worker)."},
    {"shutdown", (PyCFunction)worker_shutdown, METH_NOARGS,
     "shutdown(): asks the worker to stop at once and returns (as SIGINT)."},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef worker_getset[] = {
    {"address", (getter)worker_address, NULL, "HOST:PORT readers use to reach the worker", NULL},
    {"metrics_address", (getter)worker_metrics_address, NULL,
     "HOST:PORT of the worker's metrics server, or None", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject worker_type = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "_sluice.Worker",
    .tp_basicsize = sizeof(WorkerObject),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE,
    .tp_doc = "An in-process worker.",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)worker_init,
    .tp_dealloc = (destructor)worker_dealloc,
    .tp_methods = worker_methods,
    .tp_getset = worker_getset,
};

int pys_server_types_init(PyObject *m)
{
    if (PyType_Ready(&dispatcher_type) < 0 || PyType_Ready(&worker_type) < 0)
        return -1;
    if (PyModule_AddObjectRef(m, "Dispatcher", (PyObject *)&dispatcher_type) < 0 ||
        PyModule_AddObjectRef(m, "Worker", (PyObject *)&worker_type) < 0)
        return -1;
    return 0;
}
