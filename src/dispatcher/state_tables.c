/* The dispatcher state's building blocks (pure): sorted sequence-number lists, update lists, and
 * the id tables, arrays of rows sorted by id, with the datasets by id and the workers by address.
 */
#include "state_internal.h"

#include <string.h>

/* Every table but the datasets is an array of rows that begin with their uint64_t id. */
_Static_assert(offsetof(struct st_job, id) == 0, "row id first");
_Static_assert(offsetof(struct st_iteration, id) == 0, "row id first");
_Static_assert(offsetof(struct st_task, id) == 0, "row id first");
_Static_assert(offsetof(struct st_worker, id) == 0, "row id first");
_Static_assert(offsetof(struct st_client, id) == 0, "row id first");
_Static_assert(offsetof(struct st_save, id) == 0, "row id first");

int state_grow(void **v, size_t *cap, size_t need, size_t size)
{
    if (need <= *cap)
        return 0;
    size_t c = *cap ? *cap : 8;
    while (c < need)
        c *= 2;
    void *p = realloc(*v, c * size);
    if (!p)
        return SLUICE_ERR_NOMEM;
    *v = p;
    *cap = c;
    return 0;
}

/* ---- sequence lists -------------------------------------------------------------------------- */

void state_seq_release(struct st_seq_list *l)
{
    free(l->v);
    l->v = NULL;
    l->n = l->cap = 0;
}

int state_seq_reserve(struct st_seq_list *l, size_t extra)
{
    return state_grow((void **)&l->v, &l->cap, l->n + extra, sizeof *l->v);
}

/* Index of the first entry >= v. */
static size_t seq_lower(const struct st_seq_list *l, uint64_t v)
{
    size_t lo = 0, hi = l->n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (l->v[mid] < v)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

bool state_seq_contains(const struct st_seq_list *l, uint64_t v)
{
    size_t i = seq_lower(l, v);
    return i < l->n && l->v[i] == v;
}

/* Inserts v (absent) keeping the list sorted; capacity must be reserved. */
void state_seq_insert(struct st_seq_list *l, uint64_t v)
{
    size_t i = seq_lower(l, v);
    memmove(l->v + i + 1, l->v + i, (l->n - i) * sizeof *l->v);
    l->v[i] = v;
    l->n++;
}

/* Removes v, which must be present. */
void state_seq_remove(struct st_seq_list *l, uint64_t v)
{
    size_t i = seq_lower(l, v);
    memmove(l->v + i, l->v + i + 1, (l->n - i - 1) * sizeof *l->v);
    l->n--;
}

int state_seq_assign(struct st_seq_list *dst, const uint64_t *v, size_t n)
{
    dst->n = 0;
    if (n == 0)
        return 0;
    int rc = state_seq_reserve(dst, n);
    if (rc < 0)
        return rc;
    memcpy(dst->v, v, n * sizeof *v);
    dst->n = n;
    return 0;
}

bool state_seq_strictly_increasing(const struct st_seq_list *l)
{
    for (size_t i = 1; i < l->n; i++) {
        if (l->v[i] <= l->v[i - 1])
            return false;
    }
    return true;
}

/* ---- update lists ---------------------------------------------------------------------------- */

void st_update_release(struct st_update *u)
{
    free(u->def);
    free(u->text);
    free(u->weights);
    free(u->labels);
    free(u->selector);
    u->labels = NULL;
    u->selector = NULL;
    u->weights = NULL;
    u->nweights = 0;
    split_plan_release(&u->plan);
    state_seq_release(&u->seqs);
    u->def = NULL;
    u->def_len = 0;
    u->text = NULL;
}

struct st_update *st_update_list_push(struct st_update_list *l, enum st_update_type type)
{
    if (state_grow((void **)&l->v, &l->cap, l->n + 1, sizeof *l->v) < 0)
        return NULL;
    struct st_update *u = &l->v[l->n++];
    memset(u, 0, sizeof *u);
    u->type = type;
    return u;
}

void st_update_list_clear(struct st_update_list *l)
{
    for (size_t i = 0; i < l->n; i++)
        st_update_release(&l->v[i]);
    l->n = 0;
}

void st_update_list_release(struct st_update_list *l)
{
    st_update_list_clear(l);
    free(l->v);
    l->v = NULL;
    l->cap = 0;
}

void state_list_truncate(struct st_update_list *l, size_t start)
{
    while (l->n > start)
        st_update_release(&l->v[--l->n]);
}

/* ---- id tables ------------------------------------------------------------------------------- */

static uint64_t row_id(const void *base, size_t i, size_t size)
{
    uint64_t id;
    memcpy(&id, (const char *)base + i * size, sizeof id);
    return id;
}

/* Index of the first row whose id is >= id. */
/* The first row whose id is not below id. Ids are increasing integers, and mostly dense (a
 * table's rows are added in id order and removed in bulk), so the search starts where id would
 * be if they were dense: the row found there bounds the range left by the distance between the
 * ids, which is a handful of rows, or none, instead of a binary search over the whole table
 * (tens of thousands of tasks, each step a cache miss). */
static size_t row_lower(const void *base, size_t n, size_t size, uint64_t id)
{
    if (n == 0)
        return 0;
    uint64_t first = row_id(base, 0, size), last = row_id(base, n - 1, size);
    if (id <= first)
        return 0;
    if (id > last)
        return n;
    size_t lo = 0, hi = n;
    size_t guess = (size_t)((double)(id - first) / (double)(last - first) * (double)(n - 1));
    if (guess >= n)
        guess = n - 1;
    uint64_t at = row_id(base, guess, size);
    if (at == id)
        return guess;
    if (at < id) {
        /* Each row after guess adds at least 1 to the id. */
        lo = guess + 1;
        if (id - at < n - guess)
            hi = guess + (size_t)(id - at);
    } else {
        hi = guess;
        if (at - id <= guess)
            lo = guess - (size_t)(at - id);
    }
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (row_id(base, mid, size) < id)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

void *state_row_find(const void *base, size_t n, size_t size, uint64_t id)
{
    size_t i = row_lower(base, n, size, id);
    if (i < n && row_id(base, i, size) == id)
        return (char *)base + i * size;
    return NULL;
}

/* Opens a zeroed row for id (absent) at its sorted place; capacity must be reserved. */
void *state_row_insert(void *base, size_t *n, size_t size, uint64_t id)
{
    size_t i = row_lower(base, *n, size, id);
    char *at = (char *)base + i * size;
    memmove(at + size, at, (*n - i) * size);
    memset(at, 0, size);
    memcpy(at, &id, sizeof id);
    (*n)++;
    return at;
}

void state_row_erase(void *base, size_t *n, size_t size, void *row)
{
    size_t i = (size_t)((char *)row - (char *)base) / size;
    memmove(row, (char *)row + size, (*n - i - 1) * size);
    (*n)--;
}

size_t state_dataset_lower(const struct state *s, const char *id)
{
    size_t lo = 0, hi = s->ndatasets;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (strcmp(s->datasets[mid].id, id) < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

/* The index in s->by_address of the first worker whose address is not below address. */
size_t state_address_lower(const struct state *s, const char *address)
{
    size_t lo = 0, hi = s->nby_address;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        const struct st_worker *w = state_worker(s, s->by_address[mid]);
        if (strcmp(w->address, address) < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}
