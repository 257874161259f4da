#include "checkpoint.h"

#include "common/crc32c.h"
#include "common/error.h"
#include "common/fnv.h"
#include "common/varint.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

static const char MAGIC[8] = {'S', 'L', 'U', 'I', 'C', 'E', 'C', 'K'};

void checkpoint_init(struct checkpoint *c)
{
    memset(c, 0, sizeof *c);
    ledger_init(&c->pos);
}

void checkpoint_release(struct checkpoint *c)
{
    ledger_release(&c->pos);
    memset(c, 0, sizeof *c);
}

uint64_t checkpoint_def_hash(const uint8_t *def, size_t len)
{
    return fnv1a_bytes(FNV1A_OFFSET, def, len);
}

/* ---- encoding ------------------------------------------------------------------------------ */

struct out {
    uint8_t *p;
    size_t n, cap;
    bool nomem;
};

static uint8_t *room(struct out *o, size_t need)
{
    if (o->nomem)
        return NULL;
    if (o->cap - o->n < need) {
        size_t cap = o->cap ? o->cap : 256;
        while (cap - o->n < need)
            cap *= 2;
        uint8_t *p = realloc(o->p, cap);
        if (!p) {
            o->nomem = true;
            return NULL;
        }
        o->p = p;
        o->cap = cap;
    }
    return o->p + o->n;
}

static void put_bytes(struct out *o, const void *b, size_t n)
{
    uint8_t *p = room(o, n);
    if (p) {
        memcpy(p, b, n);
        o->n += n;
    }
}

static void put_varint(struct out *o, uint64_t v)
{
    uint8_t *p = room(o, VARINT_MAX_LEN);
    if (p)
        o->n += varint_put(p, v);
}

static void put_le(struct out *o, uint64_t v, unsigned bytes)
{
    uint8_t b[8];
    for (unsigned i = 0; i < bytes; i++)
        b[i] = (uint8_t)(v >> (8 * i));
    put_bytes(o, b, bytes);
}

static void put_string(struct out *o, const char *s)
{
    size_t n = strlen(s);
    put_varint(o, n);
    put_bytes(o, s, n);
}

static void put_ranges(struct out *o, const struct ranges *r)
{
    put_varint(o, r->n);
    uint64_t prev = 0;
    for (size_t i = 0; i < r->n; i++) {
        put_varint(o, r->v[i].begin - prev);
        put_varint(o, r->v[i].end - r->v[i].begin);
        prev = r->v[i].end;
    }
}

static bool entry_holds(const struct ledger_split *s)
{
    return s->ended || s->got.n > 0;
}

int checkpoint_encode(const struct checkpoint *c, uint8_t **out, size_t *len)
{
    struct out o = {0};
    put_bytes(&o, MAGIC, sizeof MAGIC);
    put_varint(&o, CHECKPOINT_VERSION);
    put_varint(&o, c->flags);
    put_string(&o, c->dataset_id);
    put_string(&o, c->job_name);
    put_le(&o, c->def_hash, 8);
    put_le(&o, c->plan_hash, 8);
    put_varint(&o, c->split_total);
    put_varint(&o, c->delivered);
    put_ranges(&o, &c->pos.done);
    size_t n = 0;
    for (size_t i = 0; i < c->pos.n; i++)
        n += entry_holds(&c->pos.v[i]);
    put_varint(&o, n);
    uint64_t next = 0;
    for (size_t i = 0; i < c->pos.n; i++) {
        const struct ledger_split *s = &c->pos.v[i];
        if (!entry_holds(s))
            continue;
        put_varint(&o, s->seq - next);
        next = s->seq + 1;
        put_varint(&o, s->ended);
        if (s->ended)
            put_varint(&o, s->total);
        put_ranges(&o, &s->got);
    }
    uint32_t crc = o.nomem ? 0 : crc32c(o.p, o.n);
    put_le(&o, crc, 4);
    if (o.nomem) {
        free(o.p);
        return SLUICE_ERR_NOMEM;
    }
    *out = o.p;
    *len = o.n;
    return 0;
}

/* ---- decoding ------------------------------------------------------------------------------ */

struct in {
    const uint8_t *p;
    size_t n, at;
};

static bool get_varint(struct in *in, uint64_t *v)
{
    return varint_get(in->p, in->n, &in->at, VARINT_MAX_LEN, v);
}

static bool get_le(struct in *in, unsigned bytes, uint64_t *v)
{
    if (in->n - in->at < bytes)
        return false;
    *v = 0;
    for (unsigned i = 0; i < bytes; i++)
        *v |= (uint64_t)in->p[in->at + i] << (8 * i);
    in->at += bytes;
    return true;
}

