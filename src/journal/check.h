/* Checks of a journal's data file made without LMDB: pure functions over the file's bytes.
 *
 * LMDB trusts its pages: a page number past the end of the file, a node offset outside its page
 * or a value size larger than the map makes it read outside the mapping (SIGSEGV, SIGBUS) or
 * walk in circles. Before LMDB is let near a data file, these functions check everything LMDB
 * would follow when it opens the journal and reads it:
 *
 *   - the two meta pages: marks, format version, page size, which one is current (the one with
 *     the larger transaction id; the other must hold the transaction just before it), and the
 *     file size against the pages the current transaction uses (a truncated file);
 *   - for the current transaction and the one before it (LMDB keeps both intact until the next
 *     commit, and reads either meta page when it opens the file): every page reachable from the
 *     free list
 *     and the main table and the journal's three tables, with their headers (page number, type,
 *     bounds), every node inside its page and the nodes packed as LMDB packs them, keys in
 *     order and within their parent's bounds, every overflow run inside the file, tree depths
 *     and the page and entry counts LMDB keeps, each page used once, and the free list naming
 *     exactly the pages no tree uses (LMDB's own audit: used + free + 2 meta pages = the pages
 *     of the file the transaction knows);
 *   - the journal's own layout: the main table holds exactly the "datasets", "log" and "meta"
 *     tables, log keys are 8 bytes, and the meta table holds a format record.
 *
 * What is not checked here is the content of the journal's values (record checksums, what the
 * records mean); the journal and the dispatcher check those as they read them.
 *
 * The layout is LMDB 0.9's on a 64-bit host (page numbers are size_t, values in host byte
 * order). Every function may be called from any thread; nothing is allocated except a bitmap of
 * one bit per page during journal_check_pages(). */
#ifndef SLUICE_JOURNAL_CHECK_H
#define SLUICE_JOURNAL_CHECK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Bytes of the file journal_check_metas() needs: both meta pages at the largest page size. */
#define JOURNAL_CHECK_HEAD ((size_t)2 * 32768)

/* What a check found wrong, and where. */
struct journal_damage {
    char what[256];
    bool has_page; /* page: the page of the data file the damage is on */
    uint64_t page;
    bool has_seq; /* seq: the sequence number of the log record it concerns */
    uint64_t seq;
    /* True when only records of the log from seq on are damaged and everything before them
     * (the tables, the snapshot, earlier records) is sound: the journal can be cut back to the
     * record before seq (sluice-dispatcher --recover-to-last-good). */
    bool tail;
};

/* Writes "journal damaged: <what> (at page N / record seq S)" into out (the parenthesis names
 * what is known, or is left out). */
void journal_damage_format(const struct journal_damage *d, char *out, size_t len);

/* Fills d (what, and optionally the page) and returns SLUICE_ERR_CORRUPT. */
int journal_damage_set(struct journal_damage *d, bool has_page, uint64_t page, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* What the meta pages say about the file. */
struct journal_file_info {
    uint32_t psize;   /* page size */
    unsigned current; /* 0 or 1: the meta page LMDB uses (the larger transaction id) */
    uint64_t txnid;   /* the current transaction */
    uint64_t last_pg; /* the last page the current transaction counts (its end may be free
                         pages LMDB never wrote, past the end of the file) */
};

/* Checks the meta pages of a data file of file_size bytes whose first headlen bytes are in head
 * (headlen >= min(file_size, JOURNAL_CHECK_HEAD)), including that the file is not far shorter
 * than the pages the current transaction counts (journal_check_pages() finds any page in use past
 * the end). Returns 0 and fills info, or SLUICE_ERR_CORRUPT with d filled:
 * "the data file is empty (0 bytes)", "the data file is truncated: ...", "meta page 1: ...". */
int journal_check_metas(const uint8_t *head, size_t headlen, uint64_t file_size,
                        struct journal_file_info *info, struct journal_damage *d);

struct journal_check_stats {
    uint64_t pages;    /* pages of the file the current transaction knows (last_pg + 1) */
    uint64_t used;     /* pages its trees use */
    uint64_t free;     /* pages its free list names */
    uint64_t records;  /* entries of the log table */
    uint64_t datasets; /* entries of the datasets table */
    uint64_t meta;     /* entries of the meta table */
};

/* Checks the whole data file (size bytes at file): the meta pages as above, then both
 * transactions' trees. at_page (may be NULL) receives the number of each page as the walk
 * reaches it, so a caller that watches from outside can tell where a walk stopped. Returns 0 and
 * fills stats (may be NULL), SLUICE_ERR_CORRUPT with d filled, or SLUICE_ERR_NOMEM. */
int journal_check_pages(const uint8_t *file, size_t size, volatile uint64_t *at_page,
                        struct journal_check_stats *stats, struct journal_damage *d);

#endif
