/* The _sluice module: its exception classes and initialisation, which also gives libsluice's
 * pipelines this interpreter for py functions (src/pyfn/runtime.h). The Python-facing API lives in
 * the sluice package (python/sluice/__init__.py) on top of this module. */
#include "pysluice.h"

#include "pyfn/runtime.h"

PyObject *pys_error;
static PyObject *timeout_error, *not_found_error, *invalid_error, *unavailable_error,
    *cancelled_error, *exists_error, *task_failed_error, *auth_error;

PyObject *pys_raise(int code, const char *msg)
{
    PyObject *cls = pys_error;
    switch (code) {
    case SLUICE_ERR_TIMEOUT:
        cls = timeout_error;
        break;
    case SLUICE_ERR_NOT_FOUND:
        cls = not_found_error;
        break;
    case SLUICE_ERR_INVALID:
    case SLUICE_ERR_PARSE:
    case SLUICE_ERR_TYPE:
    case SLUICE_ERR_UNSUPPORTED:
        cls = invalid_error;
        break;
    case SLUICE_ERR_UNAVAILABLE:
    case SLUICE_ERR_CLOSED:
    case SLUICE_ERR_RESTARTED:
        cls = unavailable_error;
        break;
    case SLUICE_ERR_CANCELLED:
        cls = cancelled_error;
        break;
    case SLUICE_ERR_EXISTS:
        cls = exists_error;
        break;
    case SLUICE_ERR_TASK_FAILED:
    case SLUICE_ERR_FN:
        cls = task_failed_error;
        break;
    case SLUICE_ERR_AUTH:
        cls = auth_error;
        break;
    default:
        break;
    }
    if (code == SLUICE_ERR_NOMEM)
        return PyErr_NoMemory();
    /* args is the message alone (OSError subclasses would read a pair as errno and text); the
     * library's code is the exception's code attribute. */
    PyObject *text = PyUnicode_FromString(msg && *msg ? msg : sluice_strerror(code));
    PyObject *exc = text ? PyObject_CallOneArg(cls, text) : NULL;
    PyObject *num = exc ? PyLong_FromLong(code) : NULL;
    if (num && PyObject_SetAttrString(exc, "code", num) == 0)
        PyErr_SetObject(cls, exc);
    Py_XDECREF(num);
    Py_XDECREF(exc);
    Py_XDECREF(text);
    return NULL;
}

/* Creates sluice.<name>(bases...) and adds it to the module. */
static PyObject *new_error(PyObject *m, const char *name, PyObject *bases, const char *doc)
{
    char full[96];
    snprintf(full, sizeof full, "sluice.%s", name);
    PyObject *cls = PyErr_NewExceptionWithDoc(full, doc, bases, NULL);
    if (!cls)
        return NULL;
    if (PyModule_AddObjectRef(m, name, cls) < 0) {
        Py_DECREF(cls);
        return NULL;
    }
    return cls;
}

static PyObject *with_base(PyObject *builtin)
{
    return PyTuple_Pack(2, pys_error, builtin);
}

static PyObject *version(PyObject *self, PyObject *unused)
{
    return PyUnicode_FromString(SLUICE_PY_VERSION);
}

/* merge_positions(list of bytes) -> bytes: sluice_checkpoint_merge. */
static PyObject *merge_positions(PyObject *self, PyObject *seq)
{
    PyObject *fast = PySequence_Fast(seq, "merge_positions() takes a list of positions (bytes)");
    if (!fast)
        return NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(fast);
    if (n == 0) {
        Py_DECREF(fast);
        PyErr_SetString(PyExc_ValueError, "merge_positions() needs at least one position");
        return NULL;
    }
    const uint8_t **v = PyMem_Calloc((size_t)n, sizeof *v);
    size_t *lens = PyMem_Calloc((size_t)n, sizeof *lens);
    PyObject *out = NULL;
    if (!v || !lens) {
        PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *b = PySequence_Fast_GET_ITEM(fast, i);
        if (!PyBytes_Check(b)) {
            PyErr_SetString(PyExc_TypeError, "merge_positions() takes positions as bytes");
            goto done;
        }
        v[i] = (const uint8_t *)PyBytes_AS_STRING(b);
        lens[i] = (size_t)PyBytes_GET_SIZE(b);
    }
    uint8_t *m = NULL;
    size_t mlen = 0;
    char err[SLUICE_ERRMSG_SIZE] = "";
    int rc = sluice_checkpoint_merge(v, lens, (size_t)n, &m, &mlen, err, sizeof err);
    if (rc) {
        pys_raise(rc, err);
        goto done;
    }
    out = PyBytes_FromStringAndSize((const char *)m, (Py_ssize_t)mlen);
    free(m);
done:
    PyMem_Free(v);
    PyMem_Free(lens);
    Py_DECREF(fast);
    return out;
}

