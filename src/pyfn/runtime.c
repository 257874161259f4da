/* The py runtime over CPython (runtime.h). Happy path of a call: take the GIL, convert the
 * element (copies), call the cached callable with it and the converted extra arguments, convert
 * the result back into the element, release the GIL. Failure modes: an exception anywhere (the
 * import, the call, a filter result's truth) becomes its one-line text; a result of the wrong
 * kind becomes the conversion's text; an interpreter that is shutting down refuses new calls
 * rather than letting CPython end the calling thread.
 *
 * Cancellation: a thread's first call registers a watch (its Python thread id and the context of
 * the chain it is calling for, set and cleared with the GIL held around each call: no lock per
 * element). A watchdog thread looks every CANCEL_POLL_MS at the watches, without the GIL, and only
 * when one is inside a call takes the GIL and raises SluiceCancelled (a BaseException, so that no
 * `except Exception` swallows it) asynchronously in each thread whose chain was cancelled: the
 * function stops at its next bytecode boundary and the call fails with SLUICE_ERR_CANCELLED. A
 * function blocked in C code (time.sleep, a long numpy call) stops only when that returns; a
 * worker abandons such a thread (task.h). */
#include "runtime.h"

#include "convert.h"

#include "pipeline/iter.h"
#include "pipeline/roots.h"

#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* An op's binding: malloc'd, so that sanitizers keep checking it (they take the interpreter's own
 * allocations as its business). */
struct pyfn_op {
    PyObject *fn;    /* the callable */
    PyObject *extra; /* tuple of the extra arguments */
};

/* A thread that takes the GIL while the interpreter finalises is ended by CPython; a pipeline
 * thread must instead fail its op and be joined normally. */
static int interpreter_gone(char *err, size_t errlen)
{
#if PY_VERSION_HEX >= 0x030D0000
    int finalizing = Py_IsFinalizing();
#else
    int finalizing = _Py_IsFinalizing();
#endif
    if (!Py_IsInitialized() || finalizing) {
        snprintf(err, errlen, "the Python interpreter is shutting down");
        return SLUICE_ERR_CANCELLED;
    }
    return 0;
}

/* ---- Cancellation ------------------------------------------------------------------------ */

#define CANCEL_POLL_MS 50

/* One per thread that has called a function; freed when the thread exits. */
struct watch {
    unsigned long ident;                  /* the thread's Python id */
    _Atomic(const struct pipe_ctx *) ctx; /* set during a call (with the GIL held), else NULL */
    bool raised;                          /* an async exception was set (GIL held) */
    struct watch *prev, *next;
};

static pthread_mutex_t watch_mu = PTHREAD_MUTEX_INITIALIZER;
static struct watch *watches; /* guarded by watch_mu */
static pthread_once_t watch_once = PTHREAD_ONCE_INIT;
static pthread_key_t watch_key;
static bool watchdog_running;    /* guarded by watch_mu */
static PyObject *cancelled_type; /* SluiceCancelled, created with the GIL on first use */
static _Thread_local struct watch *my_watch;

static void watch_free(void *p)
{
    struct watch *w = p;
    pthread_mutex_lock(&watch_mu);
    if (w->prev)
        w->prev->next = w->next;
    else
        watches = w->next;
    if (w->next)
        w->next->prev = w->prev;
    pthread_mutex_unlock(&watch_mu);
    free(w);
}

static void watch_key_init(void)
{
    (void)pthread_key_create(&watch_key, watch_free);
}

