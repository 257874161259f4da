/* The checks of check.h. The layout constants below are LMDB 0.9's (mdb.c: MDB_page, MDB_meta,
 * MDB_db, MDB_node) on a 64-bit host; every field is read with memcpy, in host byte order as
 * LMDB writes it, and every offset is bounded before it is read. */
#include "check.h"

#include "common/error.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

_Static_assert(sizeof(size_t) == 8, "the journal checks know LMDB's 64-bit layout only");

#define NUM_METAS 2
#define PAGEHDRSZ 16u /* pgno u64, pad u16, flags u16, lower u16, upper u16 (or pages u32) */
#define NODESIZE 8u   /* lo u16, hi u16, flags u16, ksize u16 */
#define META_END (PAGEHDRSZ + 136u)
#define DB_SIZE 48u
#define MAX_KEY 511u   /* MDB_MAXKEYSIZE */
#define MAX_DEPTH 32u  /* LMDB's cursor stack */
#define MIN_PSIZE 512u /* smaller pages cannot hold two keys of MAX_KEY */
#define MAX_PSIZE 32768u
#define P_INVALID UINT64_MAX
#define MAX_MAPSIZE ((uint64_t)1 << 46) /* 64 TiB, four times the journal's largest ceiling */

#define MDB_MAGIC 0xBEEFC0DEu
#define MDB_DATA_VERSION 1u

#define P_BRANCH 0x01u
#define P_LEAF 0x02u
#define P_OVERFLOW 0x04u
#define P_META 0x08u

#define F_BIGDATA 0x01u
#define F_SUBDATA 0x02u

#define DB_INTEGERKEY 0x08u  /* MDB_INTEGERKEY: the free list's flags */
#define ENV_NOSUBDIR 0x4000u /* MDB_NOSUBDIR: an environment flag LMDB keeps beside them */

/* Offsets inside a meta page. */
#define M_MAGIC 16
#define M_VERSION 20
#define M_ADDRESS 24
#define M_MAPSIZE 32
#define M_DBS 40
#define M_LAST_PG 136
#define M_TXNID 144

static uint16_t rd16(const uint8_t *p)
{
    uint16_t v;
    memcpy(&v, p, sizeof v);
    return v;
}

static uint32_t rd32(const uint8_t *p)
{
    uint32_t v;
    memcpy(&v, p, sizeof v);
    return v;
}

static uint64_t rd64(const uint8_t *p)
{
    uint64_t v;
    memcpy(&v, p, sizeof v);
    return v;
}

/* ---- damage ---------------------------------------------------------------------------------- */

int journal_damage_set(struct journal_damage *d, bool has_page, uint64_t page, const char *fmt, ...)
{
    va_list ap;
    memset(d, 0, sizeof *d);
    va_start(ap, fmt);
    vsnprintf(d->what, sizeof d->what, fmt, ap);
    va_end(ap);
    d->has_page = has_page;
    d->page = page;
    return SLUICE_ERR_CORRUPT;
}

void journal_damage_format(const struct journal_damage *d, char *out, size_t len)
{
    char where[96] = "";
    if (d->has_page && d->has_seq)
        snprintf(where, sizeof where, " (at page %" PRIu64 " / record seq %" PRIu64 ")", d->page,
                 d->seq);
    else if (d->has_page)
        snprintf(where, sizeof where, " (at page %" PRIu64 ")", d->page);
    else if (d->has_seq)
        snprintf(where, sizeof where, " (at record seq %" PRIu64 ")", d->seq);
    snprintf(out, len, "journal damaged: %s%s", d->what, where);
}

/* ---- meta pages ------------------------------------------------------------------------------ */

struct db {
    uint32_t pad;
    uint16_t flags, depth;
    uint64_t branch, leaf, overflow, entries, root;
};

