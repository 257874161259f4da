/* Entries, snapshots and the cluster list of dispatcher replicas (replica_codec.h). Pure. */
#include "replica_codec.h"

#include "update_codec.h"

#include "common/crc32c.h"
#include "common/error.h"

#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define ENTRY_MAGIC "SLR1"
/* A snapshot: SNAP_MAGIC, the CRC32C of every byte after the first 8, then the body: the state's
 * length (8 bytes), the state (update_codec's snapshot), the count of datasets (4) and each
 * one's id (2-byte length and bytes) and definition (8-byte length and bytes). Raft stores it as
 * it is, without a checksum of its own, so the CRC is what tells a damaged file from a state
 * that happens to decode. SNAP_MAGIC_V1 is the same body without the CRC, as versions before it
 * wrote: still read. */
#define SNAP_MAGIC "SLS2"
#define SNAP_MAGIC_V1 "SLS1"
#define SNAP_HEAD 8u
#define SNAP_HEAD_V1 4u

static void put_u16(uint8_t *p, uint16_t v)
{
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
}

static void put_u32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static void put_u64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static uint64_t get_le(const uint8_t *p, int n)
{
    uint64_t v = 0;
    for (int i = 0; i < n; i++)
        v |= (uint64_t)p[i] << (8 * i);
    return v;
}

int replica_parse_cluster(const char *text, uint64_t self_id, const char *self_address,
                          uint64_t ids[REPLICA_MEMBERS_MAX], char addrs[][REPLICA_ADDR_MAX],
                          size_t *n, char *canon, size_t canonlen, char *err, size_t errlen)
{
    *n = 0;
    if (!text || !*text)
        return err_set(err, errlen, SLUICE_ERR_INVALID, "raft cluster: empty");
    const char *p = text;
    while (*p) {
        const char *end = strchr(p, ',');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        if (*n == REPLICA_MEMBERS_MAX)
            return err_set(err, errlen, SLUICE_ERR_INVALID, "raft cluster: more than %d members",
                           REPLICA_MEMBERS_MAX);
        const char *eq = memchr(p, '=', len);
        if (!eq || eq == p || (size_t)(eq - p) > 19)
            return err_set(err, errlen, SLUICE_ERR_INVALID,
                           "raft cluster: '%.*s': expected ID=HOST:PORT",
                           (int)(len > 200 ? 200 : len), p);
        uint64_t id = 0;
        for (const char *q = p; q < eq; q++) {
            if (*q < '0' || *q > '9' || id > (UINT64_C(1) << 63) / 10)
                return err_set(err, errlen, SLUICE_ERR_INVALID,
                               "raft cluster: '%.*s': the id must be a number from 1 to 2^63",
                               (int)(eq - p), p);
            id = id * 10 + (uint64_t)(*q - '0');
        }
        size_t alen = len - (size_t)(eq + 1 - p);
        const char *colon = memrchr(eq + 1, ':', alen);
        if (id == 0 || id > (UINT64_C(1) << 63))
            return err_set(err, errlen, SLUICE_ERR_INVALID,
                           "raft cluster: id %" PRIu64 ": must be from 1 to 2^63", id);
        if (alen == 0 || alen >= 256 || !colon || colon == eq + 1 || colon + 1 == eq + 1 + alen)
            return err_set(err, errlen, SLUICE_ERR_INVALID,
                           "raft cluster: member %" PRIu64 ": expected HOST:PORT, got '%.*s'", id,
                           (int)(alen > 200 ? 200 : alen), eq + 1);
        for (size_t i = 0; i < *n; i++) {
            if (ids[i] == id)
                return err_set(err, errlen, SLUICE_ERR_INVALID,
                               "raft cluster: id %" PRIu64 " is listed twice", id);
            if (strlen(addrs[i]) == alen && memcmp(addrs[i], eq + 1, alen) == 0)
                return err_set(err, errlen, SLUICE_ERR_INVALID,
                               "raft cluster: address %s is listed twice", addrs[i]);
        }
        ids[*n] = id;
        memcpy(addrs[*n], eq + 1, alen);
        addrs[*n][alen] = '\0';
        (*n)++;
        if (!end)
            break;
        p = end + 1;
        if (!*p)
            return err_set(err, errlen, SLUICE_ERR_INVALID, "raft cluster: ends with a comma");
    }
    /* Canonical: by id. */
    for (size_t i = 1; i < *n; i++) {
        for (size_t j = i; j > 0 && ids[j - 1] > ids[j]; j--) {
            uint64_t t = ids[j];
            ids[j] = ids[j - 1];
            ids[j - 1] = t;
            char a[REPLICA_ADDR_MAX];
            memcpy(a, addrs[j], sizeof a);
            memcpy(addrs[j], addrs[j - 1], sizeof a);
            memcpy(addrs[j - 1], a, sizeof a);
        }
    }
    size_t off = 0;
    canon[0] = '\0';
    for (size_t i = 0; i < *n; i++) {
        int w = snprintf(canon + off, canonlen - off, "%s%" PRIu64 "=%s", i ? "," : "", ids[i],
                         addrs[i]);
        if (w < 0 || (size_t)w >= canonlen - off)
            return err_set(err, errlen, SLUICE_ERR_INVALID, "raft cluster: too long");
        off += (size_t)w;
    }
    size_t self = *n;
    for (size_t i = 0; i < *n; i++)
        if (ids[i] == self_id)
            self = i;
    if (self == *n)
        return err_set(err, errlen, SLUICE_ERR_INVALID,
                       "raft id %" PRIu64 " is not in the cluster %s", self_id, canon);
    if (self_address && strcmp(addrs[self], self_address) != 0)
        return err_set(err, errlen, SLUICE_ERR_INVALID,
                       "raft address %s is not member %" PRIu64 "'s address in the cluster (%s)",
                       self_address, self_id, addrs[self]);
    return 0;
}

