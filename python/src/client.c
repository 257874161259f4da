/* The Client, Iterator and Local types of _sluice: thin owners of libsluice objects.
 *
 * Client holds a sluice_client (one connection to the dispatcher); Iterator holds a
 * sluice_iterator and a reference to its Client, so the client outlives every reader; Local
 * holds a sluice_local run. Blocking calls release the GIL. An Iterator is used by one thread at
 * a time: a second thread calling next() while one waits gets a RuntimeError. */
#include "pysluice.h"

#include <stdbool.h>
#include <string.h>

/* ---- Client ------------------------------------------------------------------------------ */

typedef struct {
    PyObject ob_base;
    struct sluice_client *c;
} ClientObject;

static int client_init(ClientObject *self, PyObject *args, PyObject *kw)
{
    static char *names[] = {"dispatcher",      "timeout_ms",      "plugins",
                            "auth_token_file", "tls_cert",        "tls_key",
                            "tls_ca",          "tls_worker_name", NULL};
    const char *dispatcher;
    unsigned int timeout_ms = 0;
    PyObject *plugins = NULL;
    struct sluice_security_options sec = {0};
    if (!PyArg_ParseTupleAndKeywords(args, kw, "s|IOzzzzz", names, &dispatcher, &timeout_ms,
                                     &plugins, &sec.auth_token_file, &sec.tls_cert, &sec.tls_key,
                                     &sec.tls_ca, &sec.tls_worker_name))
        return -1;
    if (self->c) {
        PyErr_SetString(PyExc_RuntimeError, "Client already initialised");
        return -1;
    }
    struct pys_strs paths;
    if (pys_strs_get(plugins, "plugins", &paths) < 0)
        return -1;
    struct sluice_client_options o = {
        .dispatcher = dispatcher,
        .timeout_ms = timeout_ms,
        .plugins = paths.v,
        .nplugins = paths.n,
        .security = sec,
    };
    char err[SLUICE_ERRMSG_SIZE] = "";
    int rc;
    PyThreadState *ts = PyEval_SaveThread();
    rc = sluice_client_open(&o, &self->c, err, sizeof err);
    PyEval_RestoreThread(ts);
    pys_strs_release(&paths);
    return pys_started(rc, err);
}

static void client_dealloc(ClientObject *self)
{
    if (self->c) {
        PyThreadState *ts = PyEval_SaveThread();
        sluice_client_close(self->c);
        PyEval_RestoreThread(ts);
    }
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static bool client_ready(ClientObject *self)
{
    if (self->c)
        return true;
    PyErr_SetString(PyExc_RuntimeError, "Client is not initialised");
    return false;
}

static PyObject *client_register(ClientObject *self, PyObject *args, PyObject *kw)
{
    static char *names[] = {"pipeline",   "dataset_id",    "compression",
                            "split_size", "deterministic", NULL};
    const char *pipeline, *dataset_id = NULL, *compression = "auto";
    unsigned long long split_size = 0;
    int deterministic = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "s|zsKp", names, &pipeline, &dataset_id,
                                     &compression, &split_size, &deterministic))
        return NULL;
    if (!client_ready(self))
        return NULL;
    struct sluice_register_options o = {
        .dataset_id = dataset_id, .split_size = split_size, .deterministic = deterministic != 0};
    if (strcmp(compression, "auto") == 0) {
        o.compression = SLUICE_COMPRESSION_AUTO;
    } else if (strcmp(compression, "none") == 0 || strcmp(compression, "") == 0) {
        o.compression = SLUICE_COMPRESSION_NONE;
    } else {
        return PyErr_Format(PyExc_ValueError, "compression must be 'auto' or 'none', not '%s'",
                            compression);
    }
    char id[256], err[SLUICE_ERRMSG_SIZE] = "";
    int rc;
    PyThreadState *ts = PyEval_SaveThread();
    rc = sluice_register(self->c, pipeline, &o, id, sizeof id, err, sizeof err);
    PyEval_RestoreThread(ts);
    if (rc)
        return pys_raise(rc, err);
    return PyUnicode_FromString(id);
}

