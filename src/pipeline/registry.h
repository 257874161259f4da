/* The function registry: named map and filter functions, built-in and from plugins.
 *
 * A registry is filled at startup (built-ins, then plugins) and read-only afterwards, so any
 * number of pipeline threads may look functions up and call them concurrently. The public
 * registration calls (sluice_register_map/filter in sluice.h) are the one way in, used by the
 * built-ins and by plugins alike. */
#ifndef SLUICE_PIPELINE_REGISTRY_H
#define SLUICE_PIPELINE_REGISTRY_H

#include "roots.h"
#include "sluice/sluice.h"
#include "spec.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* What a function may be used as: in map(), in filter(), or in both (py). */
enum pipe_fn_kind { PIPE_FN_MAP = 1, PIPE_FN_FILTER = 2, PIPE_FN_BOTH = 3 };

/* Validates a function's literal arguments once, when the pipeline is checked, so a value that
 * could never work (mod(0)) is rejected before anything runs. Returns 0, or a negative code with
 * a one-line reason in err (without the column or function name, which the caller adds). */
typedef int (*pipe_fn_check_cb)(const struct sluice_fn_args *args, char *err, size_t errlen);

/* Per-op state, for built-ins that prepare something once per op instead of once per element
 * (py imports its Python function). bind runs on the pipeline thread, before the op's first
 * element, with the op's arguments: it returns 0 and *state, which every call of that op then
 * gets as its user pointer in place of pipe_fn.user, or a negative code with a one-line reason
 * in err (the op fails as a call would). unbind frees the state when the op's iterator is
 * destroyed, on whichever thread destroys it. */
typedef int (*pipe_fn_bind_cb)(const struct sluice_fn_args *args, void *user, void **state,
                               char *err, size_t errlen);
typedef void (*pipe_fn_unbind_cb)(void *state, void *user);

/* The size (pipe_elem_size) of the element a map function will produce from in with args, when
 * it is known before the function runs; 0 when it is not. A map whose output would go past the
 * chain's --max-element-bytes is refused before the function allocates it (map.c). */
typedef uint64_t (*pipe_fn_size_cb)(const struct sluice_element *in,
                                    const struct sluice_fn_args *args);

struct pipe_fn {
    char name[64];
    enum pipe_fn_kind kind;
    int min_args, max_args;  /* max_args < 0: no upper bound */
    sluice_map_cb map;       /* set when kind has PIPE_FN_MAP */
    sluice_filter_cb filter; /* set when kind has PIPE_FN_FILTER */
    void *user;
    pipe_fn_check_cb check;   /* optional (NULL): the built-ins set one through the registry */
    pipe_fn_bind_cb bind;     /* optional, with unbind; built-ins only (pipe_registry_add) */
    pipe_fn_unbind_cb unbind; /* optional */
    pipe_fn_size_cb size;     /* optional: the built-ins set one through the registry */
    /* The first argument is part of the function's name (py's "module:function"): failures
     * read map(NAME, "ARG0"): ... instead of map(NAME): ... */
    bool label_arg0;
};

/* The argument list handed to functions: a view of a spec's literal arguments, and what the
 * map or filter iterator knows about the call (zero in argument checks). Plugins see only the
 * arguments, through the sluice_fn_arg_* calls; the built-ins that draw random numbers read the
 * rest through pipe_fn_seed() (map.h). */
struct sluice_fn_args {
    const struct pipe_value *v;
    size_t n;
    uint64_t index;   /* elements the iterator handed to the function before this one */
    uint64_t key;     /* the chain's random key: from the split, or drawn when the map opened */
    uint64_t salt;    /* the repeat() pass the chain runs in (0 for the first) */
    bool split_keyed; /* key derives from the split being processed (distributed_epoch) */
    /* The chain's context (iter.h) during a call, NULL in a check: a call that runs long asks
     * pipe_cancelled(ctx) (sluice_fn_cancelled) now and then and gives up once it is true. */
    const struct pipe_ctx *ctx;
};