/* The watchdog: raises SluiceCancelled in threads whose chain was cancelled mid-call. */
static void *watchdog_main(void *arg)
{
    (void)arg;
    unsigned long idents[64];
    for (;;) {
        struct timespec ts = {0, CANCEL_POLL_MS * 1000000L};
        nanosleep(&ts, NULL);
        pthread_mutex_lock(&watch_mu);
        bool busy = false;
        for (struct watch *w = watches; w && !busy; w = w->next)
            busy = atomic_load(&w->ctx) != NULL;
        pthread_mutex_unlock(&watch_mu);
        char why[SLUICE_ERRMSG_SIZE];
        if (!busy || interpreter_gone(why, sizeof why))
            continue;
        PyGILState_STATE g = PyGILState_Ensure();
        /* With the GIL held, a watch's context is set only while its thread is inside a call
         * (set and cleared under the GIL), so the context is alive while read here. */
        size_t n = 0;
        pthread_mutex_lock(&watch_mu);
        for (struct watch *w = watches; w && n < sizeof idents / sizeof idents[0]; w = w->next) {
            const struct pipe_ctx *ctx = atomic_load(&w->ctx);
            if (ctx && !w->raised && pipe_cancelled(ctx)) {
                w->raised = true;
                idents[n++] = w->ident;
            }
        }
        pthread_mutex_unlock(&watch_mu);
        for (size_t i = 0; i < n; i++)
            PyThreadState_SetAsyncExc(idents[i], cancelled_type);
        PyGILState_Release(g);
    }
    return NULL;
}

/* With the GIL held: this thread's watch, registered (and the watchdog started) on first use;
 * NULL when either cannot be had (calls then run without cancellation). */
static struct watch *watch_get(void)
{
    if (my_watch)
        return my_watch;
    if (cancelled_type == NULL) {
        cancelled_type = PyErr_NewExceptionWithDoc(
            "sluice.SluiceCancelled", "The pipeline calling this function was cancelled.",
            PyExc_BaseException, NULL);
        if (cancelled_type == NULL) {
            PyErr_Clear();
            return NULL;
        }
    }
    pthread_once(&watch_once, watch_key_init);
    struct watch *w = calloc(1, sizeof *w);
    if (w == NULL)
        return NULL;
    w->ident = PyThread_get_thread_ident();
    pthread_mutex_lock(&watch_mu);
    bool start = !watchdog_running;
    if (start) {
        pthread_t t;
        pthread_attr_t attr;
        pthread_attr_init(&attr);
        pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
        /* The watchdog blocks every signal: they stay the program's. */
        sigset_t all, old;
        sigfillset(&all);
        pthread_sigmask(SIG_SETMASK, &all, &old);
        watchdog_running = pthread_create(&t, &attr, watchdog_main, NULL) == 0;
        pthread_sigmask(SIG_SETMASK, &old, NULL);
        pthread_attr_destroy(&attr);
    }
    if (!watchdog_running) {
        pthread_mutex_unlock(&watch_mu);
        free(w);
        return NULL;
    }
    w->next = watches;
    if (watches)
        watches->prev = w;
    watches = w;
    pthread_mutex_unlock(&watch_mu);
    (void)pthread_setspecific(watch_key, w);
    my_watch = w;
    return w;
}

/* With the GIL held, after a call made with w's context set: clears it. Returns true when the
 * watchdog raised in this thread meanwhile (an exception still pending is withdrawn, so it can
 * never hit a later call). */
static bool watch_end(struct watch *w)
{
    atomic_store(&w->ctx, NULL);
    if (!w->raised)
        return false;
    w->raised = false;
    PyThreadState_SetAsyncExc(w->ident, NULL);
    return true;
}

/* ---- Exceptions as one line --------------------------------------------------------------- */

/* Copies s into buf as one line: runs of whitespace become one space, ends trimmed. */
static void one_line(const char *s, char *buf, size_t len)
{
    size_t o = 0;
    bool space = false;
    if (!len)
        return;
    for (; *s && o + 1 < len; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f') {
            space = o > 0;
            continue;
        }
        if (space && o + 2 < len)
            buf[o++] = ' ';
        space = false;
        buf[o++] = (char)c;
    }
    buf[o] = '\0';
}