static PyObject *client_status(ClientObject *self, PyObject *args)
{
    const char *dataset_id = NULL;
    if (!PyArg_ParseTuple(args, "|z", &dataset_id) || !client_ready(self))
        return NULL;
    char *json = NULL, err[SLUICE_ERRMSG_SIZE] = "";
    int rc;
    PyThreadState *ts = PyEval_SaveThread();
    rc = dataset_id ? sluice_status_dataset(self->c, dataset_id, &json, err, sizeof err)
                    : sluice_status(self->c, &json, err, sizeof err);
    PyEval_RestoreThread(ts);
    if (rc)
        return pys_raise(rc, err);
    PyObject *s = PyUnicode_FromString(json);
    free(json);
    return s;
}

/* (position bytes, step) of a named job (sluice_job_checkpoint). */
static PyObject *client_job_position(ClientObject *self, PyObject *args)
{
    const char *job_name = NULL;
    unsigned long long step = 0;
    if (!PyArg_ParseTuple(args, "sK", &job_name, &step) || !client_ready(self))
        return NULL;
    uint8_t *b = NULL;
    size_t n = 0;
    uint64_t cut = 0;
    char err[SLUICE_ERRMSG_SIZE] = "";
    PyThreadState *ts = PyEval_SaveThread();
    int rc = sluice_job_checkpoint(self->c, job_name, step, &b, &n, &cut, err, sizeof err);
    PyEval_RestoreThread(ts);
    if (rc)
        return pys_raise(rc, err);
    PyObject *out = Py_BuildValue("(y#K)", (const char *)b, (Py_ssize_t)n, (unsigned long long)cut);
    free(b);
    return out;
}

/* A save's state as a dict (struct sluice_snapshot_status). */
static PyObject *snapshot_dict(const struct sluice_snapshot_status *st)
{
    return Py_BuildValue("{s:s,s:K,s:s,s:K,s:K,s:s}", "state", st->state, "save_id",
                         (unsigned long long)st->save_id, "dataset_id", st->dataset_id, "chunks",
                         (unsigned long long)st->chunks, "chunks_committed",
                         (unsigned long long)st->chunks_committed, "error", st->error);
}

static PyObject *client_save_snapshot(ClientObject *self, PyObject *args)
{
    const char *dataset_id, *path;
    if (!PyArg_ParseTuple(args, "ss", &dataset_id, &path) || !client_ready(self))
        return NULL;
    struct sluice_snapshot_status st;
    char err[SLUICE_ERRMSG_SIZE] = "";
    int rc;
    PyThreadState *ts = PyEval_SaveThread();
    rc = sluice_client_save_snapshot(self->c, dataset_id, path, &st, err, sizeof err);
    PyEval_RestoreThread(ts);
    if (rc)
        return pys_raise(rc, err);
    return snapshot_dict(&st);
}

static PyObject *client_snapshot_status(ClientObject *self, PyObject *args)
{
    const char *path;
    if (!PyArg_ParseTuple(args, "s", &path) || !client_ready(self))
        return NULL;
    struct sluice_snapshot_status st;
    char err[SLUICE_ERRMSG_SIZE] = "";
    int rc;
    PyThreadState *ts = PyEval_SaveThread();
    rc = sluice_client_snapshot_status(self->c, path, &st, err, sizeof err);
    PyEval_RestoreThread(ts);
    if (rc)
        return pys_raise(rc, err);
    return snapshot_dict(&st);
}

