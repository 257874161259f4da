#include "rounds.h"

#include "common/error.h"

#include <assert.h>
#include <stdlib.h>
#include <string.h>

static void set_clear(struct rounds_set *s, uint32_t filled)
{
    for (uint32_t i = 0; i < filled; i++) {
        free(s->rec[i]);
        s->rec[i] = NULL;
        s->len[i] = 0;
    }
}

static void set_free(struct rounds_set *s, uint32_t filled)
{
    if (s->rec)
        set_clear(s, filled);
    free(s->rec);
    free(s->len);
    s->rec = NULL;
    s->len = NULL;
}

static int set_init(struct rounds_set *s, uint32_t n)
{
    s->rec = calloc(n, sizeof *s->rec);
    s->len = calloc(n, sizeof *s->len);
    return s->rec && s->len ? 0 : SLUICE_ERR_NOMEM;
}

void rounds_free(struct rounds *r)
{
    if (r->n == 0)
        return;
    /* Entries not holding an element are NULL. */
    for (unsigned k = 0; k < ROUNDS_KEPT; k++)
        set_free(&r->kept[k], r->n);
    set_free(&r->stage, r->n);
    memset(r, 0, sizeof *r);
}

int rounds_init(struct rounds *r, uint32_t n)
{
    memset(r, 0, sizeof *r);
    if (n == 0)
        return 0;
    if (n > ROUNDS_MAX_CONSUMERS)
        return SLUICE_ERR_INVALID;
    r->n = n;
    int rc = set_init(&r->stage, n);
    for (unsigned k = 0; rc == 0 && k < ROUNDS_KEPT; k++)
        rc = set_init(&r->kept[k], n);
    if (rc < 0)
        rounds_free(r);
    return rc;
}

enum rounds_lookup rounds_lookup(const struct rounds *r, uint32_t c, uint64_t round,
                                 const uint8_t **rec, size_t *len)
{
    assert(c < r->n);
    *rec = NULL;
    *len = 0;
    if (r->nkept == 0)
        return ROUNDS_WAITING;
    for (unsigned i = 0; i < r->nkept; i++) {
        const struct rounds_set *s = &r->kept[(r->head + i) % ROUNDS_KEPT];
        if (s->round == round) {
            *rec = s->rec[c];
            *len = s->len[c];
            return ROUNDS_READY;
        }
    }
    uint64_t last = r->kept[(r->head + r->nkept - 1) % ROUNDS_KEPT].round;
    return round < last ? ROUNDS_GONE : ROUNDS_WAITING;
}

bool rounds_stage_full(const struct rounds *r)
{
    return r->n > 0 && r->staged == r->n;
}

void rounds_stage(struct rounds *r, uint8_t *rec, size_t len)
{
    assert(r->staged < r->n);
    r->stage.rec[r->staged] = rec;
    r->stage.len[r->staged] = len;
    r->staged++;
}

void rounds_commit(struct rounds *r, uint64_t round)
{
    assert(rounds_stage_full(r));
    assert(r->nkept == 0 || r->kept[(r->head + r->nkept - 1) % ROUNDS_KEPT].round < round);
    unsigned at;
    if (r->nkept == ROUNDS_KEPT) {
        at = r->head;
        set_clear(&r->kept[at], r->n);
        r->head = (r->head + 1) % ROUNDS_KEPT;
    } else {
        at = (r->head + r->nkept) % ROUNDS_KEPT;
        r->nkept++;
    }
    /* Swap the stage's arrays in: the kept set's (cleared) arrays become the next stage. */
    struct rounds_set spare = r->kept[at];
    r->kept[at] = r->stage;
    r->kept[at].round = round;
    r->stage = spare;
    r->staged = 0;
}

void rounds_end(struct rounds *r)
{
    set_clear(&r->stage, r->staged);
    r->staged = 0;
    r->ended = true;
}