static void read_db(const uint8_t *p, struct db *db)
{
    db->pad = rd32(p);
    db->flags = rd16(p + 4);
    db->depth = rd16(p + 6);
    db->branch = rd64(p + 8);
    db->leaf = rd64(p + 16);
    db->overflow = rd64(p + 24);
    db->entries = rd64(p + 32);
    db->root = rd64(p + 40);
}

struct meta {
    uint64_t mapsize, last_pg, txnid;
    struct db dbs[2]; /* the free list, the main table */
};

static bool is_psize(uint32_t v)
{
    return v >= MIN_PSIZE && v <= MAX_PSIZE && (v & (v - 1)) == 0;
}

/* Checks the fields of meta page i at p (psize bytes available) that need no other page. */
static int check_meta_page(const uint8_t *p, unsigned i, uint32_t psize, struct meta *m,
                           struct journal_damage *d)
{
    uint16_t flags = rd16(p + 10);
    if (rd64(p) != i || rd16(p + 8) != 0 || flags != P_META || rd32(p + 12) != 0)
        return journal_damage_set(
            d, true, i, "meta page %u: not a meta page (page number %" PRIu64 ", flags 0x%x)", i,
            rd64(p), flags);
    if (rd32(p + M_MAGIC) != MDB_MAGIC)
        return journal_damage_set(d, true, i, "meta page %u: not an LMDB data file (magic 0x%08x)",
                                  i, rd32(p + M_MAGIC));
    if (rd32(p + M_VERSION) != MDB_DATA_VERSION)
        return journal_damage_set(d, true, i, "meta page %u: LMDB data format %u, not %u", i,
                                  rd32(p + M_VERSION), MDB_DATA_VERSION);
    if (rd64(p + M_ADDRESS) != 0)
        return journal_damage_set(
            d, true, i, "meta page %u: a fixed map address 0x%" PRIx64 " (a journal never has one)",
            i, rd64(p + M_ADDRESS));
    read_db(p + M_DBS, &m->dbs[0]);
    read_db(p + M_DBS + DB_SIZE, &m->dbs[1]);
    m->mapsize = rd64(p + M_MAPSIZE);
    m->last_pg = rd64(p + M_LAST_PG);
    m->txnid = rd64(p + M_TXNID);
    if (m->dbs[0].pad != psize)
        return journal_damage_set(d, true, i, "meta page %u: page size %u, meta page 0 says %u", i,
                                  m->dbs[0].pad, psize);
    if (m->dbs[0].flags != DB_INTEGERKEY)
        return journal_damage_set(d, true, i, "meta page %u: free list flags 0x%x", i,
                                  m->dbs[0].flags);
    if (m->dbs[1].pad != 0 || m->dbs[1].flags != 0)
        return journal_damage_set(d, true, i, "meta page %u: main table flags 0x%x (pad %u)", i,
                                  m->dbs[1].flags, m->dbs[1].pad);
    if (m->last_pg < NUM_METAS - 1)
        return journal_damage_set(d, true, i, "meta page %u: last page %" PRIu64, i, m->last_pg);
    /* LMDB writes the meta data and zeros the rest of the page once, when it creates it. */
    for (size_t k = META_END; k < psize; k++)
        if (p[k] != 0)
            return journal_damage_set(
                d, true, i, "meta page %u: byte %zu past the meta data is not zero", i, k);
    return 0;
}