static PyObject *client_snapshot_wait(ClientObject *self, PyObject *args)
{
    const char *path;
    unsigned long long timeout_ms = 0;
    if (!PyArg_ParseTuple(args, "s|K", &path, &timeout_ms) || !client_ready(self))
        return NULL;
    struct sluice_snapshot_status st;
    char err[SLUICE_ERRMSG_SIZE] = "";
    int rc;
    PyThreadState *ts = PyEval_SaveThread();
    rc = sluice_client_snapshot_wait(self->c, path, 0, timeout_ms, &st, err, sizeof err);
    PyEval_RestoreThread(ts);
    if (rc)
        return pys_raise(rc, err);
    return snapshot_dict(&st);
}

/* weights: a sequence of numbers, each converted with float(); the library checks them. */
static PyObject *client_set_weights(ClientObject *self, PyObject *args)
{
    const char *job_name, *dataset_id;
    PyObject *seq;
    unsigned long long at;
    if (!PyArg_ParseTuple(args, "szOK", &job_name, &dataset_id, &seq, &at) || !client_ready(self))
        return NULL;
    PyObject *fast = PySequence_Fast(seq, "weights must be a sequence of numbers");
    if (!fast)
        return NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(fast);
    double *w = PyMem_Malloc((n > 0 ? (size_t)n : 1) * sizeof *w);
    if (!w) {
        Py_DECREF(fast);
        return PyErr_NoMemory();
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        w[i] = PyFloat_AsDouble(PySequence_Fast_GET_ITEM(fast, i));
        if (w[i] == -1.0 && PyErr_Occurred()) {
            PyMem_Free(w);
            Py_DECREF(fast);
            return NULL;
        }
    }
    Py_DECREF(fast);
    uint64_t from = 0;
    char err[SLUICE_ERRMSG_SIZE] = "";
    int rc;
    PyThreadState *ts = PyEval_SaveThread();
    rc =
        sluice_set_weights(self->c, job_name, dataset_id, w, (size_t)n, at, &from, err, sizeof err);
    PyEval_RestoreThread(ts);
    PyMem_Free(w);
    if (rc)
        return pys_raise(rc, err);
    return PyLong_FromUnsignedLongLong(from);
}

static PyObject *client_read(ClientObject *self, PyObject *args, PyObject *kw);

static PyMethodDef client_methods[] = {
    {"register", (PyCFunction)(void (*)(void))client_register, METH_VARARGS | METH_KEYWORDS,
     "register(pipeline, dataset_id=None, compression='auto', split_size=0, deterministic=False) "
     "-> dataset id"},
    {"job_position", (PyCFunction)client_job_position, METH_VARARGS,
     "job_position(job_name, step) -> (position bytes, step) (sluice_job_checkpoint)"},
    {"status", (PyCFunction)client_status, METH_VARARGS,
     "status(dataset_id=None) -> the status JSON text (one dataset's, with its whole pipeline)"},
    {"save_snapshot", (PyCFunction)client_save_snapshot, METH_VARARGS,
     "save_snapshot(dataset_id, path) -> the save's state (sluice_client_save_snapshot)"},
    {"snapshot_status", (PyCFunction)client_snapshot_status, METH_VARARGS,
     "snapshot_status(path) -> the save's state (sluice_client_snapshot_status)"},
    {"snapshot_wait", (PyCFunction)client_snapshot_wait, METH_VARARGS,
     "snapshot_wait(path, timeout_ms=0) -> the final state (sluice_client_snapshot_wait)"},
    {"set_weights", (PyCFunction)client_set_weights, METH_VARARGS,
     "set_weights(job_name, dataset_id, weights, at) -> the position the change applies from "
     "(sluice_set_weights)"},
    {"read", (PyCFunction)(void (*)(void))client_read, METH_VARARGS | METH_KEYWORDS,
     "read(dataset_id=None, pipeline=None, mode=0, job_name=None, consumer_index=0, "
     "num_consumers=0, max_outstanding_requests=0, local=None, timeout_ms=0, split_size=0, "
     "restore=None, deterministic=False, reorder_bytes=0, cross_trainer_cache=False, "
     "trainer_id=None, cross_trainer_cache_bytes=0, target_workers=None, whole_copies=False, "
     "worker_selector=None, weight=0, min_workers=0, max_workers=0, hedge_factor=0, shm=True, "
     "shm_bytes=0, shard_index=0, shard_count=0) -> Iterator"},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject client_type = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "_sluice.Client",
    .tp_basicsize = sizeof(ClientObject),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Client(dispatcher, timeout_ms=0, plugins=(), auth_token_file=None, tls_cert=None, "
              "tls_key=None, tls_ca=None): a connection to a dispatcher.",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)client_init,
    .tp_dealloc = (destructor)client_dealloc,
    .tp_methods = client_methods,
};

