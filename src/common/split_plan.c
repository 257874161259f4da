/* Split plans: the arithmetic of a split sequence (see split_plan.h). */
#include "split_plan.h"

#include "error.h"
#include "fnv.h"
#include "perm.h"

#include <assert.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

uint64_t split_per_pass(uint64_t source_len, uint64_t split_size)
{
    assert(split_size > 0);
    return source_len / split_size + (source_len % split_size != 0);
}

uint64_t split_plan_total(const struct split_plan *p)
{
    if (p->per_pass == 0 || p->passes == 0)
        return 0;
    if (p->passes == UINT64_MAX || p->passes > UINT64_MAX / p->per_pass)
        return UINT64_MAX;
    return p->per_pass * p->passes;
}

int split_plan_at(const struct split_plan *p, uint64_t seq, struct split *out)
{
    if (p->per_pass == 0)
        return 0;
    uint64_t repetition = seq / p->per_pass;
    uint64_t k = seq % p->per_pass;
    if (p->passes != UINT64_MAX && repetition >= p->passes)
        return 0;
    assert(p->kind == SPLIT_RANGES || p->kind == SPLIT_FILES);
    out->seq = seq;
    out->repetition = repetition;
    out->begin = out->end = 0;
    out->index = k;
    out->path[0] = '\0';
    if (p->kind == SPLIT_RANGES) {
        /* k < per_pass, so k * split_size < source_len: no overflow, and end stays in range. */
        out->begin = k * p->split_size;
        out->end =
            p->source_len - out->begin > p->split_size ? out->begin + p->split_size : p->source_len;
    } else {
        out->index = split_file_index(p->shuffled, p->seed, p->npaths, repetition, k);
        assert(out->index < p->npaths);
        snprintf(out->path, sizeof out->path, "%s", p->paths[out->index]);
    }
    return 1;
}

uint64_t split_file_index(bool shuffled, int64_t seed, uint64_t nfiles, uint64_t r, uint64_t k)
{
    if (!shuffled)
        return k;
    struct perm perm;
    perm_init(&perm, perm_key(seed, r, 0), nfiles);
    return perm_apply(&perm, k);
}

int split_plan_check(const struct split_plan *p, char *err, size_t errlen)
{
    if (p->per_pass == 0) {
        if (p->passes == 0 || p->source_len == 0)
            return 0; /* an empty sequence: nothing will be leased */
        return err_set(err, errlen, SLUICE_ERR_CORRUPT, "split plan has no splits per pass");
    }
    switch (p->kind) {
    case SPLIT_RANGES: {
        if (p->split_size == 0)
            return err_set(err, errlen, SLUICE_ERR_CORRUPT, "split plan has split size 0");
        uint64_t want = split_per_pass(p->source_len, p->split_size);
        if (want != p->per_pass)
            return err_set(err, errlen, SLUICE_ERR_CORRUPT,
                           "split plan has %" PRIu64 " splits per pass, but %" PRIu64
                           " elements in splits of %" PRIu64 " make %" PRIu64,
                           p->per_pass, p->source_len, p->split_size, want);
        return 0;
    }
    case SPLIT_FILES:
        if (p->npaths != p->per_pass)
            return err_set(err, errlen, SLUICE_ERR_CORRUPT,
                           "split plan has %" PRIu64 " splits per pass but %zu files", p->per_pass,
                           p->npaths);
        for (size_t i = 0; i < p->npaths; i++) {
            size_t n = strlen(p->paths[i]);
            if (n == 0 || n >= SPLIT_PATH_MAX)
                return err_set(err, errlen, SLUICE_ERR_CORRUPT,
                               "split plan has a file name of %zu bytes", n);
        }
        return 0;
    case SPLIT_UNSET:
        break;
    }
    return err_set(err, errlen, SLUICE_ERR_CORRUPT, "unknown source kind %d", (int)p->kind);
}

int split_plan_copy(struct split_plan *dst, const struct split_plan *src)
{
    *dst = *src;
    dst->paths = NULL;
    dst->npaths = 0;
    if (src->npaths == 0)
        return 0;
    dst->paths = calloc(src->npaths, sizeof *dst->paths);
    if (!dst->paths)
        goto fail;
    for (size_t i = 0; i < src->npaths; i++) {
        dst->paths[i] = strdup(src->paths[i]);
        if (!dst->paths[i]) {
            dst->npaths = i;
            goto fail;
        }
    }
    dst->npaths = src->npaths;
    return 0;
fail:
    split_plan_release(dst);
    return SLUICE_ERR_NOMEM;
}

void split_plan_release(struct split_plan *p)
{
    for (size_t i = 0; i < p->npaths; i++)
        free(p->paths[i]);
    free(p->paths);
    memset(p, 0, sizeof *p);
}

uint64_t split_plan_fingerprint(const struct split_plan *p)
{
    uint64_t h = FNV1A_OFFSET;
    h = fnv1a_u64(h, p->source_len);
    h = fnv1a_u64(h, p->split_size);
    h = fnv1a_u64(h, p->per_pass);
    h = fnv1a_u64(h, p->passes);
    h = fnv1a_u64(h, p->npaths);
    for (size_t i = 0; i < p->npaths; i++)
        h = fnv1a_str(h, p->paths[i]);
    return h;
}