/* ---- entries --------------------------------------------------------------------------------- */

int replica_entry_encode(uint64_t origin, uint64_t term, const char *rpc,
                         const struct replica_record *recs, size_t n, void *(*alloc)(size_t),
                         uint8_t **out, size_t *len)
{
    size_t rpclen = strlen(rpc);
    if (rpclen >= REPLICA_ADDR_MAX || n > REPLICA_ENTRY_RECORDS_MAX)
        return SLUICE_ERR_INVALID;
    size_t total = 4 + 8 + 8 + 2 + rpclen + 4;
    for (size_t i = 0; i < n; i++) {
        if (recs[i].len > UINT32_MAX)
            return SLUICE_ERR_INVALID;
        total += 4 + recs[i].len;
    }
    size_t padded = (total + 7) & ~(size_t)7;
    uint8_t *p = (alloc ? alloc : malloc)(padded);
    if (!p)
        return SLUICE_ERR_NOMEM;
    memset(p + total, 0, padded - total);
    uint8_t *q = p;
    memcpy(q, ENTRY_MAGIC, 4);
    put_u64(q + 4, origin);
    put_u64(q + 12, term);
    put_u16(q + 20, (uint16_t)rpclen);
    memcpy(q + 22, rpc, rpclen);
    q += 22 + rpclen;
    put_u32(q, (uint32_t)n);
    q += 4;
    for (size_t i = 0; i < n; i++) {
        put_u32(q, (uint32_t)recs[i].len);
        if (recs[i].len)
            memcpy(q + 4, recs[i].data, recs[i].len);
        q += 4 + recs[i].len;
    }
    *out = p;
    *len = padded;
    return 0;
}