/* ---- Iterator ---------------------------------------------------------------------------- */

typedef struct {
    PyObject ob_base;
    PyObject *client;
    struct sluice_iterator *it;
    struct sluice_element *elem;
    uint32_t timeout_ms; /* 0: wait without limit */
    bool busy, done;
    /* The arguments of the read, to open it again from a position (load_state_dict). */
    PyObject *args, *kw;
} IteratorObject;

static PyTypeObject iterator_type;

/* The options of a read as Client.read takes them. Strings and the restore buffer point into
 * args and kw, so they live as long as those do; release with PyBuffer_Release(&restore). */
struct read_call {
    struct sluice_read_options o;
    unsigned int timeout_ms;
    Py_buffer restore;
};

static int parse_read(PyObject *args, PyObject *kw, struct read_call *rc)
{
    static char *names[] = {"dataset_id",
                            "pipeline",
                            "mode",
                            "job_name",
                            "consumer_index",
                            "num_consumers",
                            "max_outstanding_requests",
                            "local",
                            "timeout_ms",
                            "split_size",
                            "restore",
                            "deterministic",
                            "reorder_bytes",
                            "cross_trainer_cache",
                            "trainer_id",
                            "cross_trainer_cache_bytes",
                            "target_workers",
                            "whole_copies",
                            "worker_selector",
                            "weight",
                            "min_workers",
                            "max_workers",
                            "hedge_factor",
                            "shm",
                            "shm_bytes",
                            "shard_index",
                            "shard_count",
                            NULL};
    memset(rc, 0, sizeof *rc);
    int mode = 0, deterministic = 0, xtc = 0, whole = 0, shm = 1;
    unsigned long long shm_bytes = 0;
    unsigned int ci = 0, nc = 0, mor = 0, min_workers = 0, max_workers = 0;
    unsigned int shard_index = 0, shard_count = 0;
    double weight = 0, hedge_factor = 0;
    unsigned long long split_size = 0, reorder_bytes = 0, xtc_bytes = 0;
    const char *target = NULL;
    if (!PyArg_ParseTupleAndKeywords(
            args, kw, "|zzizIIIzIKz*pKpzKzpzdIIdpKII", names, &rc->o.dataset_id, &rc->o.pipeline,
            &mode, &rc->o.job_name, &ci, &nc, &mor, &rc->o.local, &rc->timeout_ms, &split_size,
            &rc->restore, &deterministic, &reorder_bytes, &xtc, &rc->o.trainer_id, &xtc_bytes,
            &target, &whole, &rc->o.worker_selector, &weight, &min_workers, &max_workers,
            &hedge_factor, &shm, &shm_bytes, &shard_index, &shard_count))
        return -1;
    if (target && sluice_target_workers_parse(target, &rc->o.target_workers) < 0) {
        PyBuffer_Release(&rc->restore);
        PyErr_Format(PyExc_ValueError, "target_workers must be 'any', 'local' or 'auto', not '%s'",
                     target);
        return -1;
    }
    rc->o.weight = weight;
    rc->o.hedge_factor = hedge_factor;
    rc->o.no_shm = !shm;
    rc->o.shm_bytes = shm_bytes;
    rc->o.shard_index = shard_index;
    rc->o.shard_count = shard_count;
    rc->o.min_workers = min_workers;
    rc->o.max_workers = max_workers;
    rc->o.cross_trainer_cache = xtc != 0;
    rc->o.whole_copies = whole != 0;
    rc->o.cross_trainer_cache_bytes = xtc_bytes;
    rc->o.split_size = split_size;
    rc->o.deterministic = deterministic != 0;
    rc->o.reorder_bytes = reorder_bytes;
    rc->o.mode = (enum sluice_mode)mode;
    rc->o.consumer_index = ci;
    rc->o.num_consumers = nc;
    rc->o.max_outstanding_requests = mor;
    if (rc->restore.buf) {
        rc->o.restore = rc->restore.buf;
        rc->o.restore_len = (size_t)rc->restore.len;
    }
    return 0;
}