/* The exception type's name as tracebacks print it: "ValueError", "aug.BadPixel". */
static void type_name(PyObject *type, char *buf, size_t len)
{
    PyObject *qual = PyObject_GetAttrString(type, "__qualname__");
    PyObject *mod = PyObject_GetAttrString(type, "__module__");
    const char *q = qual && PyUnicode_Check(qual) ? PyUnicode_AsUTF8(qual) : NULL;
    const char *m = mod && PyUnicode_Check(mod) ? PyUnicode_AsUTF8(mod) : NULL;
    if (!q)
        q = ((PyTypeObject *)type)->tp_name;
    if (m && strcmp(m, "builtins") != 0 && strcmp(m, "__main__") != 0)
        snprintf(buf, len, "%s.%s", m, q);
    else
        snprintf(buf, len, "%s", q);
    Py_XDECREF(qual);
    Py_XDECREF(mod);
    PyErr_Clear();
}

/* "FILE:LINE" of the innermost traceback frame whose file is a real one (not "<frozen
 * importlib._bootstrap>"), with the file's base name; empty when there is none. */
static void location(PyObject *tb, char *buf, size_t len)
{
    buf[0] = '\0';
    Py_XINCREF(tb);
    while (tb && tb != Py_None) {
        PyObject *frame = PyObject_GetAttrString(tb, "tb_frame");
        PyObject *code = frame ? PyObject_GetAttrString(frame, "f_code") : NULL;
        PyObject *file = code ? PyObject_GetAttrString(code, "co_filename") : NULL;
        PyObject *line = PyObject_GetAttrString(tb, "tb_lineno");
        const char *f = file && PyUnicode_Check(file) ? PyUnicode_AsUTF8(file) : NULL;
        long l = line && PyLong_Check(line) ? PyLong_AsLong(line) : -1;
        if (f && f[0] != '<' && l >= 0) {
            const char *base = strrchr(f, '/');
            snprintf(buf, len, "%s:%ld", base ? base + 1 : f, l);
        }
        Py_XDECREF(frame);
        Py_XDECREF(code);
        Py_XDECREF(file);
        Py_XDECREF(line);
        PyObject *next = PyObject_GetAttrString(tb, "tb_next");
        Py_DECREF(tb);
        tb = next;
    }
    Py_XDECREF(tb);
    PyErr_Clear();
}

int pyfn_exception(char *err, size_t errlen)
{
    PyObject *type, *value, *tb;
    PyErr_Fetch(&type, &value, &tb);
    if (!type) {
        snprintf(err, errlen, "failed without a Python exception");
        return SLUICE_ERR_FN;
    }
    PyErr_NormalizeException(&type, &value, &tb);
    if (tb && value)
        PyException_SetTraceback(value, tb);
    int rc =
        PyErr_GivenExceptionMatches(type, PyExc_MemoryError) ? SLUICE_ERR_NOMEM : SLUICE_ERR_FN;
    char name[128], where[160], text[400] = "";
    type_name(type, name, sizeof name);
    location(tb, where, sizeof where);
    PyObject *str = value ? PyObject_Str(value) : NULL;
    const char *s = str ? PyUnicode_AsUTF8(str) : NULL;
    if (s)
        one_line(s, text, sizeof text);
    PyErr_Clear();
    int off = snprintf(err, errlen, "%s%s%s", name, text[0] ? ": " : "", text);
    if (where[0] && off >= 0 && (size_t)off < errlen)
        snprintf(err + off, errlen - (size_t)off, " (%s)", where);
    Py_XDECREF(str);
    Py_XDECREF(type);
    Py_XDECREF(value);
    Py_XDECREF(tb);
    return rc;
}

/* ---- The runtime -------------------------------------------------------------------------- */

/* A literal argument as a Python object: int, float, str (UTF-8; undecodable bytes kept as
 * surrogates) or bool. The check admits nothing else. */
static PyObject *literal(const struct pipe_value *v)
{
    switch (v->kind) {
    case PIPE_VAL_INT:
        return PyLong_FromLongLong((long long)v->i);
    case PIPE_VAL_FLOAT:
        return PyFloat_FromDouble(v->f);
    case PIPE_VAL_BYTES:
        return PyUnicode_DecodeUTF8(v->s ? v->s : "", (Py_ssize_t)v->slen, "surrogateescape");
    case PIPE_VAL_BOOL:
        return PyBool_FromLong(v->i != 0);
    default:
        PyErr_SetString(PyExc_TypeError, "unsupported literal argument");
        return NULL;
    }
}