static int get_string(struct in *in, char *dst, size_t cap, const char *what, char *err,
                      size_t errlen)
{
    uint64_t n;
    if (!get_varint(in, &n) || n > in->n - in->at)
        return err_set(err, errlen, SLUICE_ERR_INVALID, "checkpoint: its %s is cut short", what);
    if (n >= cap || memchr(in->p + in->at, 0, n))
        return err_set(err, errlen, SLUICE_ERR_INVALID, "checkpoint: its %s is not valid", what);
    memcpy(dst, in->p + in->at, n);
    dst[n] = 0;
    in->at += n;
    return 0;
}

/* Reads a range list into r (empty): sorted, disjoint, non-touching, within [0, limit]. */
static int get_ranges(struct in *in, struct ranges *r, uint64_t limit, const char *what, char *err,
                      size_t errlen)
{
    uint64_t n;
    if (!get_varint(in, &n))
        return err_set(err, errlen, SLUICE_ERR_INVALID, "checkpoint: %s cut short", what);
    if (n > CHECKPOINT_MAX_ENTRIES)
        return err_set(err, errlen, SLUICE_ERR_INVALID,
                       "checkpoint: %s has %" PRIu64 " ranges, over the limit of %u", what, n,
                       CHECKPOINT_MAX_ENTRIES);
    uint64_t prev = 0;
    for (uint64_t i = 0; i < n; i++) {
        uint64_t gap, len;
        if (!get_varint(in, &gap) || !get_varint(in, &len))
            return err_set(err, errlen, SLUICE_ERR_INVALID, "checkpoint: %s cut short", what);
        if ((i > 0 && gap == 0) || len == 0 || gap > limit - prev || len > limit - prev - gap)
            return err_set(err, errlen, SLUICE_ERR_INVALID,
                           "checkpoint: %s are not sorted ranges within %" PRIu64, what, limit);
        uint64_t begin = prev + gap;
        if (ranges_add(r, begin, begin + len) < 0)
            return err_set(err, errlen, SLUICE_ERR_NOMEM, "%s", sluice_strerror(SLUICE_ERR_NOMEM));
        prev = begin + len;
    }
    return 0;
}

/* The head both formats share: version (want), flags, dataset id and job name. */
static int get_head(struct in *in, uint64_t want, const char *what, uint32_t *flags, char *dataset,
                    char *job, char *err, size_t errlen)
{
    uint64_t v, f;
    if (!get_varint(in, &v))
        return err_set(err, errlen, SLUICE_ERR_INVALID, "checkpoint: no version");
    if (v != want)
        return err_set(err, errlen, SLUICE_ERR_INVALID,
                       "%s: version %" PRIu64 ", this library reads version %" PRIu64, what, v,
                       want);
    if (!get_varint(in, &f) || f > UINT32_MAX)
        return err_set(err, errlen, SLUICE_ERR_INVALID, "checkpoint: bad flags");
    *flags = (uint32_t)f;
    int rc = get_string(in, dataset, CHECKPOINT_NAME_MAX, "dataset id", err, errlen);
    if (rc == 0)
        rc = get_string(in, job, CHECKPOINT_NAME_MAX, "job name", err, errlen);
    return rc;
}

static int decode(struct in *in, struct checkpoint *c, char *err, size_t errlen)
{
    int rc = get_head(in, CHECKPOINT_VERSION, "checkpoint", &c->flags, c->dataset_id, c->job_name,
                      err, errlen);
    if (rc)
        return rc;
    if (!get_le(in, 8, &c->def_hash) || !get_le(in, 8, &c->plan_hash) ||
        !get_varint(in, &c->split_total) || !get_varint(in, &c->delivered))
        return err_set(err, errlen, SLUICE_ERR_INVALID, "checkpoint: header cut short");
    if ((rc = get_ranges(in, &c->pos.done, c->split_total, "finished splits", err, errlen)))
        return rc;
    uint64_t n;
    if (!get_varint(in, &n))
        return err_set(err, errlen, SLUICE_ERR_INVALID, "checkpoint: splits in flight cut short");
    if (n > CHECKPOINT_MAX_ENTRIES)
        return err_set(err, errlen, SLUICE_ERR_INVALID,
                       "checkpoint: %" PRIu64 " splits in flight, over the limit of %u", n,
                       CHECKPOINT_MAX_ENTRIES);
    uint64_t next = 0;
    for (uint64_t i = 0; i < n; i++) {
        uint64_t gap, ended, total = UINT64_MAX;
        if (!get_varint(in, &gap) || !get_varint(in, &ended) || ended > 1 ||
            (ended && !get_varint(in, &total)))
            return err_set(err, errlen, SLUICE_ERR_INVALID,
                           "checkpoint: split in flight %" PRIu64 " is damaged", i);
        if (gap >= c->split_total - next)
            return err_set(err, errlen, SLUICE_ERR_INVALID,
                           "checkpoint: a split in flight lies past the %" PRIu64 " splits",
                           c->split_total);
        uint64_t seq = next + gap;
        next = seq + 1;
        if (ranges_contains(&c->pos.done, seq))
            return err_set(err, errlen, SLUICE_ERR_INVALID,
                           "checkpoint: split %" PRIu64 " is both finished and in flight", seq);
        struct ranges got = {0};
        rc = get_ranges(in, &got, total, "positions", err, errlen);
        if (rc == 0 && ended && ranges_covers(&got, total))
            rc = err_set(err, errlen, SLUICE_ERR_INVALID,
                         "checkpoint: split %" PRIu64 " is complete but not finished", seq);
        for (size_t k = 0; rc == 0 && k < got.n; k++)
            rc = ledger_add(&c->pos, seq, got.v[k].begin, got.v[k].end);
        ranges_release(&got);
        if (rc == 0 && ended)
            rc = ledger_end(&c->pos, seq, total);
        if (rc == SLUICE_ERR_NOMEM)
            return err_set(err, errlen, rc, "%s", sluice_strerror(rc));
        if (rc)
            return rc;
    }
    if (in->at != in->n)
        return err_set(err, errlen, SLUICE_ERR_INVALID, "checkpoint: %zu bytes after its end",
                       in->n - in->at);
    return 0;
}