/* Opens the iterator of o without the GIL. Returns 0 or raises. */
static int open_read(ClientObject *client, const struct sluice_read_options *o,
                     struct sluice_iterator **it)
{
    char err[SLUICE_ERRMSG_SIZE] = "";
    PyThreadState *ts = PyEval_SaveThread();
    int rc = sluice_iterator_open(client->c, o, it, err, sizeof err);
    PyEval_RestoreThread(ts);
    if (rc) {
        pys_raise(rc, err);
        return -1;
    }
    return 0;
}

static PyObject *client_read(ClientObject *self, PyObject *args, PyObject *kw)
{
    struct read_call call;
    if (parse_read(args, kw, &call) < 0)
        return NULL;
    if (!client_ready(self)) {
        PyBuffer_Release(&call.restore);
        return NULL;
    }
    IteratorObject *r = PyObject_New(IteratorObject, &iterator_type);
    if (!r) {
        PyBuffer_Release(&call.restore);
        return NULL;
    }
    r->client = (PyObject *)self;
    Py_INCREF(self);
    r->it = NULL;
    r->elem = NULL;
    r->timeout_ms = call.timeout_ms;
    r->busy = r->done = false;
    r->args = args;
    Py_XINCREF(args);
    r->kw = kw;
    Py_XINCREF(kw);
    int rc = open_read(self, &call.o, &r->it);
    PyBuffer_Release(&call.restore);
    if (rc) {
        Py_DECREF(r);
        return NULL;
    }
    return (PyObject *)r;
}

static void iterator_close_now(IteratorObject *self)
{
    if (self->it) {
        struct sluice_iterator *it = self->it;
        self->it = NULL;
        PyThreadState *ts = PyEval_SaveThread();
        sluice_iterator_close(it);
        PyEval_RestoreThread(ts);
    }
    sluice_element_free(self->elem);
    self->elem = NULL;
}

static void iterator_dealloc(IteratorObject *self)
{
    iterator_close_now(self);
    Py_XDECREF(self->args);
    Py_XDECREF(self->kw);
    Py_XDECREF(self->client);
    PyObject_Free(self);
}

static PyObject *iterator_next(IteratorObject *self)
{
    if (self->done || !self->it)
        return NULL;
    if (self->busy) {
        PyErr_SetString(PyExc_RuntimeError, "next() called while another call is waiting");
        return NULL;
    }
    if (!self->elem && !(self->elem = sluice_element_new()))
        return PyErr_NoMemory();
    char err[SLUICE_ERRMSG_SIZE] = "";
    uint32_t waited = 0;
    int rc;
    self->busy = true;
    for (;;) {
        uint32_t slice = PYS_SLICE_MS;
        if (self->timeout_ms && self->timeout_ms - waited < slice)
            slice = self->timeout_ms - waited;
        PyThreadState *ts = PyEval_SaveThread();
        rc = sluice_iterator_next_into(self->it, self->elem, slice, err, sizeof err);
        PyEval_RestoreThread(ts);
        if (rc != SLUICE_ERR_TIMEOUT)
            break;
        waited += slice;
        if (PyErr_CheckSignals() < 0) {
            self->busy = false;
            return NULL;
        }
        if (self->timeout_ms && waited >= self->timeout_ms) {
            /* With what the read waits for ("waiting for dispatcher H:P: ..."). */
            char why[SLUICE_ERRMSG_SIZE / 2] = "";
            ts = PyEval_SaveThread();
            sluice_iterator_waiting(self->it, why, sizeof why);
            PyEval_RestoreThread(ts);
            snprintf(err, sizeof err, "no element within %u ms%s%s", self->timeout_ms,
                     why[0] ? ": " : "", why);
            break;
        }
    }
    self->busy = false;
    if (rc == 0) {
        self->done = true;
        return NULL; /* StopIteration */
    }
    if (rc < 0)
        return pys_raise(rc, err);
    return pyconv_from_element(self->elem, &self->elem);
}

