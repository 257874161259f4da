/* The structural checks of a journal's data file (src/journal/check.c), on images built in
 * memory: a small journal laid out exactly as LMDB lays one out (two meta pages, the main table,
 * a log of two levels, a datasets table with a value on overflow pages, a meta table, a free
 * list naming one free page) passes; then each kind of damage, one at a time, is named with its
 * page. No disk, no LMDB. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "common/error.h"
#include "journal/check.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PS 4096
#define NPAGES 12
#define P_INVALID UINT64_MAX

/* ---- an image -------------------------------------------------------------------------------- */

static void w16(uint8_t *p, uint16_t v)
{
    memcpy(p, &v, 2);
}

static void w32(uint8_t *p, uint32_t v)
{
    memcpy(p, &v, 4);
}

static void w64(uint8_t *p, uint64_t v)
{
    memcpy(p, &v, 8);
}

struct node {
    const void *key;
    uint16_t klen;
    const void *data; /* leaf: the value (or NULL with big: on overflow page `child`) */
    uint32_t dlen;
    uint16_t flags;
    uint64_t child; /* branch: the child page; big leaf: the overflow page */
};

/* Lays out a branch or leaf page as LMDB does: the pointers after the header, the nodes packed
 * from the end of the page down, each rounded up to an even size. */
static void tree_page(uint8_t *img, uint64_t pg, bool branch, const struct node *nodes, int n)
{
    uint8_t *p = img + pg * PS;
    memset(p, 0, PS);
    w64(p, pg);
    w16(p + 10, branch ? 0x01 : 0x02);
    uint16_t upper = PS;
    for (int i = 0; i < n; i++) {
        const struct node *nd = &nodes[i];
        bool big = nd->flags & 0x01;
        size_t size = 8 + nd->klen + (branch ? 0 : big ? 8 : nd->dlen);
        size = (size + 1) & ~(size_t)1;
        upper = (uint16_t)(upper - size);
        uint8_t *q = p + upper;
        if (branch) {
            w16(q, (uint16_t)nd->child);
            w16(q + 2, (uint16_t)(nd->child >> 16));
            w16(q + 4, (uint16_t)(nd->child >> 32));
        } else {
            w16(q, (uint16_t)nd->dlen);
            w16(q + 2, (uint16_t)(nd->dlen >> 16));
            w16(q + 4, nd->flags);
        }
        w16(q + 6, nd->klen);
        memcpy(q + 8, nd->key, nd->klen);
        if (!branch && big)
            w64(q + 8 + nd->klen, nd->child);
        else if (!branch && nd->dlen)
            memcpy(q + 8 + nd->klen, nd->data, nd->dlen);
        w16(p + 16 + 2 * i, upper);
    }
    w16(p + 12, (uint16_t)(16 + 2 * n));
    w16(p + 14, upper);
}

struct db {
    uint32_t pad;
    uint16_t flags, depth;
    uint64_t branch, leaf, overflow, entries, root;
};

static void put_db(uint8_t *p, const struct db *db)
{
    w32(p, db->pad);
    w16(p + 4, db->flags);
    w16(p + 6, db->depth);
    w64(p + 8, db->branch);
    w64(p + 16, db->leaf);
    w64(p + 24, db->overflow);
    w64(p + 32, db->entries);
    w64(p + 40, db->root);
}

static const struct db free_db = {PS, 0x08, 1, 0, 1, 0, 1, 10};
static const struct db main_db = {0, 0, 1, 0, 1, 0, 3, 2};

static void meta_page(uint8_t *img, unsigned i, uint64_t txnid, const struct db *fr,
                      const struct db *mn, uint64_t last_pg)
{
    uint8_t *p = img + i * PS;
    memset(p, 0, PS);
    w64(p, i);
    w16(p + 10, 0x08);
    w32(p + 16, 0xBEEFC0DE);
    w32(p + 20, 1);
    w64(p + 32, (uint64_t)1 << 20);
    put_db(p + 40, fr);
    put_db(p + 88, mn);
    w64(p + 136, last_pg);
    w64(p + 144, txnid);
}

static uint8_t seqkeys[5][8];

