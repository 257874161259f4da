/* The function registry: built-ins and plugins register through the same public calls.
 *
 * Functions are allocated one by one so the pointers pipe_registry_find() hands out stay valid
 * while more are registered. A plugin that fails to load leaves no trace: whatever it
 * registered before failing is removed and the library is closed. */
#include "registry.h"

#include "common/error.h"
#include "iter.h"

#include <dlfcn.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct sluice_registry {
    struct pipe_fn **fns;
    size_t n, cap;
    void **libs; /* dlopen handles, closed in reverse order by pipe_registry_free() */
    size_t nlibs, libs_cap;
    /* While a plugin's init runs: the first registration it attempted that failed. */
    bool loading;
    int load_rc;
    char load_err[SLUICE_ERRMSG_SIZE];
    /* pipe_registry_confine: data roots (none: unconfined) and, when py_confined, the
     * directories py modules must come from. */
    struct pipe_roots roots;
    bool py_confined;
    struct pipe_roots py_dirs;
};

static bool valid_name(const char *name)
{
    size_t len = strlen(name);
    if (len == 0 || len > 63)
        return false;
    for (size_t i = 0; i < len; i++) {
        char c = name[i];
        bool alpha = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
        if (!alpha && !(i > 0 && c >= '0' && c <= '9'))
            return false;
    }
    return true;
}

static struct pipe_fn *find(const struct sluice_registry *reg, const char *name)
{
    for (size_t i = 0; i < reg->n; i++)
        if (strcmp(reg->fns[i]->name, name) == 0)
            return reg->fns[i];
    return NULL;
}

/* Records the first failed registration of a plugin being loaded, for its error message. */
static int reject(struct sluice_registry *reg, int rc, const char *name, const char *why)
{
    if (reg->loading && reg->load_rc == 0) {
        reg->load_rc = rc;
        snprintf(reg->load_err, sizeof(reg->load_err), "function '%.63s' %s", name, why);
    }
    return rc;
}

int pipe_registry_add(struct sluice_registry *reg, const struct pipe_fn *def)
{
    if (!reg || !def)
        return SLUICE_ERR_INVALID;
    const char *name = def->name;
    if (!valid_name(name))
        return reject(reg, SLUICE_ERR_INVALID, name, "has an invalid name");
    bool as_map = def->kind & PIPE_FN_MAP, as_filter = def->kind & PIPE_FN_FILTER;
    if ((!as_map && !as_filter) || (as_map && !def->map) || (as_filter && !def->filter) ||
        def->min_args < 0 || (def->max_args >= 0 && def->max_args < def->min_args) ||
        (def->unbind && !def->bind))
        return reject(reg, SLUICE_ERR_INVALID, name, "has an invalid definition");
    if (find(reg, name))
        return reject(reg, SLUICE_ERR_EXISTS, name, "is already registered");
    if (reg->n == reg->cap) {
        size_t cap = reg->cap ? reg->cap * 2 : 32;
        struct pipe_fn **fns = realloc(reg->fns, cap * sizeof(*fns));
        if (!fns)
            return reject(reg, SLUICE_ERR_NOMEM, name, "could not be stored");
        reg->fns = fns;
        reg->cap = cap;
    }
    struct pipe_fn *fn = malloc(sizeof(*fn));
    if (!fn)
        return reject(reg, SLUICE_ERR_NOMEM, name, "could not be stored");
    *fn = *def;
    reg->fns[reg->n++] = fn;
    return 0;
}

/* The public calls: a plain function of one kind. The name is checked before it is copied into
 * the definition, so an over-long one is refused rather than cut. */