static PyObject *iterator_close(IteratorObject *self, PyObject *unused)
{
    if (self->busy) {
        PyErr_SetString(PyExc_RuntimeError, "close() called while next() is waiting");
        return NULL;
    }
    iterator_close_now(self);
    self->done = true;
    Py_RETURN_NONE;
}

static PyObject *iterator_enter(PyObject *self, PyObject *unused)
{
    Py_INCREF(self);
    return self;
}

static PyObject *iterator_exit(IteratorObject *self, PyObject *args)
{
    return iterator_close(self, NULL);
}

/* The position after the last element returned, as bytes (sluice_iterator_save). */
static PyObject *iterator_save(IteratorObject *self, PyObject *unused)
{
    if (!self->it) {
        PyErr_SetString(PyExc_ValueError, "the iterator is closed");
        return NULL;
    }
    if (self->busy) {
        PyErr_SetString(PyExc_RuntimeError, "save() called while next() is waiting");
        return NULL;
    }
    uint8_t *b = NULL;
    size_t n = 0;
    char err[SLUICE_ERRMSG_SIZE] = "";
    int rc = sluice_iterator_save(self->it, &b, &n, err, sizeof err);
    if (rc)
        return pys_raise(rc, err);
    PyObject *out = PyBytes_FromStringAndSize((const char *)b, (Py_ssize_t)n);
    free(b);
    return out;
}

/* {"elements": n, "splits_done": d, "splits_total": t, "copies_cut": c}
 * (sluice_iterator_progress). */
static PyObject *iterator_progress(IteratorObject *self, PyObject *unused)
{
    struct sluice_read_progress p = {0};
    if (self->it && !self->busy)
        sluice_iterator_progress(self->it, &p);
    return Py_BuildValue("{s:K,s:K,s:K,s:K}", "elements", (unsigned long long)p.elements,
                         "splits_done", (unsigned long long)p.splits_done, "splits_total",
                         (unsigned long long)p.splits_total, "copies_cut",
                         (unsigned long long)p.copies_cut);
}