int replica_entry_parse(const uint8_t *p, size_t len, struct replica_entry *e, char *err,
                        size_t errlen)
{
    if (len < 26 || memcmp(p, ENTRY_MAGIC, 4) != 0)
        return err_set(err, errlen, SLUICE_ERR_CORRUPT, "not a sluice entry");
    /* Every entry is padded to a multiple of 8: one cut inside its padding is damaged too. */
    if (len % 8 != 0)
        return err_set(err, errlen, SLUICE_ERR_CORRUPT, "entry: length %zu is not a multiple of 8",
                       len);
    e->origin = get_le(p + 4, 8);
    e->term = get_le(p + 12, 8);
    size_t rpclen = (size_t)get_le(p + 20, 2);
    if (rpclen >= sizeof e->rpc || 22 + rpclen + 4 > len)
        return err_set(err, errlen, SLUICE_ERR_CORRUPT, "entry: bad address length");
    memcpy(e->rpc, p + 22, rpclen);
    e->rpc[rpclen] = '\0';
    const uint8_t *q = p + 22 + rpclen;
    e->count = (uint32_t)get_le(q, 4);
    q += 4;
    e->records = q;
    e->seed = NULL;
    e->seed_len = 0;
    const uint8_t *end = p + len;
    if (e->count == REPLICA_ENTRY_SEED) {
        if (end - q < 8 || get_le(q, 8) > (uint64_t)(end - q - 8))
            return err_set(err, errlen, SLUICE_ERR_CORRUPT, "seed entry: bad length");
        e->seed_len = (size_t)get_le(q, 8);
        e->seed = q + 8;
        e->count = 0;
        q += 8 + e->seed_len;
        if (end - q > 7)
            return err_set(err, errlen, SLUICE_ERR_CORRUPT, "seed entry: bytes after the seed");
        for (; q < end; q++)
            if (*q != 0)
                return err_set(err, errlen, SLUICE_ERR_CORRUPT, "seed entry: bytes after the seed");
        return 0;
    }
    if (e->count > REPLICA_ENTRY_RECORDS_MAX)
        return err_set(err, errlen, SLUICE_ERR_CORRUPT, "entry: %u records", e->count);
    for (uint32_t i = 0; i < e->count; i++) {
        if ((size_t)(end - q) < 4)
            return err_set(err, errlen, SLUICE_ERR_CORRUPT, "entry: record %u cut short", i);
        size_t rl = (size_t)get_le(q, 4);
        if ((size_t)(end - q) - 4 < rl)
            return err_set(err, errlen, SLUICE_ERR_CORRUPT, "entry: record %u cut short", i);
        q += 4 + rl;
    }
    if (end - q > 7)
        return err_set(err, errlen, SLUICE_ERR_CORRUPT, "entry: bytes after the last record");
    for (; q < end; q++)
        if (*q != 0)
            return err_set(err, errlen, SLUICE_ERR_CORRUPT, "entry: bytes after the last record");
    return 0;
}

bool replica_entry_next(const struct replica_entry *e, uint64_t *cursor, const uint8_t **data,
                        size_t *len)
{
    /* cursor: the next record's index in the low 32 bits, its byte offset in the high ones. */
    uint32_t index = (uint32_t)(*cursor & 0xffffffffu);
    size_t byte = (size_t)(*cursor >> 32);
    if (index >= e->count)
        return false;
    *len = (size_t)get_le(e->records + byte, 4);
    *data = e->records + byte + 4;
    byte += 4 + *len;
    *cursor = ((uint64_t)byte << 32) | (index + 1);
    return true;
}

int replica_entry_updates(const struct replica_entry *e, replica_update_fn fn, void *user,
                          char *err, size_t errlen)
{
    uint64_t cursor = 0;
    const uint8_t *data;
    size_t len;
    for (uint32_t i = 0; replica_entry_next(e, &cursor, &data, &len); i++) {
        struct st_update u;
        char why[SLUICE_ERRMSG_SIZE / 2];
        int rc = update_codec_decode(data, len, &u, why, sizeof why);
        if (rc < 0)
            return err_set(err, errlen, rc, "record %u does not decode: %s", i, why);
        rc = fn(user, i, &u, err, errlen);
        st_update_release(&u);
        if (rc != 0)
            return rc;
    }
    return 0;
}

struct apply_to {
    struct state *const *states;
    size_t n;
};

static int apply_one(void *user, uint32_t i, const struct st_update *u, char *err, size_t errlen)
{
    (void)i;
    const struct apply_to *to = user;
    int rc = 0;
    for (size_t k = 0; k < to->n && rc == 0; k++) {
        if (to->states[k])
            rc = state_apply(to->states[k], u);
    }
    if (rc < 0)
        err_set(err, errlen, rc, "%s %" PRIu64 " does not apply: %s", st_update_name(u->type),
                u->id, sluice_strerror(rc));
    return rc;
}

static bool state_empty(const struct state *s)
{
    return s->applied == 0 && s->ndatasets == 0 && s->njobs == 0 && s->nworkers == 0;
}

int replica_entry_apply(const struct replica_entry *e, struct state *const *states, size_t n,
                        size_t *seeded, char *err, size_t errlen)
{
    if (seeded)
        *seeded = 0;
    if (e->seed) {
        struct state seed;
        int rc = replica_snapshot_decode(e->seed, e->seed_len, &seed, err, errlen);
        for (size_t k = 0; rc == 0 && k < n; k++) {
            if (states[k] && state_empty(states[k])) {
                rc = replica_state_copy(states[k], &seed, err, errlen);
                if (rc == 0 && seeded)
                    (*seeded)++;
            }
        }
        state_release(&seed);
        return rc;
    }
    struct apply_to to = {states, n};
    return replica_entry_updates(e, apply_one, &to, err, errlen);
}

