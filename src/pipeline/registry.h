/* The function registry: named map and filter functions, built-in and from plugins.
 *
 * A registry is filled at startup (built-ins, then plugins) and read-only afterwards, so any
 * number of pipeline threads may look functions up and call them concurrently. The public
 * registration calls (sluice_register_map/filter in sluice.h) are the one way in, used by the
 * built-ins and by plugins alike. */
#ifndef SLUICE_PIPELINE_REGISTRY_H
#define SLUICE_PIPELINE_REGISTRY_H

#include "sluice/sluice.h"
#include "spec.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum pipe_fn_kind { PIPE_FN_MAP, PIPE_FN_FILTER };

/* Validates a function's literal arguments once, when the pipeline is checked, so a value that
 * could never work (mod(0)) is rejected before anything runs. Returns 0, or a negative code with
 * a one-line reason in err (without the column or function name, which the caller adds). */
typedef int (*pipe_fn_check_cb)(const struct sluice_fn_args *args, char *err, size_t errlen);

struct pipe_fn {
    char name[64];
    enum pipe_fn_kind kind;
    int min_args, max_args; /* max_args < 0: no upper bound */
    sluice_map_cb map;
    sluice_filter_cb filter;
    void *user;
    pipe_fn_check_cb check; /* optional (NULL): the built-ins set one through the registry */
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
};

/* Creates a registry holding the built-in functions of DESIGN.md §3. Returns 0 or
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

/* Looks a function up by name; NULL when unknown. The pointer stays valid until the registry is
 * freed. */
const struct pipe_fn *pipe_registry_find(const struct sluice_registry *reg, const char *name);

/* Checks every map/filter in spec against the registry: the name exists, is of the right kind
 * (a filter function used in map() is an error), and the argument count fits. On failure returns
 * SLUICE_ERR_PARSE with "column C: ..." in err. */
int pipe_registry_check(const struct sluice_registry *reg, const struct pipe_spec *spec, char *err,
                        size_t errlen);

#endif