static PyObject *iterator_state_dict(IteratorObject *self, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"step", NULL};
    unsigned long long step = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "|K:state_dict", kwlist, &step))
        return NULL;
    /* A checkpoint of a consumer of a shared job: the dispatcher hears first what it received
     * (sluice_iterator_report; a late answer leaves it to the next heartbeats, and is worth a
     * warning: a process that stops before those lets other readers get some of it again). */
    int rrc = 0;
    if (self->it && !self->busy) {
        PyThreadState *ts = PyEval_SaveThread();
        rrc = sluice_iterator_report(self->it);
        PyEval_RestoreThread(ts);
        if (rrc == SLUICE_ERR_TIMEOUT &&
            PyErr_WarnEx(PyExc_RuntimeWarning,
                         "state_dict(): the dispatcher did not confirm within 5 s what this "
                         "reader received; the position is valid, but if this process stops "
                         "before its next heartbeat reaches the dispatcher, other readers of a "
                         "shared job may get some of those elements again",
                         1) < 0)
            return NULL;
    }
    PyObject *pos = iterator_save(self, NULL);
    if (!pos)
        return NULL;
    /* A named job's consumer keeps the position with the dispatcher too (sluice_iterator_keep),
     * for the job's position (sluice.job_state); reads of a job of their own have none. Not
     * while the dispatcher does not answer (warned above): the caller's checkpoint goes on. */
    if (rrc == SLUICE_ERR_TIMEOUT)
        return Py_BuildValue("{s:N}", "position", pos);
    char err[SLUICE_ERRMSG_SIZE] = "";
    PyThreadState *ts = PyEval_SaveThread();
    int krc = sluice_iterator_keep(self->it, step, (const uint8_t *)PyBytes_AS_STRING(pos),
                                   (size_t)PyBytes_GET_SIZE(pos), err, sizeof err);
    PyEval_RestoreThread(ts);
    if (krc == SLUICE_ERR_INVALID && step) {
        Py_DECREF(pos);
        return pys_raise(krc, err);
    }
    if (krc < 0 && krc != SLUICE_ERR_UNSUPPORTED &&
        PyErr_WarnFormat(PyExc_RuntimeWarning, 1,
                         "state_dict(): the dispatcher did not keep this position for the job's "
                         "position (sluice.job_state): %s; the position is valid",
                         err) < 0) {
        Py_DECREF(pos);
        return NULL;
    }
    PyObject *d = Py_BuildValue("{s:N}", "position", pos);
    return d;
}

/* Continues the read from a state_dict(): the iterator is opened again from its position. */
static PyObject *iterator_load_state_dict(IteratorObject *self, PyObject *state)
{
    if (self->busy) {
        PyErr_SetString(PyExc_RuntimeError, "load_state_dict() called while next() is waiting");
        return NULL;
    }
    PyObject *pos = PyDict_Check(state) ? PyDict_GetItemString(state, "position") : NULL;
    if (!pos || !PyBytes_Check(pos)) {
        PyErr_SetString(PyExc_ValueError,
                        "load_state_dict() takes a state_dict() of a sluice iterator: a dict "
                        "with 'position' bytes");
        return NULL;
    }
    struct read_call call;
    PyObject *args = self->args ? self->args : PyTuple_New(0);
    if (!args)
        return NULL;
    int prc = parse_read(args, self->kw, &call);
    if (args != self->args)
        Py_DECREF(args);
    if (prc < 0)
        return NULL;
    PyBuffer_Release(&call.restore);
    call.o.restore = (const uint8_t *)PyBytes_AS_STRING(pos);
    call.o.restore_len = (size_t)PyBytes_GET_SIZE(pos);
    struct sluice_iterator *it = NULL;
    if (open_read((ClientObject *)self->client, &call.o, &it) < 0)
        return NULL;
    iterator_close_now(self);
    self->it = it;
    self->done = false;
    Py_RETURN_NONE;
}

static PyMethodDef iterator_methods[] = {
    {"save", (PyCFunction)iterator_save, METH_NOARGS,
     "save(): the read's position after the last element returned, as bytes (distributed_epoch)."},
    {"progress", (PyCFunction)iterator_progress, METH_NOARGS,
     "progress(): {'elements', 'splits_done', 'splits_total', 'copies_cut'} of the read so far "
     "(splits in distributed_epoch; splits_total 0 when unknown or endless; copies cut short by "
     "lost workers in parallel_epochs)."},
    {"state_dict", (PyCFunction)(void (*)(void))iterator_state_dict, METH_VARARGS | METH_KEYWORDS,
     "state_dict(step=None): {'position': save()}, picklable; first tells the dispatcher what "
     "the read received (a consumer of a shared job checkpointing while the others go on); a "
     "named job's consumer also keeps the position with the dispatcher as its position at "
     "checkpoint step `step` (default: one more than its last), for sluice.job_state()."},
    {"load_state_dict", (PyCFunction)iterator_load_state_dict, METH_O,
     "load_state_dict(state): continues the read from a state_dict() (of this read or another "
     "process's): the iterator is opened again from that position."},
    {"close", (PyCFunction)iterator_close, METH_NOARGS,
     "close(): releases the reader on the dispatcher; the iterator ends."},
    {"__enter__", iterator_enter, METH_NOARGS, NULL},
    {"__exit__", (PyCFunction)iterator_exit, METH_VARARGS, NULL},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject iterator_type = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "_sluice.Iterator",
    .tp_basicsize = sizeof(IteratorObject),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "An iterator over the elements a dataset's workers serve.",
    .tp_dealloc = (destructor)iterator_dealloc,
    .tp_iter = PyObject_SelfIter,
    .tp_iternext = (iternextfunc)iterator_next,
    .tp_methods = iterator_methods,
};