static int add_fn(struct sluice_registry *reg, const char *name, enum pipe_fn_kind kind,
                  int min_args, int max_args, sluice_map_cb map, sluice_filter_cb filter,
                  void *user)
{
    if (!reg || !name)
        return SLUICE_ERR_INVALID;
    if (!valid_name(name))
        return reject(reg, SLUICE_ERR_INVALID, name, "has an invalid name");
    struct pipe_fn def = {.kind = kind,
                          .min_args = min_args,
                          .max_args = max_args,
                          .map = map,
                          .filter = filter,
                          .user = user};
    memcpy(def.name, name, strlen(name) + 1);
    return pipe_registry_add(reg, &def);
}

int sluice_register_map(struct sluice_registry *registry, const char *name, int min_args,
                        int max_args, sluice_map_cb fn, void *user)
{
    return add_fn(registry, name, PIPE_FN_MAP, min_args, max_args, fn, NULL, user);
}

int sluice_register_filter(struct sluice_registry *registry, const char *name, int min_args,
                           int max_args, sluice_filter_cb fn, void *user)
{
    return add_fn(registry, name, PIPE_FN_FILTER, min_args, max_args, NULL, fn, user);
}

int pipe_registry_set_check(struct sluice_registry *reg, const char *name, pipe_fn_check_cb check)
{
    struct pipe_fn *fn = find(reg, name);
    if (!fn)
        return SLUICE_ERR_NOT_FOUND;
    fn->check = check;
    return 0;
}

int pipe_registry_set_size(struct sluice_registry *reg, const char *name, pipe_fn_size_cb size)
{
    struct pipe_fn *fn = find(reg, name);
    if (!fn)
        return SLUICE_ERR_NOT_FOUND;
    fn->size = size;
    return 0;
}

const struct pipe_fn *pipe_registry_find(const struct sluice_registry *reg, const char *name)
{
    return find(reg, name);
}

/* Drops functions registered after the first keep ones (a failed plugin's). */
static void truncate_fns(struct sluice_registry *reg, size_t keep)
{
    while (reg->n > keep)
        free(reg->fns[--reg->n]);
}

int pipe_registry_new(struct sluice_registry **out)
{
    *out = NULL;
    struct sluice_registry *reg = calloc(1, sizeof(*reg));
    if (!reg)
        return SLUICE_ERR_NOMEM;
    int rc = pipe_builtins_register(reg);
    if (rc) {
        pipe_registry_free(reg);
        return rc;
    }
    *out = reg;
    return 0;
}

void pipe_registry_free(struct sluice_registry *reg)
{
    if (!reg)
        return;
    truncate_fns(reg, 0);
    free(reg->fns);
    while (reg->nlibs > 0)
        dlclose(reg->libs[--reg->nlibs]);
    free(reg->libs);
    pipe_roots_release(&reg->roots);
    pipe_roots_release(&reg->py_dirs);
    free(reg);
}

int pipe_registry_confine(struct sluice_registry *reg, const struct pipe_roots *roots,
                          const char *const *py_dirs, size_t n, char *err, size_t errlen)
{
    pipe_roots_release(&reg->roots);
    pipe_roots_release(&reg->py_dirs);
    reg->py_confined = true;
    int rc = pipe_roots_copy(&reg->roots, roots);
    if (rc < 0)
        return err_set(err, errlen, rc, "%s", sluice_strerror(rc));
    struct pipe_roots dirs = {0};
    if (n > 0 && !(dirs.dirs = calloc(n, sizeof(*dirs.dirs))))
        return err_set(err, errlen, SLUICE_ERR_NOMEM, "%s", sluice_strerror(SLUICE_ERR_NOMEM));
    for (size_t i = 0; i < n; i++) {
        char real[PATH_MAX];
        rc = pipe_path_resolve(py_dirs[i], real, sizeof real);
        if (rc == 0 && !(dirs.dirs[dirs.n] = strdup(real)))
            rc = SLUICE_ERR_NOMEM;
        if (rc < 0) {
            pipe_roots_release(&dirs);
            return err_set(err, errlen, rc, "python_path %s: %s", py_dirs[i], sluice_strerror(rc));
        }
        dirs.n++;
    }
    reg->py_dirs = dirs;
    return 0;
}