/* ---- snapshots and copies -------------------------------------------------------------------- */

static int lookup_in_state(void *user, const char *id, uint8_t **def, size_t *len, char *err,
                           size_t errlen)
{
    const struct st_dataset *ds = state_dataset(user, id);
    if (!ds)
        return err_set(err, errlen, SLUICE_ERR_CORRUPT, "dataset '%s' has no definition", id);
    *def = malloc(ds->def_len ? ds->def_len : 1);
    if (!*def)
        return err_set(err, errlen, SLUICE_ERR_NOMEM, "out of memory");
    if (ds->def_len)
        memcpy(*def, ds->def, ds->def_len);
    *len = ds->def_len;
    return 0;
}

int replica_state_copy(struct state *dst, const struct state *src, char *err, size_t errlen)
{
    uint8_t *bytes;
    size_t len;
    int rc = update_codec_snapshot_encode(src, &bytes, &len);
    if (rc < 0)
        return err_set(err, errlen, rc, "copying the state: %s", sluice_strerror(rc));
    struct state fresh;
    rc =
        update_codec_snapshot_decode(bytes, len, lookup_in_state, (void *)src, &fresh, err, errlen);
    free(bytes);
    if (rc < 0)
        return rc;
    struct st_limits limits = dst->limits;
    uint32_t static_workers = dst->static_workers;
    state_release(dst);
    *dst = fresh;
    dst->limits = limits;
    dst->static_workers = static_workers;
    return 0;
}

int replica_snapshot_encode(const struct state *s, void *(*alloc)(size_t), uint8_t **out,
                            size_t *outlen)
{
    uint8_t *snap;
    size_t snaplen;
    int rc = update_codec_snapshot_encode(s, &snap, &snaplen);
    if (rc < 0)
        return rc;
    size_t len = SNAP_HEAD + 8 + snaplen + 4;
    for (size_t i = 0; i < s->ndatasets; i++)
        len += 2 + strlen(s->datasets[i].id) + 8 + s->datasets[i].def_len;
    uint8_t *p = (alloc ? alloc : malloc)(len);
    if (!p) {
        free(snap);
        return SLUICE_ERR_NOMEM;
    }
    memcpy(p, SNAP_MAGIC, 4);
    uint8_t *q = p + SNAP_HEAD;
    put_u64(q, snaplen);
    memcpy(q + 8, snap, snaplen);
    q += 8 + snaplen;
    free(snap);
    put_u32(q, (uint32_t)s->ndatasets);
    q += 4;
    for (size_t i = 0; i < s->ndatasets; i++) {
        size_t il = strlen(s->datasets[i].id);
        put_u16(q, (uint16_t)il);
        memcpy(q + 2, s->datasets[i].id, il);
        q += 2 + il;
        put_u64(q, s->datasets[i].def_len);
        if (s->datasets[i].def_len)
            memcpy(q + 8, s->datasets[i].def, s->datasets[i].def_len);
        q += 8 + s->datasets[i].def_len;
    }
    put_u32(p + 4, crc32c(p + SNAP_HEAD, len - SNAP_HEAD));
    *out = p;
    *outlen = len;
    return 0;
}

struct snap_defs {
    const uint8_t *p; /* the datasets section, checked by defs_ok */
};

static int lookup_in_snapshot(void *user, const char *id, uint8_t **def, size_t *len, char *err,
                              size_t errlen)
{
    const struct snap_defs *sd = user;
    const uint8_t *q = sd->p;
    uint32_t n = (uint32_t)get_le(q, 4);
    q += 4;
    size_t want = strlen(id);
    for (uint32_t i = 0; i < n; i++) {
        size_t il = (size_t)get_le(q, 2);
        uint64_t dl = get_le(q + 2 + il, 8);
        const uint8_t *d = q + 2 + il + 8;
        if (il == want && memcmp(q + 2, id, il) == 0) {
            *def = malloc(dl ? dl : 1);
            if (!*def)
                return err_set(err, errlen, SLUICE_ERR_NOMEM, "out of memory");
            if (dl)
                memcpy(*def, d, dl);
            *len = dl;
            return 0;
        }
        q = d + dl;
    }
    return err_set(err, errlen, SLUICE_ERR_CORRUPT, "dataset '%s': no definition in the snapshot",
                   id);
}