/* ---- Local ------------------------------------------------------------------------------- */

typedef struct {
    PyObject ob_base;
    struct sluice_local *run;
    struct sluice_element *elem;
    bool busy;
} LocalObject;

static int local_init(LocalObject *self, PyObject *args, PyObject *kw)
{
    static char *names[] = {"pipeline", "plugins", NULL};
    const char *pipeline;
    PyObject *plugins = NULL;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "s|O", names, &pipeline, &plugins))
        return -1;
    if (self->run) {
        PyErr_SetString(PyExc_RuntimeError, "Local already initialised");
        return -1;
    }
    struct pys_strs paths;
    if (pys_strs_get(plugins, "plugins", &paths) < 0)
        return -1;
    char err[SLUICE_ERRMSG_SIZE] = "";
    int rc;
    PyThreadState *ts = PyEval_SaveThread();
    rc = sluice_local_open(pipeline, paths.v, paths.n, &self->run, err, sizeof err);
    PyEval_RestoreThread(ts);
    pys_strs_release(&paths);
    return pys_started(rc, err);
}

static void local_dealloc(LocalObject *self)
{
    /* Without the GIL: closing joins a prefetch thread that may be waiting for it to run a py
     * function. */
    if (self->run) {
        PyThreadState *ts = PyEval_SaveThread();
        sluice_local_close(self->run);
        PyEval_RestoreThread(ts);
    }
    sluice_element_free(self->elem);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *local_next(LocalObject *self)
{
    if (!self->run)
        return NULL;
    if (self->busy) {
        PyErr_SetString(PyExc_RuntimeError, "next() called while another call is running");
        return NULL;
    }
    if (!self->elem && !(self->elem = sluice_element_new()))
        return PyErr_NoMemory();
    char err[SLUICE_ERRMSG_SIZE] = "";
    int rc;
    self->busy = true;
    PyThreadState *ts = PyEval_SaveThread();
    rc = sluice_local_next(self->run, self->elem, err, sizeof err);
    PyEval_RestoreThread(ts);
    self->busy = false;
    if (rc == 0)
        return NULL;
    if (rc < 0)
        return pys_raise(rc, err);
    return pyconv_from_element(self->elem, &self->elem);
}

static PyTypeObject local_type = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "_sluice.Local",
    .tp_basicsize = sizeof(LocalObject),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Local(pipeline, plugins=()): a pipeline run in this process.",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)local_init,
    .tp_dealloc = (destructor)local_dealloc,
    .tp_iter = PyObject_SelfIter,
    .tp_iternext = (iternextfunc)local_next,
};

int pys_client_types_init(PyObject *m)
{
    PyTypeObject *types[] = {&client_type, &iterator_type, &local_type};
    const char *names[] = {"Client", "Iterator", "Local"};
    for (size_t i = 0; i < 3; i++) {
        if (PyType_Ready(types[i]) < 0)
            return -1;
        if (PyModule_AddObjectRef(m, names[i], (PyObject *)types[i]) < 0)
            return -1;
    }
    return 0;
}
