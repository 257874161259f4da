/* A pipeline run in the calling process: parse, check, open, pull. The run owns its registry
 * (with the plugins it was given), so it needs no client and no network. */
#include "local_run.h"

#include "common/error.h"
#include "pipeline/element.h"
#include "pipeline/open.h"
#include "pipeline/parse.h"
#include "pipeline/registry.h"

#include <stdlib.h>

struct sluice_local {
    struct sluice_registry *reg;
    struct pipe_run *run;
};

void sluice_local_close(struct sluice_local *l)
{
    if (!l)
        return;
    pipe_run_free(l->run);
    pipe_registry_free(l->reg);
    free(l);
}

int sluice_local_open(const char *pipeline, const char *const *plugins, size_t nplugins,
                      struct sluice_local **out, char *err, size_t errlen)
{
    if (out)
        *out = NULL;
    if (!pipeline || !out || (nplugins && !plugins))
        return err_set(err, errlen, SLUICE_ERR_INVALID, "pipeline and out are required");
    struct sluice_local *l = calloc(1, sizeof *l);
    if (!l)
        return err_set(err, errlen, SLUICE_ERR_NOMEM, "%s", sluice_strerror(SLUICE_ERR_NOMEM));
    struct pipe_spec *spec = NULL;
    int rc = pipe_registry_new(&l->reg);
    if (rc) {
        err_set(err, errlen, rc, "%s", sluice_strerror(rc));
        goto fail;
    }
    for (size_t i = 0; i < nplugins; i++) {
        rc = pipe_registry_load_plugin(l->reg, plugins[i], err, errlen);
        if (rc)
            goto fail;
    }
    rc = pipe_parse(pipeline, &spec, err, errlen);
    if (rc == 0)
        rc = pipe_registry_check(l->reg, spec, err, errlen);
    if (rc) {
        if (rc != SLUICE_ERR_NOMEM)
            rc = SLUICE_ERR_PARSE;
        goto fail;
    }
    rc = pipe_open(spec, l->reg, &l->run, err, errlen);
    if (rc)
        goto fail;
    pipe_spec_free(spec);
    *out = l;
    return 0;
fail:
    pipe_spec_free(spec);
    sluice_local_close(l);
    return rc;
}

int sluice_local_next(struct sluice_local *l, struct sluice_element *elem, char *err, size_t errlen)
{
    if (!l || !elem)
        return err_set(err, errlen, SLUICE_ERR_INVALID, "run and elem are required");
    int rc = pipe_run_next(l->run, elem);
    if (rc < 0)
        return err_set(err, errlen, rc, "%s",
                       l->run->ctx.err[0] ? l->run->ctx.err : sluice_strerror(rc));
    return rc;
}