const struct pipe_roots *pipe_registry_roots(const struct sluice_registry *reg)
{
    return reg ? &reg->roots : NULL;
}

const struct pipe_roots *pipe_registry_py_dirs(const struct sluice_registry *reg)
{
    return reg && reg->py_confined ? &reg->py_dirs : NULL;
}

typedef int (*plugin_init_fn)(struct sluice_registry *registry);

/* A plugin is linked against nothing: it resolves the sluice_* calls it makes in the global
 * scope of the process. A program linking libsluice has them there (libsluice.so is loaded with
 * the program, and a program linking libsluice.a exports them with --export-dynamic). A library
 * that was itself loaded with dlopen(RTLD_LOCAL), with libsluice.so among its dependencies or
 * libsluice.a inside it, keeps them out of that scope: the Python extension (CPython loads
 * extension modules RTLD_LOCAL), or libsluice.so opened by ctypes or another language's loader.
 * So before a plugin is loaded, the object holding this code, found by the address of one of its
 * own variables, is opened again with RTLD_NOLOAD | RTLD_GLOBAL: that loads nothing and only
 * adds the object already loaded to the global scope, where its public API (all it exports) then
 * serves every plugin. The handle is kept: the object stays loaded while this code runs anyway.
 * In a program (the object is the executable) the call finds nothing and changes nothing. */
static const char api_anchor = 0;

static void export_api(void)
{
    Dl_info info;
    if (dladdr(&api_anchor, &info) == 0 || !info.dli_fname || info.dli_fname[0] == '\0')
        return;
    (void)dlopen(info.dli_fname, RTLD_NOW | RTLD_NOLOAD | RTLD_GLOBAL);
    dlerror(); /* a failure (the executable) leaves nothing to report */
}

int pipe_registry_load_plugin(struct sluice_registry *reg, const char *path, char *err,
                              size_t errlen)
{
    if (reg->nlibs == reg->libs_cap) {
        size_t cap = reg->libs_cap ? reg->libs_cap * 2 : 4;
        void **libs = realloc(reg->libs, cap * sizeof(*libs));
        if (!libs)
            return err_set(err, errlen, SLUICE_ERR_PLUGIN, "plugin %s: out of memory", path);
        reg->libs = libs;
        reg->libs_cap = cap;
    }
    export_api();
    dlerror();
    void *lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        const char *why = dlerror();
        return err_set(err, errlen, SLUICE_ERR_PLUGIN, "cannot load plugin: %s", why ? why : path);
    }
    dlerror();
    void *sym = dlsym(lib, "sluice_plugin_init");
    if (!sym) {
        dlclose(lib);
        return err_set(err, errlen, SLUICE_ERR_PLUGIN, "plugin %s: no sluice_plugin_init function",
                       path);
    }
    plugin_init_fn init = (plugin_init_fn)sym;

    size_t keep = reg->n;
    reg->loading = true;
    reg->load_rc = 0;
    reg->load_err[0] = '\0';
    int rc = init(reg);
    reg->loading = false;
    if (rc != 0 || reg->load_rc != 0) {
        truncate_fns(reg, keep);
        dlclose(lib);
        if (reg->load_rc != 0)
            return err_set(err, errlen, SLUICE_ERR_PLUGIN, "plugin %s: %s", path, reg->load_err);
        return err_set(err, errlen, SLUICE_ERR_PLUGIN, "plugin %s: sluice_plugin_init failed: %s",
                       path, sluice_strerror(rc));
    }
    reg->libs[reg->nlibs++] = lib;
    return 0;
}

/* ---- Checking a spec --------------------------------------------------------------------- */

static const char *kind_name(enum pipe_fn_kind kind)
{
    return kind == PIPE_FN_MAP ? "map" : "filter";
}