static bool defs_ok(const uint8_t *p, const uint8_t *end)
{
    if (end - p < 4)
        return false;
    uint32_t n = (uint32_t)get_le(p, 4);
    p += 4;
    for (uint32_t i = 0; i < n; i++) {
        if (end - p < 2)
            return false;
        size_t il = (size_t)get_le(p, 2);
        if ((size_t)(end - p) < 2 + il + 8)
            return false;
        uint64_t dl = get_le(p + 2 + il, 8);
        p += 2 + il + 8;
        if ((uint64_t)(end - p) < dl)
            return false;
        p += dl;
    }
    return p == end;
}

int replica_snapshot_decode(const uint8_t *p, size_t len, struct state *out, char *err,
                            size_t errlen)
{
    state_init(out);
    size_t head;
    if (len >= 4 && memcmp(p, SNAP_MAGIC, 4) == 0)
        head = SNAP_HEAD;
    else if (len >= 4 && memcmp(p, SNAP_MAGIC_V1, 4) == 0)
        head = SNAP_HEAD_V1;
    else
        return err_set(err, errlen, SLUICE_ERR_CORRUPT, "not a sluice snapshot");
    if (len < head + 12)
        return err_set(err, errlen, SLUICE_ERR_CORRUPT, "not a sluice snapshot");
    if (head == SNAP_HEAD) {
        uint32_t stored = (uint32_t)get_le(p + 4, 4);
        uint32_t computed = crc32c(p + SNAP_HEAD, len - SNAP_HEAD);
        if (stored != computed)
            return err_set(err, errlen, SLUICE_ERR_CORRUPT,
                           "snapshot: checksum mismatch (stored %08" PRIx32 ", computed %08" PRIx32
                           ")",
                           stored, computed);
    }
    const uint8_t *body = p + head;
    uint64_t snaplen = get_le(body, 8);
    if (snaplen > len - head - 8 || !defs_ok(body + 8 + snaplen, p + len))
        return err_set(err, errlen, SLUICE_ERR_CORRUPT, "snapshot: damaged framing");
    struct snap_defs sd = {body + 8 + snaplen};
    return update_codec_snapshot_decode(body + 8, snaplen, lookup_in_snapshot, &sd, out, err,
                                        errlen);
}

int replica_state_restore(struct state *s, const uint8_t *p, size_t len, char *err, size_t errlen)
{
    struct state fresh;
    int rc = replica_snapshot_decode(p, len, &fresh, err, errlen);
    if (rc < 0) {
        state_release(&fresh);
        return rc;
    }
    fresh.limits = s->limits;
    fresh.static_workers = s->static_workers;
    state_release(s);
    *s = fresh;
    return 0;
}

int replica_entry_encode_seed(uint64_t origin, uint64_t term, const char *rpc,
                              const uint8_t *snapshot, size_t len, void *(*alloc)(size_t),
                              uint8_t **out, size_t *outlen)
{
    size_t rpclen = strlen(rpc);
    if (rpclen >= REPLICA_ADDR_MAX)
        return SLUICE_ERR_INVALID;
    size_t total = 4 + 8 + 8 + 2 + rpclen + 4 + 8 + len;
    size_t padded = (total + 7) & ~(size_t)7;
    uint8_t *p = (alloc ? alloc : malloc)(padded);
    if (!p)
        return SLUICE_ERR_NOMEM;
    memset(p + total, 0, padded - total);
    memcpy(p, ENTRY_MAGIC, 4);
    put_u64(p + 4, origin);
    put_u64(p + 12, term);
    put_u16(p + 20, (uint16_t)rpclen);
    memcpy(p + 22, rpc, rpclen);
    uint8_t *q = p + 22 + rpclen;
    put_u32(q, REPLICA_ENTRY_SEED);
    put_u64(q + 4, len);
    memcpy(q + 12, snapshot, len);
    *out = p;
    *outlen = padded;
    return 0;
}

enum replica_join replica_join_decide(const uint64_t *answers, size_t npeers)
{
    bool all = true;
    for (size_t i = 0; i < npeers; i++) {
        if (answers[i] == REPLICA_UNKNOWN)
            all = false;
        else if (answers[i] > 1)
            return REPLICA_JOIN;
    }
    return all ? REPLICA_BOOTSTRAP : REPLICA_WAIT;
}