/* Registers the function def describes (copied), with everything struct pipe_fn can say: used
 * by built-ins that the public calls cannot describe (py: both kinds, per-op state). Returns 0,
 * SLUICE_ERR_EXISTS, SLUICE_ERR_INVALID or SLUICE_ERR_NOMEM, as sluice_register_map. */
int pipe_registry_add(struct sluice_registry *reg, const struct pipe_fn *def);

/* The built-in functions of docs/design.md §3, defined in builtins.c (which reads the table of
 * each family: maps and filters there, example.h, image.h, jpeg.h, pyfn.h): registers every one
 * (and its argument check) through the public registration calls. Returns 0 or the first
 * registration error. Called by pipe_registry_new(); the registry includes none of them. */
int pipe_builtins_register(struct sluice_registry *reg);

/* Creates a registry holding the built-in functions of docs/design.md §3. Returns 0 or
 * SLUICE_ERR_NOMEM. The caller owns *out and frees it with pipe_registry_free(). */
int pipe_registry_new(struct sluice_registry **out);
void pipe_registry_free(struct sluice_registry *reg);

/* Loads a plugin shared object (dlopen) and calls its sluice_plugin_init. The library stays
 * loaded until the registry is freed. Returns 0, or SLUICE_ERR_PLUGIN with the reason in err
 * (a missing file, no sluice_plugin_init symbol, init failure, a name clash). */
int pipe_registry_load_plugin(struct sluice_registry *reg, const char *path, char *err,
                              size_t errlen);

/* Attaches an argument check to the registered function name (see pipe_fn_check_cb). Returns
 * 0, or SLUICE_ERR_NOT_FOUND when no function of that name is registered. Startup only. */
int pipe_registry_set_check(struct sluice_registry *reg, const char *name, pipe_fn_check_cb check);

/* Confines the pipelines run with reg, as a server confines its own (a local run's registry
 * stays unconfined): file sources read only within roots (copied; NULL or none: anywhere, see
 * roots.h), and py functions come only from modules found in one of the n py_dirs (each resolved
 * here, pipe_path_resolve; n == 0: no py function at all, see pyfn.h). Startup only, before any
 * pipeline runs with reg. Returns 0, SLUICE_ERR_NOMEM, or the negative errno of a directory that
 * cannot be resolved, with the reason in err. */
int pipe_registry_confine(struct sluice_registry *reg, const struct pipe_roots *roots,
                          const char *const *py_dirs, size_t n, char *err, size_t errlen);

/* The data roots of reg (pipe_roots_active() false when files are not confined). reg may be
 * NULL (a chain built without a registry): NULL. */
const struct pipe_roots *pipe_registry_roots(const struct sluice_registry *reg);

/* The resolved directories py modules must come from, or NULL when py functions are not
 * confined (also for reg NULL). */
const struct pipe_roots *pipe_registry_py_dirs(const struct sluice_registry *reg);
/* Attaches an output size to the registered map function name (see pipe_fn_size_cb). Returns 0,
 * or SLUICE_ERR_NOT_FOUND. Startup only. */
int pipe_registry_set_size(struct sluice_registry *reg, const char *name, pipe_fn_size_cb size);

/* Looks a function up by name; NULL when unknown. The pointer stays valid until the registry is
 * freed. */
const struct pipe_fn *pipe_registry_find(const struct sluice_registry *reg, const char *name);

/* Checks every map/filter in spec against the registry: the name exists, is of the right kind
 * (a filter function used in map() is an error), the argument count fits, and the function's
 * check, if any, accepts the arguments. On failure returns
 * SLUICE_ERR_PARSE with "column C: ..." in err. */
int pipe_registry_check(const struct sluice_registry *reg, const struct pipe_spec *spec, char *err,
                        size_t errlen);

#endif