static PyObject *shm_place(PyObject *self, PyObject *arr)
{
    (void)self;
    return pyconv_shm_place(arr);
}

static PyMethodDef methods[] = {
    {"version", version, METH_NOARGS, "The sluice version this module was built from."},
    {"merge_positions", merge_positions, METH_O,
     "merge_positions(positions): one position holding what the consumers of a shared job had "
     "together (sluice_checkpoint_merge)."},
    {"shm_place", shm_place, METH_O,
     "shm_place(array): (fd, offset, region_len, region_id) when the array's values lie in a "
     "shared-memory region of this process (a read from a worker on this host), else None "
     "(sluice_element_shm_place)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT,
    "_sluice",
    "The C core of the sluice package; use the sluice module instead.",
    -1,
    methods,
};

PyMODINIT_FUNC PyInit__sluice(void)
{
    PyObject *m = PyModule_Create(&module);
    if (!m)
        return NULL;
    if (pyconv_init() < 0)
        goto fail;
    pys_error = new_error(m, "Error", NULL,
                          "A failure reported by sluice: str(e) is the message, e.code the "
                          "library's (negative) error code.");
    if (!pys_error)
        goto fail;
    PyObject *b;
    if (!(b = with_base(PyExc_TimeoutError)) ||
        !(timeout_error = new_error(m, "TimeoutError", b, "A bounded wait ran out.")))
        goto fail_b;
    Py_DECREF(b);
    if (!(b = with_base(PyExc_LookupError)) ||
        !(not_found_error = new_error(m, "NotFoundError", b, "An unknown id, name or file.")))
        goto fail_b;
    Py_DECREF(b);
    if (!(b = with_base(PyExc_ValueError)) ||
        !(invalid_error = new_error(m, "InvalidArgumentError", b,
                                    "An argument, pipeline or request the service refused.")))
        goto fail_b;
    Py_DECREF(b);
    if (!(b = with_base(PyExc_ConnectionError)) ||
        !(unavailable_error =
              new_error(m, "UnavailableError", b,
                        "A server is unreachable, closed, or restarted and lost the job.")))
        goto fail_b;
    Py_DECREF(b);
    if (!(b = with_base(PyExc_PermissionError)) ||
        !(auth_error = new_error(m, "AuthenticationError", b,
                                 "A peer could not prove the cluster's token, or refused ours "
                                 "(a wrong or missing auth_token_file), or TLS failed.")))
        goto fail_b;
    Py_DECREF(b);
    if (!(cancelled_error = new_error(m, "CancelledError", pys_error, "The read was cancelled.")) ||
        !(exists_error = new_error(m, "AlreadyExistsError", pys_error,
                                   "A dataset or job exists with a different definition.")) ||
        !(task_failed_error = new_error(m, "TaskFailedError", pys_error,
                                        "A pipeline failed on a worker; the message says why.")))
        goto fail;
    if (pys_client_types_init(m) < 0 || pys_server_types_init(m) < 0)
        goto fail;
    /* py functions in this process (in-process workers, local runs and tails) run in this
     * interpreter. */
    sluice_python_runtime_install(&pyfn_runtime);
    return m;
fail_b:
    Py_XDECREF(b);
fail:
    Py_DECREF(m);
    return NULL;
}