/* The image: transaction 2 on meta page 0, transaction 1 on meta page 1, both naming the same
 * trees (a transaction that changed nothing LMDB keeps):
 *   2 main table leaf    3 log branch (children 8, 9)   4 meta table leaf
 *   5 datasets leaf (one value of 5000 bytes on overflow pages 6 and 7)
 *   8, 9 log leaves (records 1, 2 and 3, 4)   10 free list leaf (names page 11)   11 free */
static uint8_t *image(void)
{
    uint8_t *img = calloc(NPAGES, PS);
    assert_non_null(img);
    for (int s = 1; s <= 4; s++)
        for (int i = 0; i < 8; i++)
            seqkeys[s][i] = (uint8_t)(i == 7 ? s : 0);
    uint8_t dbs[3][48];
    struct db datasets = {0, 0, 1, 0, 1, 2, 1, 5};
    struct db log = {0, 0, 2, 1, 2, 0, 4, 3};
    struct db meta = {0, 0, 1, 0, 1, 0, 1, 4};
    put_db(dbs[0], &datasets);
    put_db(dbs[1], &log);
    put_db(dbs[2], &meta);
    struct node main_nodes[] = {{"datasets", 8, dbs[0], 48, 0x02, 0},
                                {"log", 3, dbs[1], 48, 0x02, 0},
                                {"meta", 4, dbs[2], 48, 0x02, 0}};
    tree_page(img, 2, false, main_nodes, 3);
    struct node branch[] = {{"", 0, NULL, 0, 0, 8}, {seqkeys[3], 8, NULL, 0, 0, 9}};
    tree_page(img, 3, true, branch, 2);
    struct node meta_nodes[] = {{"format", 6, "\x01\x02\x03\x04\x01value", 10, 0, 0}};
    tree_page(img, 4, false, meta_nodes, 1);
    struct node ds[] = {{"d0", 2, NULL, 5000, 0x01, 6}};
    tree_page(img, 5, false, ds, 1);
    uint8_t *ov = img + 6 * PS;
    w64(ov, 6);
    w16(ov + 10, 0x04);
    w32(ov + 12, 2);
    memset(ov + 16, 'x', 5000);
    struct node l1[] = {{seqkeys[1], 8, "rec-1", 5, 0, 0}, {seqkeys[2], 8, "rec-2", 5, 0, 0}};
    struct node l2[] = {{seqkeys[3], 8, "rec-3", 5, 0, 0}, {seqkeys[4], 8, "rec-4", 5, 0, 0}};
    tree_page(img, 8, false, l1, 2);
    tree_page(img, 9, false, l2, 2);
    uint8_t txn1[8], idl[16];
    w64(txn1, 1);
    w64(idl, 1);
    w64(idl + 8, 11);
    struct node fr[] = {{txn1, 8, idl, 16, 0, 0}};
    tree_page(img, 10, false, fr, 1);
    memset(img + 11 * PS, 0xa5, PS);
    meta_page(img, 0, 2, &free_db, &main_db, NPAGES - 1);
    meta_page(img, 1, 1, &free_db, &main_db, NPAGES - 1);
    return img;
}

/* The first node of page pg. */
static uint8_t *node0(uint8_t *img, uint64_t pg, int i)
{
    uint16_t off;
    memcpy(&off, img + pg * PS + 16 + 2 * i, 2);
    return img + pg * PS + off;
}

static void expect(const uint8_t *img, size_t len, const char *want)
{
    struct journal_damage d;
    char msg[SLUICE_ERRMSG_SIZE];
    int rc = journal_check_pages(img, len, NULL, NULL, &d);
    if (rc == 0)
        fail_msg("accepted, expected: %s", want);
    assert_int_equal(rc, SLUICE_ERR_CORRUPT);
    journal_damage_format(&d, msg, sizeof msg);
    assert_string_equal(msg, want);
}

/* ---- tests ----------------------------------------------------------------------------------- */