/* "takes 1 argument", "takes no arguments", "takes 1 to 3 arguments", "takes at least 2". */
static void describe_arity(const struct pipe_fn *fn, char *buf, size_t len)
{
    int lo = fn->min_args, hi = fn->max_args;
    if (hi < 0)
        snprintf(buf, len, "takes at least %d argument%s", lo, lo == 1 ? "" : "s");
    else if (lo == hi && lo == 0)
        snprintf(buf, len, "takes no arguments");
    else if (lo == hi)
        snprintf(buf, len, "takes %d argument%s", lo, lo == 1 ? "" : "s");
    else
        snprintf(buf, len, "takes %d to %d arguments", lo, hi);
}

int pipe_registry_check(const struct sluice_registry *reg, const struct pipe_spec *spec, char *err,
                        size_t errlen)
{
    for (size_t i = 0; i < spec->nops; i++) {
        const struct pipe_op *op = &spec->ops[i];
        if (op->kind != PIPE_OP_MAP && op->kind != PIPE_OP_FILTER)
            continue;
        enum pipe_fn_kind want = op->kind == PIPE_OP_MAP ? PIPE_FN_MAP : PIPE_FN_FILTER;
        const char *name = op->fn ? op->fn : "";
        const struct pipe_fn *fn = find(reg, name);
        if (!fn)
            return err_set(err, errlen, SLUICE_ERR_PARSE, "column %d: unknown function '%s'",
                           op->column, name);
        if (!(fn->kind & want))
            return err_set(err, errlen, SLUICE_ERR_PARSE,
                           "column %d: '%s' is a %s function, not a %s function", op->column, name,
                           kind_name(fn->kind), kind_name(want));
        size_t n = op->nargs;
        if (n < (size_t)fn->min_args || (fn->max_args >= 0 && n > (size_t)fn->max_args)) {
            char arity[64];
            describe_arity(fn, arity, sizeof(arity));
            return err_set(err, errlen, SLUICE_ERR_PARSE, "column %d: %s(%s) %s, got %zu",
                           op->column, kind_name(want), name, arity, n);
        }
        if (fn->check) {
            struct sluice_fn_args args = {op->args, op->nargs};
            char why[SLUICE_ERRMSG_SIZE] = "";
            int rc = fn->check(&args, why, sizeof(why));
            if (rc)
                return err_set(err, errlen, SLUICE_ERR_PARSE, "column %d: %s(%s): %s", op->column,
                               kind_name(want), name, why[0] ? why : sluice_strerror(rc));
        }
    }
    return 0;
}

/* ---- Function arguments ------------------------------------------------------------------ */

int sluice_fn_cancelled(const struct sluice_fn_args *args)
{
    return args->ctx != NULL && pipe_cancelled(args->ctx);
}

size_t sluice_fn_args_count(const struct sluice_fn_args *args)
{
    return args->n;
}

int sluice_fn_arg_int(const struct sluice_fn_args *args, size_t k, int64_t *out)
{
    if (k >= args->n)
        return SLUICE_ERR_INVALID;
    if (args->v[k].kind != PIPE_VAL_INT)
        return SLUICE_ERR_TYPE;
    *out = args->v[k].i;
    return 0;
}

int sluice_fn_arg_float(const struct sluice_fn_args *args, size_t k, double *out)
{
    if (k >= args->n)
        return SLUICE_ERR_INVALID;
    if (args->v[k].kind == PIPE_VAL_FLOAT)
        *out = args->v[k].f;
    else if (args->v[k].kind == PIPE_VAL_INT)
        *out = (double)args->v[k].i;
    else
        return SLUICE_ERR_TYPE;
    return 0;
}

int sluice_fn_arg_string(const struct sluice_fn_args *args, size_t k, const char **out, size_t *len)
{
    if (k >= args->n)
        return SLUICE_ERR_INVALID;
    if (args->v[k].kind != PIPE_VAL_BYTES)
        return SLUICE_ERR_TYPE;
    *out = args->v[k].s ? args->v[k].s : "";
    if (len)
        *len = args->v[k].slen;
    return 0;
}