int journal_check_metas(const uint8_t *head, size_t headlen, uint64_t file_size,
                        struct journal_file_info *info, struct journal_damage *d)
{
    struct meta m[NUM_METAS];
    if (file_size == 0)
        return journal_damage_set(d, false, 0, "the data file is empty (0 bytes)");
    if (file_size < META_END || headlen < META_END)
        return journal_damage_set(d, false, 0,
                                  "the data file is truncated: %" PRIu64
                                  " bytes, shorter than its first meta page",
                                  file_size);
    uint32_t psize = rd32(head + M_DBS); /* the free list's pad is the page size */
    if (rd16(head + 10) == P_META && rd32(head + M_MAGIC) == MDB_MAGIC && !is_psize(psize))
        return journal_damage_set(d, true, 0,
                                  "meta page 0: page size %u is not a power of two from %u to %u",
                                  psize, MIN_PSIZE, MAX_PSIZE);
    if (!is_psize(psize))
        psize = MIN_PSIZE; /* reported by check_meta_page below */
    if (file_size < (uint64_t)2 * psize || headlen < (size_t)2 * psize)
        return journal_damage_set(d, false, 0,
                                  "the data file is truncated: %" PRIu64
                                  " bytes, shorter than its two meta pages of %u bytes",
                                  file_size, psize);
    for (unsigned i = 0; i < NUM_METAS; i++) {
        int rc = check_meta_page(head + (size_t)i * psize, i, psize, &m[i], d);
        if (rc < 0)
            return rc;
    }
    /* Commit n writes meta page n % 2, so the two pages hold consecutive transactions, each on
     * the page of its parity; LMDB uses the one with the larger id. */
    unsigned cur = m[0].txnid < m[1].txnid;
    const struct meta *c = &m[cur], *o = &m[!cur];
    if (c->txnid == 0)
        return journal_damage_set(d, false, 0,
                                  "no transaction was ever committed to the data file");
    if ((c->txnid & 1) != cur || o->txnid != c->txnid - 1)
        return journal_damage_set(d, true, cur,
                                  "meta pages: transaction ids %" PRIu64 " and %" PRIu64
                                  " are not consecutive commits",
                                  m[0].txnid, m[1].txnid);
    if (o->last_pg > c->last_pg)
        return journal_damage_set(d, true, !cur,
                                  "meta page %u: the previous transaction ends at page %" PRIu64
                                  ", after the current one (%" PRIu64 ")",
                                  !cur, o->last_pg, c->last_pg);
    /* LMDB never writes a page that a transaction took and gave back before its commit (a
     * "loose" page: on the free list, never flushed), so the file may end before the last page
     * the transaction counts. Such pages are free; the walk refuses any page in use past the end.
     * Free pages are named on the free list, 8 bytes each, so there cannot be more of them past
     * the end than the file has bytes / 8. */
    uint64_t pages = file_size / psize;
    if (c->last_pg >= pages && c->last_pg - pages >= file_size / 8)
        return journal_damage_set(d, false, 0,
                                  "the data file is truncated: %" PRIu64
                                  " bytes, but its last transaction uses %" PRIu64 " (%" PRIu64
                                  " pages of %u bytes)",
                                  file_size, (c->last_pg + 1) * psize, c->last_pg + 1, psize);
    /* The map size is the page size times a page count LMDB rounds to, never below what the
     * transaction uses, never near the end of the address space. */
    for (unsigned i = 0; i < NUM_METAS; i++)
        if (m[i].mapsize / psize <= m[i].last_pg || m[i].mapsize % psize != 0 ||
            m[i].mapsize > MAX_MAPSIZE)
            return journal_damage_set(
                d, true, i, "meta page %u: map size %" PRIu64 " for %" PRIu64 " pages of %u bytes",
                i, m[i].mapsize, m[i].last_pg + 1, psize);
    info->psize = psize;
    info->current = cur;
    info->txnid = c->txnid;
    info->last_pg = c->last_pg;
    return 0;
}

/* ---- the walk -------------------------------------------------------------------------------- */

enum kind { K_FREE, K_MAIN, K_DATASETS, K_LOG, K_META };

static const char *const table_names[] = {"datasets", "log", "meta"}; /* in key order */

struct key {
    const uint8_t *p;
    size_t n;
};

struct tree {
    enum kind kind;
    const char *name;
    struct db db;
    uint64_t branch, leaf, overflow, entries;
};

