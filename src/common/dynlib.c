#include "dynlib.h"

#include "common/error.h"

#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

int dynlib_open(const char *soname, const char *what, const struct dynlib_fn *fns, size_t n,
                void *table, char *err, size_t errlen)
{
    void *lib = dlopen(soname, RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        const char *why = dlerror();
        return err_set(err, errlen, SLUICE_ERR_UNSUPPORTED,
                       "%s need %s, which cannot be loaded: %s", what, soname,
                       why ? why : "unknown error");
    }
    for (size_t i = 0; i < n; i++) {
        void *f = dlsym(lib, fns[i].name);
        if (!f)
            return err_set(err, errlen, SLUICE_ERR_UNSUPPORTED, "%s need %s, which has no %s", what,
                           soname, fns[i].name);
        memcpy((char *)table + fns[i].offset, &f, sizeof f);
    }
    return 0;
}

int dynlib_load(struct dynlib *d, char *err, size_t errlen)
{
    pthread_mutex_lock(&d->mu);
    if (!d->tried) {
        d->rc = dynlib_open(d->soname, d->what, d->fns, d->n, d->table, d->err, sizeof d->err);
        d->tried = true;
    }
    int rc = d->rc;
    if (rc && err && errlen)
        snprintf(err, errlen, "%s", d->err);
    pthread_mutex_unlock(&d->mu);
    return rc;
}