static void test_sound_image(void **unused)
{
    (void)unused;
    uint8_t *img = image();
    struct journal_damage d;
    struct journal_check_stats st;
    volatile uint64_t at = 0;
    int rc = journal_check_pages(img, NPAGES * PS, &at, &st, &d);
    if (rc != 0) {
        char msg[SLUICE_ERRMSG_SIZE];
        journal_damage_format(&d, msg, sizeof msg);
        fail_msg("%s", msg);
    }
    assert_int_equal(st.pages, NPAGES);
    assert_int_equal(st.used, 9);
    assert_int_equal(st.free, 1);
    assert_int_equal(st.records, 4);
    assert_int_equal(st.datasets, 1);
    assert_int_equal(st.meta, 1);
    assert_true(at >= 2 && at < NPAGES);

    struct journal_file_info info;
    assert_int_equal(journal_check_metas(img, NPAGES * PS, NPAGES * PS, &info, &d), 0);
    assert_int_equal(info.psize, PS);
    assert_int_equal(info.current, 0);
    assert_int_equal(info.txnid, 2);
    assert_int_equal(info.last_pg, NPAGES - 1);
    /* A file longer than the pages in use is fine (a commit that failed after growing it). */
    uint8_t *longer = calloc(NPAGES + 2, PS);
    memcpy(longer, img, NPAGES * PS);
    assert_int_equal(journal_check_pages(longer, (NPAGES + 2) * PS, NULL, NULL, &d), 0);
    free(longer);
    free(img);
}

static void test_damage_format(void **unused)
{
    (void)unused;
    struct journal_damage d;
    char msg[SLUICE_ERRMSG_SIZE];
    assert_int_equal(journal_damage_set(&d, false, 0, "a %s", "thing"), SLUICE_ERR_CORRUPT);
    journal_damage_format(&d, msg, sizeof msg);
    assert_string_equal(msg, "journal damaged: a thing");
    journal_damage_set(&d, true, 3, "b");
    journal_damage_format(&d, msg, sizeof msg);
    assert_string_equal(msg, "journal damaged: b (at page 3)");
    d.has_seq = true;
    d.seq = 7;
    journal_damage_format(&d, msg, sizeof msg);
    assert_string_equal(msg, "journal damaged: b (at page 3 / record seq 7)");
    d.has_page = false;
    journal_damage_format(&d, msg, sizeof msg);
    assert_string_equal(msg, "journal damaged: b (at record seq 7)");
}

static void test_size(void **unused)
{
    (void)unused;
    uint8_t *img = image();
    expect(img, 0, "journal damaged: the data file is empty (0 bytes)");
    expect(img, 100,
           "journal damaged: the data file is truncated: 100 bytes, shorter than its first meta "
           "page");
    expect(img, 5000,
           "journal damaged: the data file is truncated: 5000 bytes, shorter than its two meta "
           "pages of 4096 bytes");
    /* Page 11 is free: LMDB never writes a page a transaction took and gave back (a loose
     * page), so a sound file may end before it. */
    struct journal_damage d;
    assert_int_equal(journal_check_pages(img, (NPAGES - 1) * PS, NULL, NULL, &d), 0);
    /* Any shorter and a page in use is missing: the free list's root (page 10) comes first. */
    for (size_t pages = 2; pages < NPAGES - 1; pages++) {
        char want[256];
        snprintf(want, sizeof want,
                 "journal damaged: the data file is truncated: %zu bytes, but page 10 of the "
                 "free list is past its end (at page 0)",
                 pages * PS);
        expect(img, pages * PS, want);
    }
    free(img);
    img = image();
    /* More pages past the end than a free list the file's size could name. */
    w64(img + 136, 100000);
    w64(img + PS + 136, 100000);
    expect(img, NPAGES * PS,
           "journal damaged: the data file is truncated: 49152 bytes, but its last transaction "
           "uses 409604096 (100001 pages of 4096 bytes)");
    free(img);
}

/* One damage: a change to the image and what the check must say about it. */
struct damage_case {
    const char *name;
    void (*damage)(uint8_t *img);
    const char *want;
};

