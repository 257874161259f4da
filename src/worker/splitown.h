/* Which reader a distributed_epoch split goes to, and what of it to leave out, on a worker.
 * Pure: no locks, no I/O, no clock (times are passed in); task.c guards the tables with the
 * task's mutex.
 *
 * Resume entries come with a lease (GetSplitsReply.resume): a split produced before and received
 * in part (its worker died, or a deterministic reader asked for it again) is produced whole, but
 * the positions its consumers had are left out, and its first record says where this production
 * starts (codec_append_split_from). A producer takes the split's entry when it starts the split.
 *
 * Owners: a deterministic reader keeps only a prefix of each split, so every split goes whole to
 * one reader (GetElementsRequest.whole_splits). The first such reader served a split's records
 * owns it until its end marker is taken, or the dispatcher names its owner with the lease (the
 * reader that had its first positions). Another reader may take an owned split only once its
 * owner has taken nothing of it for SPLIT_OWNER_IDLE_MS (it left, or stopped reading), or at once
 * when the connection it last took records over has closed (splittab_conn_closed: the reader
 * died or closed its read; one that only lost its connection and comes back finds the split
 * gone, as after the idle time): the split then goes on to the reader that asks, which drops
 * positions it cannot use and has the split produced again; nothing is handed out twice.
 *
 * Memory: at most SPLIT_TABLE_MAX entries in each table; past it a resume entry replaces the one
 * of the lowest split, and a split gets no owner (it is served to whoever asks). */
#ifndef SLUICE_WORKER_SPLITOWN_H
#define SLUICE_WORKER_SPLITOWN_H

#include "common/ranges.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define SPLIT_OWNER_IDLE_MS 5000u
#define SPLIT_TABLE_MAX 4096u

struct split_resume {
    uint64_t seq;
    struct ranges skip; /* positions to leave out */
    uint64_t owner;     /* the reader to serve it to; 0: whoever asks first */
};

struct split_owner {
    uint64_t seq;
    uint64_t client;
    uint64_t last_ms; /* when the owner last took records of it (or got it) */
    uint64_t conn;    /* the connection it last took records over (0: none yet) */
    bool left;        /* that connection closed: any reader may take the split */
};

struct split_tables {
    struct split_resume *res; /* sorted by seq */
    size_t nres, capres;
    struct split_owner *own; /* sorted by seq */
    size_t nown, capown;
};

void splittab_init(struct split_tables *t);
void splittab_release(struct split_tables *t);

/* Records the resume entry of split seq from a lease: covered holds ncovered values, begin/end
 * pairs. Replaces an earlier entry of seq. Returns 0, SLUICE_ERR_INVALID (an odd count or an
 * empty range) or SLUICE_ERR_NOMEM. */
int splittab_resume_put(struct split_tables *t, uint64_t seq, const uint64_t *covered,
                        size_t ncovered, uint64_t owner);

/* Takes the resume entry of split seq out of the table into *out (the caller then owns
 * out->skip). Returns whether there was one; when not, *out is an empty entry. */
bool splittab_resume_take(struct split_tables *t, uint64_t seq, struct split_resume *out);

/* Names client the owner of split seq as of now_ms (client 0: nothing). Returns 0 or
 * SLUICE_ERR_NOMEM. */
int splittab_owner_set(struct split_tables *t, uint64_t seq, uint64_t client, uint64_t now_ms);

/* Whether reader client, asking over connection conn (a serial, never 0), may take records of
 * split seq now; when it may, it owns the split from now on (or still does). Returns false only
 * for a split another reader owns, took records of less than SPLIT_OWNER_IDLE_MS ago and whose
 * connection is still open. */
bool splittab_may_take(struct split_tables *t, uint64_t seq, uint64_t client, uint64_t conn,
                       uint64_t now_ms);

/* Connection conn closed: the splits whose owners last took records over it may go to any
 * reader now. Returns how many. */
size_t splittab_conn_closed(struct split_tables *t, uint64_t conn);

/* The reader that owns split seq now (0: none). */
uint64_t splittab_owner(const struct split_tables *t, uint64_t seq);

/* Split seq's end marker was taken: it has no owner any more. */
void splittab_owner_drop(struct split_tables *t, uint64_t seq);

#endif