/* The crc32c at the end of len bytes at p (len covers at least a magic). */
static int check_sum(const uint8_t *p, size_t len, char *err, size_t errlen)
{
    if (len < sizeof MAGIC + 4)
        return err_set(err, errlen, SLUICE_ERR_CORRUPT, "checkpoint: cut short");
    uint32_t want = (uint32_t)p[len - 4] | (uint32_t)p[len - 3] << 8 | (uint32_t)p[len - 2] << 16 |
                    (uint32_t)p[len - 1] << 24;
    if (crc32c(p, len - 4) != want)
        return err_set(err, errlen, SLUICE_ERR_CORRUPT,
                       "checkpoint: checksum mismatch (the file is damaged or cut short)");
    return 0;
}

int checkpoint_decode(const uint8_t *p, size_t len, struct checkpoint *c, char *err, size_t errlen)
{
    if (!p || len < sizeof MAGIC || memcmp(p, MAGIC, sizeof MAGIC) != 0)
        return err_set(err, errlen, SLUICE_ERR_INVALID, "not a sluice checkpoint");
    int rc = check_sum(p, len, err, errlen);
    if (rc)
        return rc;
    struct in in = {.p = p, .n = len - 4, .at = sizeof MAGIC};
    rc = decode(&in, c, err, errlen);
    if (rc) {
        checkpoint_release(c);
        checkpoint_init(c);
    }
    return rc;
}

int checkpoint_seed(struct ledger *dst, const struct ledger *src, bool as_had)
{
    int rc = 0;
    struct ranges *done = as_had ? &dst->had : &dst->done;
    for (size_t i = 0; rc == 0 && i < src->done.n; i++)
        rc = ranges_add(done, src->done.v[i].begin, src->done.v[i].end);
    for (size_t i = 0; rc == 0 && i < src->n; i++) {
        const struct ledger_split *e = &src->v[i];
        for (size_t k = 0; rc == 0 && k < e->got.n; k++)
            rc = ledger_add(dst, e->seq, e->got.v[k].begin, e->got.v[k].end);
        if (rc == 0 && e->ended)
            rc = ledger_end(dst, e->seq, e->total);
    }
    return rc;
}

int checkpoint_merge(struct checkpoint *dst, const struct checkpoint *src, char *err, size_t errlen)
{
    if (strcmp(dst->dataset_id, src->dataset_id) != 0)
        return err_set(err, errlen, SLUICE_ERR_INVALID,
                       "the checkpoints are of datasets '%s' and '%s'", dst->dataset_id,
                       src->dataset_id);
    if (dst->def_hash != src->def_hash || dst->plan_hash != src->plan_hash ||
        dst->split_total != src->split_total)
        return err_set(err, errlen, SLUICE_ERR_INVALID,
                       "the checkpoints are of different definitions or split plans of dataset "
                       "'%s'",
                       dst->dataset_id);
    int rc = checkpoint_seed(&dst->pos, &src->pos, false);
    /* Splits now whole across the consumers join the done set. */
    for (size_t i = 0; rc == 0 && i < dst->pos.n;) {
        uint64_t seq = dst->pos.v[i].seq;
        if (ledger_complete(&dst->pos, seq))
            rc = ledger_confirmed(&dst->pos, &seq, 1);
        else
            i++;
    }
    if (rc == SLUICE_ERR_CORRUPT)
        return err_set(err, errlen, rc, "the checkpoints disagree on the size of a split");
    if (rc < 0)
        return err_set(err, errlen, rc, "%s", sluice_strerror(rc));
    dst->delivered += src->delivered;
    dst->flags &= src->flags;
    return 0;
}