static void magic(uint8_t *img)
{
    img[PS + 16] ^= 0x01;
}
static void version(uint8_t *img)
{
    w32(img + 20, 2);
}
static void psize(uint8_t *img)
{
    w32(img + 40, 1000);
}
static void meta_flags(uint8_t *img)
{
    w16(img + PS + 10, 0x09);
}
static void txnids(uint8_t *img)
{
    w64(img + PS + 144, 5);
}
static void txn_parity(uint8_t *img)
{
    w64(img + 144, 3); /* the current transaction on the page of the other parity */
}
static void meta_tail(uint8_t *img)
{
    img[200] = 1;
}
static void mapsize(uint8_t *img)
{
    w64(img + 32, ((uint64_t)1 << 20) + 1);
}
static void mapsize_small(uint8_t *img)
{
    w64(img + PS + 32, 8 * PS);
}
static void fixed_address(uint8_t *img)
{
    w64(img + 24, 0x7f0000000000);
}
static void free_flags(uint8_t *img)
{
    w16(img + 44, 0x0c); /* MDB_DUPSORT on the free list */
}
static void main_flags(uint8_t *img)
{
    w16(img + 88 + 4, 0x04);
}
static void child_outside(uint8_t *img)
{
    uint8_t *n = node0(img, 3, 1);
    w16(n, 99);
}
static void page_number(uint8_t *img)
{
    w64(img + 8 * PS, 7);
}
static void leaf_as_branch(uint8_t *img)
{
    w16(img + 9 * PS + 10, 0x01);
}
static void node_outside(uint8_t *img)
{
    w16(img + 8 * PS + 16, 10);
}
static void node_too_long(uint8_t *img)
{
    w16(node0(img, 9, 1), 200); /* record 4's value now 200 bytes: past the page's end */
}
static void node_overlaps(uint8_t *img)
{
    uint16_t off;
    memcpy(&off, img + 8 * PS + 16 + 2, 2);
    w16(img + 8 * PS + 16, off); /* two pointers to one node */
}
static void lower_bound(uint8_t *img)
{
    w16(img + 8 * PS + 12, 16 + 2 * 3); /* a third pointer, into the free space */
}
static void upper_bound(uint8_t *img)
{
    uint16_t upper;
    memcpy(&upper, img + 8 * PS + 14, 2);
    w16(img + 8 * PS + 14, (uint16_t)(upper - 2));
}
static void keys_swapped(uint8_t *img)
{
    node0(img, 8, 1)[8 + 7] = 0; /* record 2's key becomes 0, before record 1 */
}
static void key_below_parent(uint8_t *img)
{
    node0(img, 9, 1)[8 + 7] = 2; /* record 3 (the first of page 9) becomes 2: below the bound */
}
static void overflow_short(uint8_t *img)
{
    w32(img + 6 * PS + 12, 1);
}
static void overflow_not(uint8_t *img)
{
    w16(img + 6 * PS + 10, 0x02);
}
static void overflow_outside(uint8_t *img)
{
    uint8_t *n = node0(img, 5, 0);
    w64(n + 8 + 2, 40);
}
static void used_twice(uint8_t *img)
{
    w64(node0(img, 2, 2) + 8 + 4 + 40, 8); /* the meta table's root: a page of the log */
}
static void counts(uint8_t *img)
{
    w64(node0(img, 2, 1) + 8 + 3 + 32, 5); /* the log's entries */
}
static void depth(uint8_t *img)
{
    w16(node0(img, 2, 1) + 8 + 3 + 6, 3);
}
static void table_name(uint8_t *img)
{
    node0(img, 2, 1)[8 + 1] = 'g';
}
static void table_flags(uint8_t *img)
{
    w16(node0(img, 2, 0) + 4, 0x03);
}
static void table_record(uint8_t *img)
{
    w16(node0(img, 2, 2) + 8 + 4 + 4, 0x04); /* MDB_DUPSORT on the meta table */
}
static void log_key_size(uint8_t *img)
{
    struct node l[] = {{"\0\0\0\0\0\0\0\1x", 9, "rec-1", 5, 0, 0},
                       {seqkeys[2], 8, "rec-2", 5, 0, 0}};
    tree_page(img, 8, false, l, 2);
}
static void freed_in_use(uint8_t *img)
{
    w64(node0(img, 10, 0) + 8 + 8 + 8, 9);
}
static void freed_outside(uint8_t *img)
{
    w64(node0(img, 10, 0) + 8 + 8 + 8, 12);
}
static void free_list_short(uint8_t *img)
{
    w64(node0(img, 10, 0) + 8 + 8, 2); /* says 2 pages, holds 1 */
}
static void page_leaked(uint8_t *img)
{
    /* The free list names nothing: page 11 belongs to nobody. */
    uint8_t txn1[8], idl[8];
    w64(txn1, 1);
    w64(idl, 0);
    struct node fr[] = {{txn1, 8, idl, 8, 0, 0}};
    tree_page(img, 10, false, fr, 1);
}
static void freed_by_future(uint8_t *img)
{
    w64(node0(img, 10, 0) + 8, 9);
}
static void previous_txn_zero(uint8_t *img)
{
    /* Transaction 1 current on page 1 and transaction 0, which must be LMDB's empty one. */
    w64(img + 144, 0);
}
static void previous_damaged(uint8_t *img)
{
    /* Only the previous transaction's record of the main table is off. */
    w64(img + PS + 88 + 32, 4);
}

