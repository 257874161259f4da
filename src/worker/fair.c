/* Weighted fair sharing of a pool's threads (see fair.h). */
#include "fair.h"

#include <assert.h>
#include <math.h>

void fair_share_init(struct fair_share *s, double weight)
{
    *s = (struct fair_share){.weight = isfinite(weight) && weight > 0 ? weight : 1};
}

void fair_enter(struct fair_share *s, const struct fair_clock *c)
{
    if (!s)
        return;
    if (s->active++ == 0 && s->vtime < c->vnow)
        s->vtime = c->vnow;
}

void fair_picked(struct fair_share *s, struct fair_clock *c)
{
    if (s && s->vtime > c->vnow)
        c->vnow = s->vtime;
}

void fair_charge(struct fair_share *s, uint64_t ns)
{
    if (!s)
        return;
    assert(s->active > 0);
    s->active--;
    s->busy_ns += ns;
    s->vtime += (double)ns / s->weight;
}

bool fair_before(const struct fair_share *a, const struct fair_share *b)
{
    if (!b)
        return false;
    if (!a)
        return true;
    return a->vtime < b->vtime;
}
