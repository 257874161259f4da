#include "autoscale_pools.h"

#include "common/error.h"

#include <stdlib.h>
#include <string.h>

void autoscale_pool_of(const char *labels, const char *key, char out[LABEL_VALUE_MAX + 1])
{
    const char *v;
    size_t n;
    if (labels && labels_get(labels, key, &v, &n)) {
        n = n < LABEL_VALUE_MAX ? n : LABEL_VALUE_MAX;
        memcpy(out, v, n);
        out[n] = '\0';
    } else {
        out[0] = '\0';
    }
}

/* The index of the pool named name in pools[0..*n), kept sorted by name; added when missing and
 * there is room. -1 when missing and full. */
static long pool_add(struct autoscale_pool *pools, size_t *n, size_t max, const char *name)
{
    size_t lo = 0, hi = *n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int c = strcmp(pools[mid].name, name);
        if (c == 0)
            return (long)mid;
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    if (*n == max)
        return -1;
    memmove(&pools[lo + 1], &pools[lo], (*n - lo) * sizeof *pools);
    memset(&pools[lo], 0, sizeof pools[lo]);
    size_t len = strlen(name);
    len = len < LABEL_VALUE_MAX ? len : LABEL_VALUE_MAX;
    memcpy(pools[lo].name, name, len);
    (*n)++;
    return (long)lo;
}

/* A client's placement: its parsed selector (any: none) and how many workers in pools it
 * matches. Clients with the same selector text share the first one's (rep): a cluster's
 * clients mostly have one of a few selectors, and matching each against every worker would
 * cost clients x workers (500 x 5,000 every window). */
struct client_place {
    size_t rep; /* the first client with the same selector text: its fields below serve */
    bool any;
    struct selector sel;
    size_t matched;
    size_t here;  /* of the pool in hand, the workers it matches (reps only) */
    size_t named; /* pools its selector names for the key, that exist (every client) */
};

static const char *selector_text(const struct autoscale_pools_input *in, size_t c)
{
    const char *t = in->clients[c].selector;
    return t ? t : "";
}

/* Orders client indexes by selector text, then by index: the first of each run is its rep. */
static int cmp_by_selector(const void *a, const void *b, void *arg)
{
    const struct autoscale_pools_input *in = arg;
    size_t x = *(const size_t *)a, y = *(const size_t *)b;
    int c = strcmp(selector_text(in, x), selector_text(in, y));
    return c ? c : (x > y) - (x < y);
}

/* Whether sel names pool for key (key=pool, key==pool, key in (..., pool, ...)). */
static bool names_pool(const struct selector *sel, const char *key, const char *pool)
{
    for (size_t i = 0; i < sel->n; i++) {
        const struct selector_req *r = &sel->req[i];
        if ((r->op != SELECTOR_EQ && r->op != SELECTOR_IN) || strcmp(sel->buf + r->key, key) != 0)
            continue;
        for (size_t k = 0; k < r->nvalues; k++)
            if (strcmp(sel->buf + r->values[k], pool) == 0)
                return true;
    }
    return false;
}

/* The values sel names for key, added as pools (no worker yet). */
static void add_named_pools(const struct selector *sel, const char *key,
                            struct autoscale_pool *pools, size_t *n, size_t max)
{
    for (size_t i = 0; i < sel->n; i++) {
        const struct selector_req *r = &sel->req[i];
        if ((r->op != SELECTOR_EQ && r->op != SELECTOR_IN) || strcmp(sel->buf + r->key, key) != 0)
            continue;
        for (size_t k = 0; k < r->nvalues; k++)
            pool_add(pools, n, max, sel->buf + r->values[k]);
    }
}

static bool matches(const struct client_place *cp, const char *labels)
{
    return cp->any || selector_matches(&cp->sel, labels ? labels : "");
}

static uint32_t previous_of(const struct autoscale_pools_input *in, const char *name)
{
    for (size_t i = 0; i < in->nprevious; i++)
        if (in->previous[i].name && strcmp(in->previous[i].name, name) == 0)
            return in->previous[i].workers;
    return 0;
}

