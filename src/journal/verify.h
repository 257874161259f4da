/* Verifying a journal where a crash cannot take the process down.
 *
 * The structural checks (check.h) run before LMDB reads a page, so LMDB should never meet a page
 * it cannot follow. Should one slip through anyway (a bug here, or damage no check foresaw), the
 * read that meets it must not kill a dispatcher or `sluice journal verify`: the whole
 * verification (opening the journal read-only, which checks every page, then reading every value
 * and replaying every record) runs in a child process (fork). The child reports its verdict
 * through a pipe and where it is through shared memory (journal_progress); a child killed by a
 * signal is reported as damage at the page or record it had reached.
 *
 * There is ONE verification: journal_verify() with the dispatcher's replay as the deep check
 * (recovery_check). `sluice journal verify` runs it, and a dispatcher runs it before it
 * opens its journal (journal_open_checked), so a dispatcher never starts on a journal verify
 * rejects.
 *
 * Threads: fork() copies only the calling thread; the child uses only what it opens itself (no
 * mutex another thread may hold, no LMDB environment of the parent) and leaves with _exit(). Call
 * these before the caller opens an LMDB environment on the same journal, or while none of its
 * threads writes to it. */
#ifndef SLUICE_JOURNAL_VERIFY_H
#define SLUICE_JOURNAL_VERIFY_H

#include "check.h"
#include "journal.h"
#include "sluice/sluice.h"

#include <stdbool.h>
#include <stddef.h>

/* What a verification found. */
struct journal_verdict {
    int rc;                       /* 0: sound; SLUICE_ERR_CORRUPT: damaged; other: not checked */
    char msg[SLUICE_ERRMSG_SIZE]; /* rc < 0: "journal damaged: ... (at page 12)", or why not */
    struct journal_damage damage; /* rc == SLUICE_ERR_CORRUPT: what and where */
    uint64_t last_seq;            /* the last record of the log, when known */
    char summary[768];            /* rc == 0: what the deep check found */
};

/* Sets v to damage d (rc SLUICE_ERR_CORRUPT, msg formatted) and returns SLUICE_ERR_CORRUPT. */
int journal_verdict_damage(struct journal_verdict *v, const struct journal_damage *d);

/* The check the caller adds, run on a journal whose pages passed the structural checks: reads
 * everything the caller will read, as the caller reads it. Returns 0 with v->summary filled, or a
 * negative code with v filled (journal_verdict_damage for damage). Runs in the child. */
typedef int (*journal_deep_cb)(struct journal *j, void *user, struct journal_verdict *v);

/* Runs fn(user, progress, v) in a child process and waits for it; progress points to memory the
 * parent sees. Returns what fn returned, with the verdict it filled (v->rc is the same). A child
 * that dies of a signal, or exits without a verdict, is damage "the check crashed (...)" at the
 * page or record the progress names. Any thread; blocks until the child is done. */
int journal_contained(int (*fn)(void *user, struct journal_progress *progress,
                                struct journal_verdict *v),
                      void *user, struct journal_verdict *v);

/* Verifies a journal: journal_open() read-only (opts->read_only is implied; work_dir or file),
 * which checks every page, then deep (may be NULL), all in a child process. Returns v->rc. */
int journal_verify(const struct journal_opts *opts, journal_deep_cb deep, void *user,
                   struct journal_verdict *v);

/* Opens a journal for writing only once journal_verify() accepts it: takes the work dir's lock,
 * creates a fresh journal when opts->create allows (journal_open), verifies it with deep while
 * holding the lock, then opens it. Returns 0 and *out with v->rc 0; or, when tail_ok and the only
 * damage is in the tail of the log (v->damage.tail), 0 and *out with v->rc SLUICE_ERR_CORRUPT for
 * the caller to cut the log back (journal_drop_tail); otherwise a negative code with the message
 * in err (v->msg for damage). */
int journal_open_checked(const struct journal_opts *opts, journal_deep_cb deep, void *user,
                         bool tail_ok, struct journal **out, struct journal_verdict *v, char *err,
                         size_t errlen);

#endif