/* ---- mixed reads --------------------------------------------------------------------------- */

static const char MIX_MAGIC[8] = {'S', 'L', 'U', 'I', 'C', 'E', 'M', 'X'};

bool checkpoint_is_mix(const uint8_t *p, size_t len)
{
    return p && len >= sizeof MIX_MAGIC && memcmp(p, MIX_MAGIC, sizeof MIX_MAGIC) == 0;
}

int checkpoint_mix_encode(const struct checkpoint_mix *c, uint8_t **out, size_t *len)
{
    struct out o = {0};
    put_bytes(&o, MIX_MAGIC, sizeof MIX_MAGIC);
    put_varint(&o, CHECKPOINT_MIX_VERSION);
    put_varint(&o, c->flags);
    put_string(&o, c->dataset_id);
    put_string(&o, c->job_name);
    put_le(&o, c->def_hash, 8);
    put_varint(&o, c->delivered);
    put_varint(&o, c->pos);
    put_varint(&o, c->nchoices);
    put_varint(&o, c->pending);
    put_varint(&o, c->ended);
    put_varint(&o, c->ninputs);
    for (size_t i = 0; i < c->ninputs; i++)
        put_varint(&o, c->done[i]);
    put_varint(&o, c->nreads);
    for (size_t i = 0; i < c->nreads; i++) {
        put_varint(&o, c->read_len[i]);
        put_bytes(&o, c->read[i], c->read_len[i]);
    }
    uint32_t crc = o.nomem ? 0 : crc32c(o.p, o.n);
    put_le(&o, crc, 4);
    if (o.nomem) {
        free(o.p);
        return SLUICE_ERR_NOMEM;
    }
    *out = o.p;
    *len = o.n;
    return 0;
}

static int mix_decode(struct in *in, struct checkpoint_mix *c, char *err, size_t errlen)
{
    uint64_t v, ended, n;
    int rc = get_head(in, CHECKPOINT_MIX_VERSION, "checkpoint of a mix", &c->flags, c->dataset_id,
                      c->job_name, err, errlen);
    if (rc)
        return rc;
    if (!get_le(in, 8, &c->def_hash) || !get_varint(in, &c->delivered) ||
        !get_varint(in, &c->pos) || !get_varint(in, &c->nchoices) || !get_varint(in, &c->pending) ||
        !get_varint(in, &ended) || !get_varint(in, &n))
        return err_set(err, errlen, SLUICE_ERR_INVALID, "checkpoint of a mix: header cut short");
    if (ended > 1 || n == 0 || n >= CHECKPOINT_MIX_MAX_READS || c->pending > n)
        return err_set(err, errlen, SLUICE_ERR_INVALID, "checkpoint of a mix: bad header");
    c->ended = ended;
    c->ninputs = (size_t)n;
    for (size_t i = 0; i < c->ninputs; i++) {
        if (!get_varint(in, &v) || v > 1)
            return err_set(err, errlen, SLUICE_ERR_INVALID,
                           "checkpoint of a mix: its inputs' ends are damaged");
        c->done[i] = v;
    }
    if (!get_varint(in, &n) || n < c->ninputs || n > c->ninputs + 1)
        return err_set(err, errlen, SLUICE_ERR_INVALID,
                       "checkpoint of a mix: expected %zu or %zu positions of its inputs",
                       c->ninputs, c->ninputs + 1);
    c->nreads = (size_t)n;
    for (size_t i = 0; i < c->nreads; i++) {
        if (!get_varint(in, &v) || v > in->n - in->at)
            return err_set(err, errlen, SLUICE_ERR_INVALID,
                           "checkpoint of a mix: the position of input %zu is cut short", i);
        c->read[i] = in->p + in->at;
        c->read_len[i] = (size_t)v;
        in->at += (size_t)v;
    }
    if (in->at != in->n)
        return err_set(err, errlen, SLUICE_ERR_INVALID, "checkpoint: %zu bytes after its end",
                       in->n - in->at);
    return 0;
}

int checkpoint_mix_decode(const uint8_t *p, size_t len, struct checkpoint_mix *c, char *err,
                          size_t errlen)
{
    memset(c, 0, sizeof *c);
    if (!checkpoint_is_mix(p, len))
        return err_set(err, errlen, SLUICE_ERR_INVALID, "not a sluice checkpoint of a mix");
    int rc = check_sum(p, len, err, errlen);
    if (rc)
        return rc;
    struct in in = {.p = p, .n = len - 4, .at = sizeof MIX_MAGIC};
    rc = mix_decode(&in, c, err, errlen);
    if (rc)
        memset(c, 0, sizeof *c);
    return rc;
}