/* Whether loc (a str or bytes path) resolves within one of dirs. Needs the GIL. */
static bool location_within(PyObject *loc, const struct pipe_roots *dirs)
{
    PyObject *b = NULL;
    if (!PyUnicode_FSConverter(loc, &b)) {
        PyErr_Clear();
        return false;
    }
    char real[PATH_MAX];
    bool ok = realpath(PyBytes_AS_STRING(b), real) && pipe_roots_contain_path(dirs, real);
    Py_DECREF(b);
    return ok;
}

/* Whether a module spec (a ModuleSpec, or None) loads from within dirs: a file location there,
 * or, for a namespace package, search locations all there. Built-in and frozen modules do not.
 * Needs the GIL; leaves no exception set. */
static bool spec_within(PyObject *spec, const struct pipe_roots *dirs)
{
    bool allowed = false;
    if (!spec || spec == Py_None)
        return false;
    PyObject *has = PyObject_GetAttrString(spec, "has_location");
    PyObject *origin = PyObject_GetAttrString(spec, "origin");
    PyObject *locs = PyObject_GetAttrString(spec, "submodule_search_locations");
    if (has && PyObject_IsTrue(has) == 1) {
        allowed = origin && origin != Py_None && location_within(origin, dirs);
    } else if (has && locs && locs != Py_None && (!origin || origin == Py_None)) {
        /* A namespace package: every directory it would load from must be allowed. */
        PyObject *it = PyObject_GetIter(locs);
        PyObject *loc;
        size_t count = 0;
        allowed = it != NULL;
        while (it && (loc = PyIter_Next(it))) {
            allowed = allowed && location_within(loc, dirs);
            count++;
            Py_DECREF(loc);
        }
        allowed = allowed && count > 0 && !PyErr_Occurred();
        Py_XDECREF(it);
    }
    Py_XDECREF(has);
    Py_XDECREF(origin);
    Py_XDECREF(locs);
    PyErr_Clear();
    return allowed;
}

/* Whether the import system would load the top-level package of module from within dirs
 * (importlib.util.find_spec imports nothing for a top-level name; for a module imported already
 * it gives that module's spec). Needs the GIL. Returns 0, or SLUICE_ERR_DENIED with err. */
static int check_origin(const char *module, const struct pipe_roots *dirs, char *err, size_t errlen)
{
    size_t n = strcspn(module, ".");
    PyObject *util = PyImport_ImportModule("importlib.util");
    PyObject *spec =
        util ? PyObject_CallMethod(util, "find_spec", "s#", module, (Py_ssize_t)n) : NULL;
    /* Not found, or find_spec failed: either way the module is not one of the allowed ones. */
    PyErr_Clear();
    bool allowed = spec_within(spec, dirs);
    Py_XDECREF(spec);
    Py_XDECREF(util);
    if (!allowed) {
        snprintf(err, errlen, "module '%.*s' is not in the worker's --python-path", (int)n, module);
        return SLUICE_ERR_DENIED;
    }
    return 0;
}

/* Whether fn was defined in a module loaded from within dirs: its __module__ names a module in
 * sys.modules whose spec is within them. So an allowed module's imports ("from numpy import
 * load", its __loader__'s methods) are not reachable through it. Needs the GIL. Returns 0, or
 * SLUICE_ERR_DENIED with err. */