int autoscale_pools_recommend(const struct autoscale_params *params,
                              const struct autoscale_pools_input *in, struct autoscale_pool *out,
                              size_t max, size_t *nout)
{
    const char *key = in->key && in->key[0] ? in->key : "pool";
    *nout = 0;
    size_t nw = in->nworkers, nc = in->nclients;
    struct client_place *cps = calloc(nc ? nc : 1, sizeof *cps);
    struct autoscale_worker *ws = malloc((nw ? nw : 1) * sizeof *ws);
    struct autoscale_client *cs = malloc((nc ? nc : 1) * sizeof *cs);
    char(*wpool)[LABEL_VALUE_MAX + 1] = malloc((nw ? nw : 1) * sizeof *wpool);
    size_t *order = malloc((nc ? nc : 1) * sizeof *order);
    if (!cps || !ws || !cs || !wpool || !order) {
        free(cps);
        free(ws);
        free(cs);
        free(wpool);
        free(order);
        return SLUICE_ERR_NOMEM;
    }
    size_t n = 0;
    /* The workers' pools. */
    for (size_t i = 0; i < nw; i++) {
        const struct autoscale_pool_worker *w = &in->workers[i];
        autoscale_pool_of(w->labels, key, wpool[i]);
        if (!w->draining)
            pool_add(out, &n, max, wpool[i]);
    }
    /* Each client's rep: the first client with its selector text. */
    for (size_t c = 0; c < nc; c++)
        order[c] = c;
    qsort_r(order, nc, sizeof *order, cmp_by_selector, (void *)in);
    for (size_t k = 0; k < nc; k++) {
        bool same =
            k > 0 && strcmp(selector_text(in, order[k]), selector_text(in, order[k - 1])) == 0;
        cps[order[k]].rep = same ? cps[order[k - 1]].rep : order[k];
    }
    free(order);
    /* What each selector matches; the pools named by those that match no worker. */
    bool homeless = false;
    for (size_t c = 0; c < nc; c++) {
        struct client_place *cp = &cps[c];
        if (cp->rep != c)
            continue;
        const char *text = selector_text(in, c);
        char err[128];
        cp->any = !text[0] || selector_parse(text, &cp->sel, err, sizeof err) < 0;
        for (size_t i = 0; i < nw; i++)
            cp->matched += !in->workers[i].draining && matches(cp, in->workers[i].labels);
        if (cp->matched == 0 && !cp->any)
            add_named_pools(&cp->sel, key, out, &n, max);
    }
    for (size_t c = 0; c < nc; c++) {
        const struct client_place *r = &cps[cps[c].rep];
        if (r->matched || r->any)
            continue;
        for (size_t p = 0; p < n; p++)
            cps[c].named += names_pool(&r->sel, key, out[p].name);
        homeless |= cps[c].named == 0;
    }
    for (size_t c = 0; c < nc && n == 0; c++)
        homeless |= cps[cps[c].rep].matched == 0;
    if (homeless && n == 0)
        pool_add(out, &n, max, "");

    for (size_t p = 0; p < n; p++) {
        struct autoscale_pool *pool = &out[p];
        struct autoscale_input ai = {.workers = ws, .clients = cs};
        for (size_t i = 0; i < nw; i++) {
            const struct autoscale_pool_worker *w = &in->workers[i];
            if (w->draining || strcmp(wpool[i], pool->name) != 0)
                continue;
            pool->current++;
            if (w->measured)
                ws[ai.nworkers++] = (struct autoscale_worker){&w->rate, 1, w->idle};
        }
        for (size_t c = 0; c < nc; c++) {
            struct client_place *cp = &cps[c];
            if (cp->rep != c || !cp->matched)
                continue;
            cp->here = 0;
            for (size_t i = 0; i < nw; i++)
                cp->here += !in->workers[i].draining && strcmp(wpool[i], pool->name) == 0 &&
                            matches(cp, in->workers[i].labels);
        }
        for (size_t c = 0; c < nc; c++) {
            const struct client_place *cp = &cps[c], *r = &cps[cp->rep];
            double share = 0;
            if (r->matched) {
                share = (double)r->here / (double)r->matched;
            } else if (cp->named) {
                share = names_pool(&r->sel, key, pool->name) ? 1.0 / (double)cp->named : 0;
            } else {
                share = 1.0 / (double)n;
            }
            if (share <= 0)
                continue;
            pool->clients += share;
            const struct autoscale_pool_client *cl = &in->clients[c];
            if (cl->measured)
                cs[ai.nclients++] = (struct autoscale_client){cl->rate * share, cl->wait};
        }
        ai.current = pool->current;
        ai.previous = previous_of(in, pool->name);
        ai.no_consumers = pool->clients == 0;
        pool->recommended = autoscale_recommend(params, &ai, &pool->decision);
    }
    *nout = n;
    free(cps);
    free(ws);
    free(cs);
    free(wpool);
    return 0;
}