static const struct damage_case cases[] = {
    {"magic", magic,
     "journal damaged: meta page 1: not an LMDB data file (magic 0xbeefc0df) (at page 1)"},
    {"version", version, "journal damaged: meta page 0: LMDB data format 2, not 1 (at page 0)"},
    {"page size", psize,
     "journal damaged: meta page 0: page size 1000 is not a power of two from 512 to 32768 (at "
     "page 0)"},
    {"meta flags", meta_flags,
     "journal damaged: meta page 1: not a meta page (page number 1, flags 0x9) (at page 1)"},
    {"transaction ids", txnids,
     "journal damaged: meta pages: transaction ids 2 and 5 are not consecutive commits (at page "
     "1)"},
    {"transaction parity", txn_parity,
     "journal damaged: meta pages: transaction ids 3 and 1 are not consecutive commits (at page "
     "0)"},
    {"meta page tail", meta_tail,
     "journal damaged: meta page 0: byte 200 past the meta data is not zero (at page 0)"},
    {"map size", mapsize,
     "journal damaged: meta page 0: map size 1048577 for 12 pages of 4096 bytes (at page 0)"},
    {"map size small", mapsize_small,
     "journal damaged: meta page 1: map size 32768 for 12 pages of 4096 bytes (at page 1)"},
    {"fixed address", fixed_address,
     "journal damaged: meta page 0: a fixed map address 0x7f0000000000 (a journal never has "
     "one) (at page 0)"},
    {"free list flags", free_flags,
     "journal damaged: meta page 0: free list flags 0xc (at page 0)"},
    {"main table flags", main_flags,
     "journal damaged: meta page 0: main table flags 0x4 (pad 0) (at page 0)"},
    {"child outside", child_outside,
     "journal damaged: log table: page 99 is outside the 12 pages in use (at page 3)"},
    {"page number", page_number,
     "journal damaged: log table: the page says it is page 7 (at page 8)"},
    {"leaf as branch", leaf_as_branch,
     "journal damaged: log table: flags 0x1 (pad 0) where level 2 of 2 needs a leaf page (at page "
     "9)"},
    {"node outside", node_outside,
     "journal damaged: log table: node 0 is at offset 10, outside the nodes (4052 to 4096) (at "
     "page 8)"},
    {"node too long", node_too_long,
     "journal damaged: log table: node 1 runs past the end of the page (216 bytes at 4052) (at "
     "page 9)"},
    {"nodes overlap", node_overlaps,
     "journal damaged: log table: node 1 overlaps another node (at page 8)"},
    {"lower bound", lower_bound,
     "journal damaged: log table: node 2 is at offset 0, outside the nodes (4052 to 4096) (at "
     "page 8)"},
    {"upper bound", upper_bound,
     "journal damaged: log table: the nodes take 44 bytes, the page says 46 (at page 8)"},
    {"keys out of order", keys_swapped,
     "journal damaged: log table: node 1: its key is out of order (at page 8)"},
    {"key below its parent's bound", key_below_parent,
     "journal damaged: log table: node 1: its key is out of order (at page 9)"},
    {"overflow run short", overflow_short,
     "journal damaged: datasets table: an overflow run of 1 pages holds a value of 5000 bytes (at "
     "page 6)"},
    {"not an overflow page", overflow_not,
     "journal damaged: datasets table: node 0 of page 5: its value's page is not an overflow page "
     "(page number 6, flags 0x2) (at page 6)"},
    {"overflow outside", overflow_outside,
     "journal damaged: datasets table: node 0: its value's page 40 is outside the 12 pages in use "
     "(at page 5)"},
    {"page used twice", used_twice,
     "journal damaged: meta table: page 8 is used twice (at page 2)"},
    {"entry count", counts,
     "journal damaged: log table: it has 1 branch, 2 leaf and 0 overflow pages and 4 entries, its "
     "record says 1, 2, 0 and 5 (at page 2)"},
    {"depth", depth,
     "journal damaged: log table: flags 0x2 (pad 0) where level 2 of 3 needs a branch page (at "
     "page 8)"},
    {"table name", table_name,
     "journal damaged: main table: node 1: 'lgg' is not one of the journal's tables (at page 2)"},
    {"table node flags", table_flags, "journal damaged: main table: node 0: flags 0x3 (at page 2)"},
    {"table record", table_record,
     "journal damaged: main table: the 'meta' table's flags 0x4 (pad 0) (at page 2)"},
    {"log key size", log_key_size,
     "journal damaged: log table: node 0: a key of 9 bytes, not a sequence number (at page 8)"},
    {"freed page in use", freed_in_use,
     "journal damaged: free list: page 9 is on the free list and in use (at page 9)"},
    {"freed page outside", freed_outside,
     "journal damaged: free list: node 0: free page 12 is out of order or outside the 12 pages in "
     "use (at page 10)"},
    {"free list short", free_list_short,
     "journal damaged: free list: node 0: a list of 2 pages in 16 bytes (at page 10)"},
    {"page leaked", page_leaked,
     "journal damaged: meta page 0: its trees use 9 pages and its free list names 0, but it has "
     "10 pages besides the meta pages (at page 0)"},
    {"freed by a later transaction", freed_by_future,
     "journal damaged: free list: node 0: pages freed by transaction 9, after 2 (at page 10)"},
    {"transaction 0 not empty", previous_txn_zero,
     "journal damaged: meta page 0: transaction 0 is not the empty one (at page 0)"},
    {"previous transaction", previous_damaged,
     "journal damaged: main table of the previous transaction: it has 0 branch, 1 leaf and 0 "
     "overflow pages and 3 entries, its record says 0, 1, 0 and 4 (at page 1)"},
};