struct walk {
    const uint8_t *f;
    size_t size;
    uint32_t psize;
    const char *txn; /* "" or " of the previous transaction" */
    uint64_t txnid, last_pg;
    uint8_t *used, *freed; /* one bit per page */
    uint64_t nused, nfree;
    uint8_t cover[MAX_PSIZE / 16]; /* one bit per 2 bytes of the page being checked */
    volatile uint64_t *at_page;
    struct journal_damage *d;
    /* The main table's entries: the journal's three tables. */
    bool have[3];
    struct db tables[3];
    struct journal_check_stats *stats;
};

static bool bit_test(const uint8_t *b, uint64_t i)
{
    return b[i >> 3] & (1u << (i & 7));
}

static void bit_set(uint8_t *b, uint64_t i)
{
    b[i >> 3] |= (uint8_t)(1u << (i & 7));
}

/* Damage on page pg of tree t. */
static int bad(struct walk *w, const struct tree *t, uint64_t pg, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static int bad(struct walk *w, const struct tree *t, uint64_t pg, const char *fmt, ...)
{
    char msg[SLUICE_ERRMSG_SIZE];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return journal_damage_set(w->d, true, pg, "%s%s: %s", t->name, w->txn, msg);
}

static const uint8_t *page_at(const struct walk *w, uint64_t pg)
{
    return w->f + (size_t)pg * w->psize;
}

/* Claims page pg (and the n - 1 after it) for a tree, named from page `from`. */
static int claim(struct walk *w, const struct tree *t, uint64_t from, uint64_t pg, uint64_t n)
{
    if (pg < NUM_METAS || pg > w->last_pg || n > w->last_pg - pg + 1)
        return bad(w, t, from, "page %" PRIu64 "%s is outside the %" PRIu64 " pages in use", pg,
                   n > 1 ? " and the ones after it" : "", w->last_pg + 1);
    if (pg + n > w->size / w->psize)
        return journal_damage_set(w->d, true, from,
                                  "the data file is truncated: %zu bytes, but page %" PRIu64
                                  "%s of the %s%s is past its end",
                                  w->size, pg + n - 1, n > 1 ? " (an overflow run)" : "", t->name,
                                  w->txn);
    for (uint64_t k = 0; k < n; k++) {
        if (bit_test(w->used, pg + k))
            return bad(w, t, from, "page %" PRIu64 " is used twice", pg + k);
        bit_set(w->used, pg + k);
    }
    w->nused += n;
    if (w->at_page)
        *w->at_page = pg;
    return 0;
}

/* LMDB's default order: bytes compared, then the shorter first. The free list's keys are
 * transaction ids (MDB_INTEGERKEY: native integers). */
static int key_cmp(enum kind kind, struct key a, struct key b)
{
    if (kind == K_FREE && a.n == 8 && b.n == 8) {
        uint64_t x = rd64(a.p), y = rd64(b.p);
        return x < y ? -1 : x > y;
    }
    size_t n = a.n < b.n ? a.n : b.n;
    int c = n ? memcmp(a.p, b.p, n) : 0;
    if (c)
        return c;
    return a.n < b.n ? -1 : a.n > b.n;
}

/* A value's bytes: inline in the node, or in an overflow run (claimed here). */
static int leaf_value(struct walk *w, struct tree *t, uint64_t pg, unsigned idx,
                      const uint8_t *node, uint16_t nflags, uint32_t dsize, const uint8_t **val)
{
    uint16_t ksize = rd16(node + 6);
    const uint8_t *data = node + NODESIZE + ksize;
    if (!(nflags & F_BIGDATA)) {
        *val = data;
        return 0;
    }
    uint64_t ov = rd64(data);
    uint64_t need = ((uint64_t)PAGEHDRSZ - 1 + dsize) / w->psize + 1;
    if (ov < NUM_METAS || ov > w->last_pg)
        return bad(w, t, pg,
                   "node %u: its value's page %" PRIu64 " is outside the %" PRIu64 " pages in use",
                   idx, ov, w->last_pg + 1);
    if (ov >= w->size / w->psize)
        return journal_damage_set(w->d, true, pg,
                                  "the data file is truncated: %zu bytes, but page %" PRIu64
                                  " of the %s%s is past its end",
                                  w->size, ov, t->name, w->txn);
    const uint8_t *op = page_at(w, ov);
    uint32_t npages = rd32(op + 12);
    if (rd64(op) != ov || rd16(op + 8) != 0 || rd16(op + 10) != P_OVERFLOW)
        return bad(w, t, ov,
                   "node %u of page %" PRIu64 ": its value's page is not an overflow "
                   "page (page number %" PRIu64 ", flags 0x%x)",
                   idx, pg, rd64(op), rd16(op + 10));
    if (npages < need)
        return bad(w, t, ov, "an overflow run of %u pages holds a value of %u bytes", npages,
                   dsize);
    int rc = claim(w, t, ov, ov, npages);
    if (rc < 0)
        return rc;
    t->overflow += npages;
    *val = op + PAGEHDRSZ;
    return 0;
}

/* Checks a leaf entry's key, flags and value for the tree's kind. */
static int check_entry(struct walk *w, struct tree *t, uint64_t pg, unsigned idx, struct key k,
                       uint16_t nflags, uint32_t dsize, const uint8_t *val)
{
    switch (t->kind) {
    case K_FREE: {
        if (k.n != 8)
            return bad(w, t, pg, "node %u: a key of %zu bytes, not a transaction id", idx, k.n);
        if (rd64(k.p) > w->txnid)
            return bad(w, t, pg, "node %u: pages freed by transaction %" PRIu64 ", after %" PRIu64,
                       idx, rd64(k.p), w->txnid);
        if (dsize < 8 || dsize % 8 != 0 || rd64(val) != dsize / 8 - 1)
            return bad(w, t, pg, "node %u: a list of %" PRIu64 " pages in %u bytes", idx,
                       dsize >= 8 ? rd64(val) : 0, dsize);
        uint64_t n = dsize / 8 - 1, prev = UINT64_MAX;
        for (uint64_t i = 1; i <= n; i++) {
            uint64_t p = rd64(val + 8 * i);
            if (p < NUM_METAS || p > w->last_pg || p >= prev)
                return bad(w, t, pg,
                           "node %u: free page %" PRIu64 " is out of order or outside "
                           "the %" PRIu64 " pages in use",
                           idx, p, w->last_pg + 1);
            if (bit_test(w->freed, p))
                return bad(w, t, pg, "page %" PRIu64 " is on the free list twice", p);
            bit_set(w->freed, p);
            prev = p;
        }
        w->nfree += n;
        return 0;
    }
    case K_MAIN: {
        int which = -1;
        for (int i = 0; i < 3; i++)
            if (k.n == strlen(table_names[i]) && memcmp(k.p, table_names[i], k.n) == 0)
                which = i;
        if (which < 0) {
            char name[40];
            size_t n = k.n < 32 ? k.n : 32;
            for (size_t i = 0; i < n; i++)
                name[i] = k.p[i] >= 0x20 && k.p[i] < 0x7f ? (char)k.p[i] : '?';
            name[n] = '\0';
            return bad(w, t, pg, "node %u: '%s%s' is not one of the journal's tables", idx, name,
                       k.n > n ? "..." : "");
        }
        if (nflags != F_SUBDATA || dsize != DB_SIZE)
            return bad(w, t, pg, "node %u: the '%s' table's record (flags 0x%x, %u bytes)", idx,
                       table_names[which], nflags, dsize);
        read_db(val, &w->tables[which]);
        w->have[which] = true;
        return 0;
    }
    case K_LOG:
        if (k.n != 8)
            return bad(w, t, pg, "node %u: a key of %zu bytes, not a sequence number", idx, k.n);
        return 0;
    case K_DATASETS:
    case K_META:
        if (k.n == 0)
            return bad(w, t, pg, "node %u: an empty key", idx);
        return 0;
    }
    return 0;
}

static int walk_page(struct walk *w, struct tree *t, uint64_t from, uint64_t pg, unsigned level,
                     const struct key *lo, const struct key *hi);

/* The nodes of page pg: headers inside the page, packed from its upper bound to its end as LMDB
 * packs them, keys in order and within [lo, hi); children and values followed. */
static int walk_nodes(struct walk *w, struct tree *t, uint64_t pg, bool branch, unsigned level,
                      const struct key *lo, const struct key *hi)
{
    const uint8_t *p = page_at(w, pg);
    uint32_t psize = w->psize;
    uint16_t lower = rd16(p + 12), upper = rd16(p + 14);
    if (lower < PAGEHDRSZ + 2 || lower % 2 != 0 || upper < lower || upper > psize)
        return bad(w, t, pg, "free space from %u to %u is not inside the page", lower, upper);
    unsigned n = (lower - PAGEHDRSZ) / 2;
    memset(w->cover, 0, psize / 16);
    uint64_t packed = 0;
    struct key prev = {0};
    for (unsigned i = 0; i < n; i++) {
        uint16_t off = rd16(p + PAGEHDRSZ + 2 * i);
        if (off < upper || off % 2 != 0 || (uint32_t)off + NODESIZE > psize)
            return bad(w, t, pg, "node %u is at offset %u, outside the nodes (%u to %u)", i, off,
                       upper, psize);
        const uint8_t *node = p + off;
        uint16_t nflags = rd16(node + 4), ksize = rd16(node + 6);
        uint32_t dsize = rd16(node) | (uint32_t)rd16(node + 2) << 16;
        uint64_t size = (uint64_t)NODESIZE + ksize;
        if (ksize > MAX_KEY)
            return bad(w, t, pg, "node %u: a key of %u bytes", i, ksize);
        if (!branch) {
            /* The main table holds only tables; the others plain values, small or large. */
            if (nflags & ~(t->kind == K_MAIN ? F_SUBDATA : F_BIGDATA))
                return bad(w, t, pg, "node %u: flags 0x%x", i, nflags);
            size += nflags & F_BIGDATA ? 8 : dsize;
        }
        if (off + size > psize)
            return bad(w, t, pg, "node %u runs past the end of the page (%" PRIu64 " bytes at %u)",
                       i, size, off);
        size = (size + 1) & ~(uint64_t)1;
        for (uint64_t u = off / 2; u < (off + size) / 2; u++) {
            if (bit_test(w->cover, u))
                return bad(w, t, pg, "node %u overlaps another node", i);
            bit_set(w->cover, u);
        }
        packed += size;
        struct key k = {node + NODESIZE, ksize};
        /* A branch's first key is never compared (its child holds everything below the second). */
        if (!branch || i > 0) {
            if ((i > (branch ? 1u : 0u) && key_cmp(t->kind, prev, k) >= 0) ||
                (lo && key_cmp(t->kind, k, *lo) < 0) || (hi && key_cmp(t->kind, k, *hi) >= 0))
                return bad(w, t, pg, "node %u: its key is out of order", i);
            prev = k;
        }
    }
    if (packed != (uint64_t)psize - upper)
        return bad(w, t, pg, "the nodes take %" PRIu64 " bytes, the page says %u", packed,
                   psize - upper);

    for (unsigned i = 0; i < n; i++) {
        const uint8_t *node = p + rd16(p + PAGEHDRSZ + 2 * i);
        uint16_t nflags = rd16(node + 4), ksize = rd16(node + 6);
        struct key k = {node + NODESIZE, ksize};
        if (branch) {
            uint64_t child = rd16(node) | (uint64_t)rd16(node + 2) << 16 | (uint64_t)nflags << 32;
            struct key klo, khi;
            const struct key *clo = lo, *chi = hi;
            if (i > 0) {
                klo = k;
                clo = &klo;
            }
            if (i + 1 < n) {
                const uint8_t *next = p + rd16(p + PAGEHDRSZ + 2 * (i + 1));
                khi = (struct key){next + NODESIZE, rd16(next + 6)};
                chi = &khi;
            }
            int rc = walk_page(w, t, pg, child, level + 1, clo, chi);
            if (rc < 0)
                return rc;
            continue;
        }
        uint32_t dsize = rd16(node) | (uint32_t)rd16(node + 2) << 16;
        const uint8_t *val = NULL;
        int rc = leaf_value(w, t, pg, i, node, nflags, dsize, &val);
        if (rc == 0)
            rc = check_entry(w, t, pg, i, k, nflags, dsize, val);
        if (rc < 0)
            return rc;
        t->entries++;
    }
    return 0;
}

static int walk_page(struct walk *w, struct tree *t, uint64_t from, uint64_t pg, unsigned level,
                     const struct key *lo, const struct key *hi)
{
    int rc = claim(w, t, from, pg, 1);
    if (rc < 0)
        return rc;
    const uint8_t *p = page_at(w, pg);
    uint16_t flags = rd16(p + 10);
    bool branch = level < t->db.depth;
    if (rd64(p) != pg)
        return bad(w, t, pg, "the page says it is page %" PRIu64, rd64(p));
    if (rd16(p + 8) != 0 || flags != (branch ? P_BRANCH : P_LEAF))
        return bad(w, t, pg, "flags 0x%x (pad %u) where level %u of %u needs a %s page", flags,
                   rd16(p + 8), level, t->db.depth, branch ? "branch" : "leaf");
    if (branch)
        t->branch++;
    else
        t->leaf++;
    return walk_nodes(w, t, pg, branch, level, lo, hi);
}

/* Walks one tree from its root and checks the counts its record keeps. from: the page holding
 * the record (a meta page, or the main table's leaf). */
static int walk_tree(struct walk *w, struct tree *t, uint64_t from)
{
    const struct db *db = &t->db;
    if (db->root == P_INVALID) {
        if (db->depth || db->branch || db->leaf || db->overflow || db->entries)
            return bad(w, t, from, "an empty tree of depth %u with %" PRIu64 " entries", db->depth,
                       db->entries);
        return 0;
    }
    if (db->depth == 0 || db->depth > MAX_DEPTH)
        return bad(w, t, from, "a tree of depth %u", db->depth);
    int rc = walk_page(w, t, from, db->root, 1, NULL, NULL);
    if (rc < 0)
        return rc;
    if (t->branch != db->branch || t->leaf != db->leaf || t->overflow != db->overflow ||
        t->entries != db->entries)
        return bad(w, t, from,
                   "it has %" PRIu64 " branch, %" PRIu64 " leaf and %" PRIu64
                   " overflow pages and %" PRIu64 " entries, its record says %" PRIu64 ", %" PRIu64
                   ", %" PRIu64 " and %" PRIu64,
                   t->branch, t->leaf, t->overflow, t->entries, db->branch, db->leaf, db->overflow,
                   db->entries);
    return 0;
}

/* Walks every tree of the transaction of meta page mi. */
static int walk_txn(struct walk *w, unsigned mi, bool current)
{
    const uint8_t *mp = page_at(w, mi);
    struct meta m;
    read_db(mp + M_DBS, &m.dbs[0]);
    read_db(mp + M_DBS + DB_SIZE, &m.dbs[1]);
    w->txn = current ? "" : " of the previous transaction";
    w->txnid = rd64(mp + M_TXNID);
    w->last_pg = rd64(mp + M_LAST_PG);
    w->nused = w->nfree = 0;
    memset(w->have, 0, sizeof w->have);
    size_t bytes = (size_t)(w->last_pg / 8 + 1);
    memset(w->used, 0, bytes);
    memset(w->freed, 0, bytes);

    struct tree free_list = {.kind = K_FREE, .name = "free list", .db = m.dbs[0]};
    struct tree main_table = {.kind = K_MAIN, .name = "main table", .db = m.dbs[1]};
    /* Transaction 0 is the empty state LMDB writes when it creates a data file (and a compacted
     * copy writes beside its one transaction): nothing in it. */
    if (w->txnid == 0 && !current &&
        (m.dbs[0].root != P_INVALID || m.dbs[1].root != P_INVALID || w->last_pg != NUM_METAS - 1))
        return journal_damage_set(w->d, true, mi,
                                  "meta page %u: transaction 0 is not the empty one", mi);
    int rc = walk_tree(w, &free_list, mi);
    if (rc == 0)
        rc = walk_tree(w, &main_table, mi);
    if (rc < 0)
        return rc;
    if (w->txnid == 0 && !current)
        return 0;
    /* An empty main table is a data file LMDB created that never became a journal. */
    for (int i = 0; i < 3; i++) {
        if (!w->have[i])
            return bad(w, &main_table, mi, "no '%s' table", table_names[i]);
    }
    static const enum kind kinds[] = {K_DATASETS, K_LOG, K_META};
    static const char *const names[] = {"datasets table", "log table", "meta table"};
    uint64_t entries[3];
    for (int i = 0; i < 3; i++) {
        struct tree t = {.kind = kinds[i], .name = names[i], .db = w->tables[i]};
        if (t.db.pad != 0 || t.db.flags != 0)
            return bad(w, &main_table, m.dbs[1].root, "the '%s' table's flags 0x%x (pad %u)",
                       table_names[i], t.db.flags, t.db.pad);
        rc = walk_tree(w, &t, m.dbs[1].root);
        if (rc < 0)
            return rc;
        entries[i] = t.entries;
    }
    for (size_t i = 0; i < bytes; i++) {
        if (w->used[i] & w->freed[i]) {
            uint64_t pg = (uint64_t)i * 8 + (unsigned)__builtin_ctz(w->used[i] & w->freed[i]);
            return bad(w, &free_list, pg, "page %" PRIu64 " is on the free list and in use", pg);
        }
    }
    if (w->nused + w->nfree + NUM_METAS != w->last_pg + 1)
        return journal_damage_set(w->d, true, mi,
                                  "meta page %u%s: its trees use %" PRIu64
                                  " pages and its free list names %" PRIu64 ", but it has %" PRIu64
                                  " pages besides the meta pages",
                                  mi, w->txn, w->nused, w->nfree, w->last_pg + 1 - NUM_METAS);
    if (current && w->stats) {
        w->stats->pages = w->last_pg + 1;
        w->stats->used = w->nused;
        w->stats->free = w->nfree;
        w->stats->datasets = entries[0];
        w->stats->records = entries[1];
        w->stats->meta = entries[2];
    }
    return 0;
}

int journal_check_pages(const uint8_t *file, size_t size, volatile uint64_t *at_page,
                        struct journal_check_stats *stats, struct journal_damage *d)
{
    struct journal_file_info info;
    size_t headlen = size < JOURNAL_CHECK_HEAD ? size : JOURNAL_CHECK_HEAD;
    int rc = journal_check_metas(file, headlen, size, &info, d);
    if (rc < 0)
        return rc;
    struct walk *w = calloc(1, sizeof *w);
    size_t bytes = (size_t)(info.last_pg / 8 + 1);
    if (w) {
        w->used = malloc(bytes);
        w->freed = malloc(bytes);
    }
    if (!w || !w->used || !w->freed) {
        rc = SLUICE_ERR_NOMEM;
        goto out;
    }
    w->f = file;
    w->size = size;
    w->psize = info.psize;
    w->at_page = at_page;
    w->d = d;
    w->stats = stats;
    /* The current transaction first: damage there is what matters most. */
    rc = walk_txn(w, info.current, true);
    if (rc == 0)
        rc = walk_txn(w, !info.current, false);
out:
    if (w) {
        free(w->used);
        free(w->freed);
    }
    free(w);
    return rc;
}