static int check_defined(PyObject *fn, const char *module, const char *function,
                         const struct pipe_roots *dirs, char *err, size_t errlen)
{
    PyObject *name = PyObject_GetAttrString(fn, "__module__");
    const char *where = name && PyUnicode_Check(name) ? PyUnicode_AsUTF8(name) : NULL;
    PyObject *mod = where ? PyDict_GetItemWithError(PyImport_GetModuleDict(), name) : NULL;
    PyObject *spec = mod ? PyObject_GetAttrString(mod, "__spec__") : NULL;
    PyErr_Clear();
    bool allowed = spec_within(spec, dirs);
    if (!allowed)
        snprintf(err, errlen,
                 "%s:%s is defined in module '%s', which is not in the worker's --python-path",
                 module, function, where ? where : "?");
    Py_XDECREF(spec);
    Py_XDECREF(name);
    return allowed ? 0 : SLUICE_ERR_DENIED;
}

/* Resolves "module:function": imports module and follows the dotted attributes of function.
 * Returns a new reference, or NULL with an exception set, or (confined to dirs) NULL without
 * one and SLUICE_ERR_DENIED in err when an attribute on the way is another module
 * ("aug:os.system" would reach os through aug's import of it) or the callable was defined
 * outside dirs (check_defined). */
static PyObject *resolve(const char *module, const char *function, const struct pipe_roots *dirs,
                         char *err, size_t errlen)
{
    PyObject *obj = PyImport_ImportModule(module);
    const char *p = function;
    while (obj && *p) {
        const char *dot = strchr(p, '.');
        size_t len = dot ? (size_t)(dot - p) : strlen(p);
        PyObject *name = PyUnicode_FromStringAndSize(p, (Py_ssize_t)len);
        PyObject *next = name ? PyObject_GetAttr(obj, name) : NULL;
        Py_XDECREF(name);
        Py_DECREF(obj);
        obj = next;
        if (obj && dirs && PyModule_Check(obj)) {
            const char *mname = PyModule_GetName(obj);
            PyErr_Clear();
            snprintf(err, errlen,
                     "%s:%s leads into module '%s'; name a function of module '%s' itself", module,
                     function, mname ? mname : "?", module);
            Py_CLEAR(obj);
            return NULL;
        }
        p += len + (dot ? 1 : 0);
    }
    if (obj && !PyCallable_Check(obj)) {
        PyErr_Format(PyExc_TypeError, "%s:%s is %s, which is not callable", module, function,
                     Py_TYPE(obj)->tp_name);
        Py_CLEAR(obj);
    }
    if (obj && dirs && check_defined(obj, module, function, dirs, err, errlen) < 0)
        Py_CLEAR(obj);
    return obj;
}

static int rt_bind(const char *module, const char *function, const struct pipe_value *args,
                   size_t nargs, const struct pipe_roots *dirs, void **state, char *err,
                   size_t errlen)
{
    int rc = interpreter_gone(err, errlen);
    if (rc)
        return rc;
    PyGILState_STATE g = PyGILState_Ensure();
    struct pyfn_op *op = calloc(1, sizeof(*op));
    if (!op) {
        PyGILState_Release(g);
        snprintf(err, errlen, "%s", sluice_strerror(SLUICE_ERR_NOMEM));
        return SLUICE_ERR_NOMEM;
    }
    rc = dirs ? check_origin(module, dirs, err, errlen) : 0;
    if (rc == 0) {
        op->fn = resolve(module, function, dirs, err, errlen);
        if (!op->fn && !PyErr_Occurred())
            rc = SLUICE_ERR_DENIED;
    }
    op->extra = op->fn ? PyTuple_New((Py_ssize_t)nargs) : NULL;
    for (size_t k = 0; op->extra && k < nargs; k++) {
        PyObject *v = literal(&args[k]);
        if (!v) {
            Py_CLEAR(op->extra);
            break;
        }
        PyTuple_SET_ITEM(op->extra, (Py_ssize_t)k, v);
    }
    if (!op->extra) {
        if (rc == 0)
            rc = pyfn_exception(err, errlen);
        Py_XDECREF(op->fn);
        free(op);
        PyGILState_Release(g);
        return rc;
    }
    PyGILState_Release(g);
    *state = op;
    return 0;
}