static void test_damage(void **unused)
{
    (void)unused;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        uint8_t *img = image();
        cases[i].damage(img);
        struct journal_damage d;
        char msg[SLUICE_ERRMSG_SIZE];
        int rc = journal_check_pages(img, NPAGES * PS, NULL, NULL, &d);
        journal_damage_format(&d, msg, sizeof msg);
        if (rc != SLUICE_ERR_CORRUPT || strcmp(msg, cases[i].want) != 0)
            fail_msg("%s: got %d \"%s\"\n  expected \"%s\"", cases[i].name, rc,
                     rc ? msg : "(accepted)", cases[i].want);
        free(img);
    }
}

/* Whether a flip of byte off of page pg is always damage: anything in a meta page but the map
 * size (which may grow harmlessly), and the header of every page the trees use. */
static bool must_notice(size_t pg, size_t off)
{
    if (pg < 2)
        return off < 32 || off >= 40;
    return off < 16 && pg != 7 && pg != 11; /* 7: the middle of an overflow run; 11: free */
}

/* Every single bit of every page the trees use, flipped: never a crash, never an out-of-bounds
 * read (the sanitizers watch), and damage to a meta page or a page header is always found. */
static void test_every_bit(void **unused)
{
    (void)unused;
    uint8_t *img = image();
    struct journal_damage d;
    int found = 0, flips = 0;
    for (size_t pg = 0; pg < NPAGES; pg++) {
        for (size_t off = 0; off < PS; off++) {
            for (int bit = 0; bit < 8; bit += 3) {
                img[pg * PS + off] ^= (uint8_t)(1u << bit);
                int rc = journal_check_pages(img, NPAGES * PS, NULL, NULL, &d);
                img[pg * PS + off] ^= (uint8_t)(1u << bit);
                assert_true(rc == 0 || rc == SLUICE_ERR_CORRUPT);
                found += rc != 0;
                flips++;
                if (rc == 0 && must_notice(pg, off))
                    fail_msg("bit %d of byte %zu of page %zu went unnoticed", bit, off, pg);
            }
        }
    }
    print_message("%d of %d bit flips found\n", found, flips);
    free(img);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sound_image), cmocka_unit_test(test_damage_format),
        cmocka_unit_test(test_size),        cmocka_unit_test(test_damage),
        cmocka_unit_test(test_every_bit),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
