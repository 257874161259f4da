/* py: the built-in that hands elements to a Python runtime (pyfn.h). Its check is pure and runs
 * everywhere; its bind finds the runtime installed in this process, if any, and keeps it with
 * the op's state, so an op unbinds through the runtime it was bound with. */
#include "pyfn.h"

#include "common/error.h"
#include "registry.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

static _Atomic(const struct pipe_py_runtime *) installed;

#define NO_PYTHON "this worker has no Python support"

void sluice_python_runtime_install(const struct pipe_py_runtime *rt)
{
    atomic_store(&installed, rt);
}

bool pipe_py_available(void)
{
    return atomic_load(&installed) != NULL;
}

int pipe_py_add_path(const char *dir, char *err, size_t errlen)
{
    const struct pipe_py_runtime *rt = atomic_load(&installed);
    if (!rt)
        return err_set(err, errlen, SLUICE_ERR_UNSUPPORTED, NO_PYTHON);
    return rt->add_path(dir, err, errlen);
}

/* ---- "module:function" ------------------------------------------------------------------- */

static bool ident_start(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
}

static bool ident_char(char c)
{
    return ident_start(c) || (c >= '0' && c <= '9');
}

/* Whether p[0..len) is identifiers joined by single dots: "a", "a.b_2". */
static bool dotted(const char *p, size_t len)
{
    bool start = true;
    for (size_t i = 0; i < len; i++) {
        if (start) {
            if (!ident_start(p[i]))
                return false;
            start = false;
        } else if (p[i] == '.') {
            start = true;
        } else if (!ident_char(p[i])) {
            return false;
        }
    }
    return !start;
}

int pipe_py_split_target(const char *text, size_t len, char module[PIPE_PY_TARGET_MAX + 1],
                         char function[PIPE_PY_TARGET_MAX + 1], char *err, size_t errlen)
{
    const char *colon = len ? memchr(text, ':', len) : NULL;
    size_t mlen = colon ? (size_t)(colon - text) : 0;
    size_t flen = colon ? len - mlen - 1 : 0;
    if (len > PIPE_PY_TARGET_MAX || !colon || !dotted(text, mlen) || !dotted(colon + 1, flen))
        return err_set(err, errlen, SLUICE_ERR_INVALID,
                       "expected \"module:function\", got \"%.*s\"", (int)(len > 80 ? 80 : len),
                       text);
    memcpy(module, text, mlen);
    module[mlen] = '\0';
    memcpy(function, colon + 1, flen);
    function[flen] = '\0';
    return 0;
}

/* ---- The built-in ------------------------------------------------------------------------ */

static int py_check(const struct sluice_fn_args *a, char *err, size_t errlen)
{
    const struct pipe_value *v = a->v;
    if (v[0].kind != PIPE_VAL_BYTES)
        return err_set(err, errlen, SLUICE_ERR_INVALID,
                       "the first argument must be a string \"module:function\"");
    char module[PIPE_PY_TARGET_MAX + 1], function[PIPE_PY_TARGET_MAX + 1];
    int rc = pipe_py_split_target(v[0].s ? v[0].s : "", v[0].slen, module, function, err, errlen);
    if (rc)
        return rc;
    for (size_t k = 1; k < a->n; k++) {
        enum pipe_value_kind kind = v[k].kind;
        if (kind != PIPE_VAL_INT && kind != PIPE_VAL_FLOAT && kind != PIPE_VAL_BYTES &&
            kind != PIPE_VAL_BOOL)
            return err_set(err, errlen, SLUICE_ERR_INVALID,
                           "argument %zu must be a number, a string or a bool", k + 1);
    }
    return 0;
}

struct py_op {
    const struct pipe_py_runtime *rt;
    void *state;
};

static int py_bind(const struct sluice_fn_args *a, void *user, void **state, char *err,
                   size_t errlen)
{
    const struct pipe_py_runtime *rt = atomic_load(&installed);
    if (!rt)
        return err_set(err, errlen, SLUICE_ERR_UNSUPPORTED, NO_PYTHON);
    char module[PIPE_PY_TARGET_MAX + 1], function[PIPE_PY_TARGET_MAX + 1];
    int rc = pipe_py_split_target(a->v[0].s ? a->v[0].s : "", a->v[0].slen, module, function, err,
                                  errlen);
    if (rc)
        return rc;
    struct py_op *op = calloc(1, sizeof(*op));
    if (!op)
        return err_set(err, errlen, SLUICE_ERR_NOMEM, "%s", sluice_strerror(SLUICE_ERR_NOMEM));
    op->rt = rt;
    /* user is the registry py was registered in: its confinement applies. */
    rc = rt->bind(module, function, a->v + 1, a->n - 1, pipe_registry_py_dirs(user), &op->state,
                  err, errlen);
    if (rc) {
        free(op);
        return rc;
    }
    *state = op;
    return 0;
}

static void py_unbind(void *state, void *user)
{
    struct py_op *op = state;
    op->rt->unbind(op->state);
    free(op);
}

static int py_map(struct sluice_element *e, const struct sluice_fn_args *a, void *user, char *err,
                  size_t errlen)
{
    struct py_op *op = user;
    return op->rt->map(op->state, e, a->ctx, err, errlen);
}

static int py_filter(const struct sluice_element *e, const struct sluice_fn_args *a, void *user,
                     int *keep, char *err, size_t errlen)
{
    struct py_op *op = user;
    return op->rt->filter(op->state, e, a->ctx, keep, err, errlen);
}

int pipe_py_register(struct sluice_registry *reg)
{
    struct pipe_fn def = {
        .name = "py",
        .kind = PIPE_FN_BOTH,
        .min_args = 1,
        .max_args = 1 + PIPE_PY_MAX_EXTRA,
        .map = py_map,
        .filter = py_filter,
        .check = py_check,
        .bind = py_bind,
        .unbind = py_unbind,
        .label_arg0 = true,
        .user = reg,
    };
    return pipe_registry_add(reg, &def);
}
