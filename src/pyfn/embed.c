/* The embedded interpreter (embed.h): started under a mutex by the first bind, which every
 * other bind waits for; directories for sys.path are kept until then. */
#include "embed.h"

#include "convert.h"
#include "runtime.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { NOT_STARTED, READY, FAILED };

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static int status = NOT_STARTED;
static char failure[SLUICE_ERRMSG_SIZE];
/* Directories for sys.path before the start, in the order given. */
static char **paths;
static size_t npaths;

static int fail_start(const char *what, const char *why)
{
    snprintf(failure, sizeof failure, "cannot start Python: %s%s%s", what, why ? ": " : "",
             why ? why : "");
    status = FAILED;
    return SLUICE_ERR_UNSUPPORTED;
}

/* Starts the interpreter; mu held. On return the GIL is released. */
static int start_locked(void)
{
    PyConfig config;
    PyConfig_InitPythonConfig(&config);
    /* The program has its own signal handling (a signal thread), and no argv for Python. */
    config.install_signal_handlers = 0;
    config.parse_argv = 0;
    PyStatus st = Py_InitializeFromConfig(&config);
    PyConfig_Clear(&config);
    if (PyStatus_Exception(st))
        return fail_start(st.err_msg ? st.err_msg : "initialisation failed", NULL);
    /* This thread holds the GIL now. Each directory goes to the front in turn, so the last
     * given is inserted first and the first given ends up first. */
    int rc = 0;
    char why[SLUICE_ERRMSG_SIZE / 2]; /* quoted in a longer message */
    for (size_t k = npaths; rc == 0 && k-- > 0;)
        if (pyfn_add_path(paths[k], why, sizeof why) < 0)
            rc = fail_start("sys.path", why);
    if (rc == 0 && pyconv_init() < 0) {
        pyfn_exception(why, sizeof why);
        rc = fail_start("numpy", why);
    }
    if (rc == 0)
        status = READY;
    /* Every pipeline thread takes the GIL when it needs it; the interpreter is never ended. */
    PyEval_SaveThread();
    return rc;
}

static int ensure_started(char *err, size_t errlen)
{
    pthread_mutex_lock(&mu);
    int rc = 0;
    if (status == NOT_STARTED)
        rc = start_locked();
    if (status == FAILED)
        rc = SLUICE_ERR_UNSUPPORTED;
    if (rc)
        snprintf(err, errlen, "%s", failure);
    pthread_mutex_unlock(&mu);
    return rc;
}

static int embed_bind(const char *module, const char *function, const struct pipe_value *args,
                      size_t nargs, const struct pipe_roots *dirs, void **state, char *err,
                      size_t errlen)
{
    int rc = ensure_started(err, errlen);
    if (rc)
        return rc;
    return pyfn_runtime.bind(module, function, args, nargs, dirs, state, err, errlen);
}

static int embed_add_path(const char *dir, char *err, size_t errlen)
{
    pthread_mutex_lock(&mu);
    int rc = 0;
    if (status == NOT_STARTED) {
        char **more = realloc(paths, (npaths + 1) * sizeof(*more));
        char *copy = strdup(dir);
        if (more)
            paths = more;
        if (!more || !copy) {
            free(copy);
            rc = SLUICE_ERR_NOMEM;
            snprintf(err, errlen, "%s", sluice_strerror(rc));
        } else {
            paths[npaths++] = copy;
        }
    }
    int now = status;
    pthread_mutex_unlock(&mu);
    /* Running already (or failed, when the call reports why); status changes no more. */
    if (now == READY)
        return pyfn_add_path(dir, err, errlen);
    if (now == FAILED)
        return ensure_started(err, errlen);
    return rc;
}

void pyembed_install(void)
{
    static struct pipe_py_runtime rt;
    rt = pyfn_runtime;
    rt.bind = embed_bind;
    rt.add_path = embed_add_path;
    sluice_python_runtime_install(&rt);
}

#if defined(__SANITIZE_ADDRESS__)
/* LeakSanitizer reads these when the program ends. The interpreter is never finalised, and most
 * of what it and its extension modules allocated is reachable only through Python's own
 * allocator's arenas, which LeakSanitizer does not scan: none of it is a leak of this program.
 * Allocations by sluice's own code keep being checked. */
const char *__lsan_default_suppressions(void);
const char *__lsan_default_suppressions(void)
{
    return "leak:libpython3\n"
           "leak:/lib-dynload/\n"
           "leak:/dist-packages/\n"
           "leak:/site-packages/\n"
           "leak:libcrypto.so\n"
           "leak:libssl.so\n";
}

/* ...and without a report of them on stderr, which belongs to the program's own output. */
const char *__lsan_default_options(void);
const char *__lsan_default_options(void)
{
    return "print_suppressions=0";
}
#endif