static void rt_unbind(void *state)
{
    struct pyfn_op *op = state;
    char why[SLUICE_ERRMSG_SIZE];
    /* At shutdown the references are left to the interpreter's end. */
    if (interpreter_gone(why, sizeof why) == 0) {
        PyGILState_STATE g = PyGILState_Ensure();
        Py_DECREF(op->fn);
        Py_DECREF(op->extra);
        PyGILState_Release(g);
    }
    free(op);
}

/* Calls op's function on elem and the extra arguments, with the GIL taken here. A map (out
 * non-NULL) stores the result into out; a filter sets *keep to the result's truth. Returns 0 or
 * the failure with err. */
static int call(struct pyfn_op *op, const struct sluice_element *elem, struct sluice_element *out,
                const struct pipe_ctx *ctx, int *keep, char *err, size_t errlen)
{
    int rc = interpreter_gone(err, errlen);
    if (rc)
        return rc;
    PyGILState_STATE g = PyGILState_Ensure();
    struct watch *w = ctx ? watch_get() : NULL;
    if (w)
        atomic_store(&w->ctx, ctx);
    /* owned NULL: the element is only read, and the call gets copies of its own. */
    PyObject *x = pyconv_from_element((struct sluice_element *)elem, NULL);
    PyObject *r = NULL;
    if (x) {
        PyObject *argv[1 + PIPE_PY_MAX_EXTRA];
        Py_ssize_t n = PyTuple_GET_SIZE(op->extra);
        argv[0] = x;
        for (Py_ssize_t k = 0; k < n && k < PIPE_PY_MAX_EXTRA; k++)
            argv[1 + k] = PyTuple_GET_ITEM(op->extra, k);
        r = PyObject_Vectorcall(op->fn, argv, (size_t)(1 + n), NULL);
        Py_DECREF(x);
    }
    if (r && out) {
        rc = pyconv_to_element(r, out, err, errlen);
    } else if (r) {
        int truth = PyObject_IsTrue(r);
        rc = truth < 0 ? SLUICE_ERR_FN : 0;
        *keep = truth > 0;
    }
    if (w && watch_end(w) && (!r || (rc && PyErr_Occurred()))) {
        /* Interrupted by the watchdog (whatever the function made of it). */
        PyErr_Clear();
        snprintf(err, errlen, "cancelled");
        rc = SLUICE_ERR_CANCELLED;
    } else if (!r || (rc && PyErr_Occurred())) {
        /* A Python failure anywhere: the call, the conversions, the truth of the result. */
        rc = pyfn_exception(err, errlen);
    }
    Py_XDECREF(r);
    PyGILState_Release(g);
    return rc;
}

static int rt_map(void *state, struct sluice_element *elem, const struct pipe_ctx *ctx, char *err,
                  size_t errlen)
{
    return call(state, elem, elem, ctx, NULL, err, errlen);
}

static int rt_filter(void *state, const struct sluice_element *elem, const struct pipe_ctx *ctx,
                     int *keep, char *err, size_t errlen)
{
    return call(state, elem, NULL, ctx, keep, err, errlen);
}

int pyfn_add_path(const char *dir, char *err, size_t errlen)
{
    int rc = interpreter_gone(err, errlen);
    if (rc)
        return rc;
    PyGILState_STATE g = PyGILState_Ensure();
    PyObject *path = PySys_GetObject("path"); /* borrowed */
    PyObject *d = PyUnicode_DecodeFSDefault(dir);
    if (!path || !PyList_Check(path)) {
        snprintf(err, errlen, "sys.path is not a list");
        rc = SLUICE_ERR_FN;
    } else if (!d) {
        rc = pyfn_exception(err, errlen);
    } else {
        int has = PySequence_Contains(path, d);
        if (has < 0 || (has == 0 && PyList_Insert(path, 0, d) < 0))
            rc = pyfn_exception(err, errlen);
    }
    Py_XDECREF(d);
    PyGILState_Release(g);
    return rc;
}

const struct pipe_py_runtime pyfn_runtime = {
    .bind = rt_bind,
    .map = rt_map,
    .filter = rt_filter,
    .unbind = rt_unbind,
    .add_path = pyfn_add_path,
};
