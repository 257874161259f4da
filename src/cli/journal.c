/* `sluice journal dump|verify|backup|restore`: the journal of a fault-tolerant dispatcher,
 * without starting a server.
 *
 * verify runs the one verification a dispatcher also runs before it starts (journal_verify with
 * recovery_check, in a child process so that no damage can crash this one): every page is
 * checked before LMDB reads it, then every value and every record is read and the state rebuilt
 * exactly as a starting dispatcher rebuilds it. Exit 0 when the journal would start a dispatcher,
 * 1 with the same message the dispatcher would print when it would not.
 *
 * dump prints the snapshot, the datasets table, and one line per record (sequence number, type,
 * the ids it carries); a damaged record is printed as such and the walk goes on, so the output
 * shows what surrounds the damage. A journal whose pages fail their check is not read at all.
 *
 * backup writes a verified, compacted copy to a file; restore puts one in place (backup.h).
 *
 * dump, verify and backup only read, and are safe on a journal a running dispatcher uses: they
 * see the last committed state as of their read. restore refuses to run beside a dispatcher.
 *
 * A dispatcher replica's work dir (WORK_DIR/raft, or the Raft directory itself) is read through
 * replica_log.h: C-Raft loads a private copy of the directory, and the state is rebuilt as the
 * replica's FSM rebuilds it. dump prints the snapshot, every entry (a batch with its records, as
 * for a journal), the resulting state and its digest (`sluice status --json`'s
 * raft.state_digest); verify prints one line. backup and restore refuse a Raft directory. */
#include "cli.h"

#include "common/error.h"
#include "dispatcher/recovery.h"
#include "dispatcher/replica_log.h"
#include "dispatcher/update_codec.h"
#include "dispatcher/state.h"
#include "journal/backup.h"
#include "journal/journal.h"
#include "journal/verify.h"
#include "pipeline/def.h"
#include "pipeline/spec.h"

#include <jansson.h>

#include <inttypes.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char usage[] =
    "usage: sluice journal dump --work-dir DIR [--json]\n"
    "       sluice journal verify --work-dir DIR\n"
    "       sluice journal backup --work-dir DIR --to FILE\n"
    "       sluice journal restore --from FILE --work-dir DIR [--force]\n"
    "\n"
    "  dump      print the snapshot, the dataset definitions (as pipeline text) and one line\n"
    "            per record; --json prints one JSON document instead, for tools\n"
    "  verify    check every page, checksum and record, and replay the journal as a starting\n"
    "            dispatcher would; exit 0 when it is healthy (a dispatcher starts on exactly\n"
    "            the journals verify accepts)\n"
    "  backup    write a consistent, compacted and verified copy of the journal to FILE\n"
    "            (replacing FILE); safe while the dispatcher runs\n"
    "  restore   put the backup FILE in place as DIR's journal; refuses to replace a journal\n"
    "            that is there unless --force (which keeps the old one beside it), and never\n"
    "            runs beside a dispatcher\n"
    "\n"
    "dump, verify and backup only read, and are safe on a journal a running dispatcher uses.\n"
    "\n"
    "On a dispatcher replica's work dir (DIR/raft, or the Raft directory itself), dump and\n"
    "verify read a private copy of the Raft log with C-Raft's own code and never change DIR:\n"
    "dump prints the snapshot, every entry and the resulting state with its state_digest (as\n"
    "`sluice status --json` reports it in raft.state_digest); verify checks that the log loads\n"
    "and replays. backup and restore are for a single dispatcher's journal only.\n";

/* Prints s quoted, with bytes outside printable ASCII (and the quote and backslash) escaped. */
static void print_quoted(const char *s)
{
    putchar('\'');
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (*p < 0x20 || *p > 0x7e || *p == '\'' || *p == '\\')
            printf("\\x%02x", *p);
        else
            putchar(*p);
    }
    putchar('\'');
}

/* Prints a strictly increasing list as ranges: "3-7,9", at most 16 ranges. */
static void print_seqs(const struct st_seq_list *l)
{
    printf(" splits=%zu", l->n);
    size_t ranges = 0;
    for (size_t i = 0; i < l->n;) {
        size_t k = i;
        while (k + 1 < l->n && l->v[k + 1] == l->v[k] + 1)
            k++;
        if (ranges == 16) {
            printf(",...");
            break;
        }
        printf("%s%" PRIu64, ranges ? "," : " seqs=", l->v[i]);
        if (k > i)
            printf("-%" PRIu64, l->v[k]);
        ranges++;
        i = k + 1;
    }
}

static void print_update(uint64_t seq, const struct st_update *u)
{
    printf("%" PRIu64 " %s", seq, st_update_name(u->type));
    switch (u->type) {
    case ST_DATASET_REGISTERED:
        printf(" dataset=");
        print_quoted(u->name);
        printf(" def_bytes=%zu", u->def_len);
        if (u->text && u->text[0]) {
            printf(" pipeline=");
            print_quoted(u->text);
        }
        break;
    case ST_JOB_CREATED:
        printf(" job=%" PRIu64 " name=", u->id);
        print_quoted(u->name);
        printf(" dataset=");
        print_quoted(u->name2);
        printf(" mode=%s", mode_name((enum sluice_mode)u->mode));
        if (u->target_workers != SLUICE_TARGET_WORKERS_ANY)
            printf(" target_workers=%s",
                   target_workers_name((enum sluice_target_workers)u->target_workers));
        if (u->selector) {
            printf(" worker_selector=");
            print_quoted(u->selector);
        }
        if (u->job_weight && u->job_weight != 1)
            printf(" weight=%g", u->job_weight);
        if (u->min_workers)
            printf(" min_workers=%" PRIu32, u->min_workers);
        if (u->max_workers)
            printf(" max_workers=%" PRIu32, u->max_workers);
        break;
    case ST_ITERATION_CREATED:
        printf(" iteration=%" PRIu64 " job=%" PRIu64 " repetition=%" PRIu64, u->id, u->ref,
               u->ref2);
        if (u->distributed)
            printf(" splits_per_pass=%" PRIu64, u->plan.per_pass);
        if (u->start || u->seqs.n) {
            printf(" restored_at=%" PRIu64, u->start);
            print_seqs(&u->seqs);
        }
        break;
    case ST_TASK_CREATED:
        printf(" task=%" PRIu64 " iteration=%" PRIu64 " worker=%" PRIu64, u->id, u->ref, u->ref2);
        break;
    case ST_TASK_FINISHED:
        printf(" task=%" PRIu64, u->id);
        break;
    case ST_TASK_REMOVED:
        printf(" task=%" PRIu64 " iteration=%" PRIu64, u->id, u->ref);
        break;
    case ST_WORKER_REGISTERED:
        printf(" worker=%" PRIu64 " address=", u->id);
        print_quoted(u->address);
        printf(" incarnation=%016" PRIx64, u->incarnation);
        if (u->host_id[0]) {
            printf(" host=");
            print_quoted(u->host_id);
        }
        if (u->labels) {
            printf(" labels=");
            print_quoted(u->labels);
        }
        if (u->task_slots)
            printf(" task_slots=%" PRIu32, u->task_slots);
        break;
    case ST_WORKER_REMOVED:
    case ST_WORKER_DRAINING:
        printf(" worker=%" PRIu64, u->id);
        break;
    case ST_CLIENT_ACQUIRED:
        printf(" client=%" PRIu64 " iteration=%" PRIu64, u->id, u->ref);
        if (u->host_id[0]) {
            printf(" host=");
            print_quoted(u->host_id);
        }
        break;
    case ST_CLIENT_RELEASED:
        printf(" client=%" PRIu64, u->id);
        break;
    case ST_SPLITS_LEASED:
    case ST_SPLITS_FINISHED:
    case ST_SPLITS_RETURNED:
        printf(" iteration=%" PRIu64 " task=%" PRIu64, u->ref, u->ref2);
        print_seqs(&u->seqs);
        break;
    case ST_ITERATION_FINISHED:
    case ST_ITERATION_GC:
        printf(" iteration=%" PRIu64, u->id);
        break;
    case ST_ROUNDS_SCHEDULED:
        printf(" iteration=%" PRIu64 " from_round=%" PRIu64 " tasks=", u->ref, u->ref2);
        for (size_t i = 0; i < u->seqs.n; i++)
            printf("%s%" PRIu64, i ? "," : "", u->seqs.v[i]);
        if (u->seqs.n == 0)
            printf("none");
        break;
    case ST_ROUNDS_GRANTED:
        printf(" iteration=%" PRIu64 " below_round=%" PRIu64, u->ref, u->ref2);
        break;
    case ST_ITERATION_FAILED:
        printf(" iteration=%" PRIu64 " error=", u->id);
        print_quoted(u->text ? u->text : "");
        break;
    case ST_SAVE_STARTED:
        printf(" save=%" PRIu64 " job=%" PRIu64 " iteration=%" PRIu64 " dataset=", u->id, u->ref,
               u->ref2);
        print_quoted(u->name);
        printf(" path=");
        print_quoted(u->text ? u->text : "");
        break;
    case ST_SAVE_FINISHED:
        printf(" save=%" PRIu64, u->id);
        break;
    case ST_SAVE_FAILED:
        printf(" save=%" PRIu64 " error=", u->id);
        print_quoted(u->text ? u->text : "");
        break;
    case ST_MIX_WEIGHTS:
        printf(" job=");
        print_quoted(u->name);
        printf(" dataset=");
        print_quoted(u->name2);
        printf(" horizon=%" PRIu64, u->start);
        if (u->nweights) {
            printf(" from=%" PRIu64 " weights=", u->ref);
            for (size_t i = 0; i < u->nweights; i++)
                printf("%s%.17g", i ? "," : "", u->weights[i]);
        }
        break;
    case ST_JOB_POSITION:
        printf(" job=");
        print_quoted(u->name);
        printf(" iteration=%" PRIu64 " consumer=%" PRIu64 " step=%" PRIu64 " bytes=%zu", u->ref,
               u->id, u->start, u->def_len);
        break;
    }
    putchar('\n');
}

/* ---- --json ------------------------------------------------------------------------------ */

static void jset(json_t *o, const char *k, json_t *v)
{
    json_object_set_new(o, k, v ? v : json_null());
}

static json_t *jstr(const char *s)
{
    /* Names are UTF-8 in journals written since names are checked; older ones may hold
     * anything, which shows escaped rather than failing the dump. */
    json_t *v = json_string(s);
    if (v)
        return v;
    size_t n = strlen(s);
    char *e = malloc(4 * n + 1);
    if (!e)
        return NULL;
    size_t k = 0;
    for (const unsigned char *p = (const unsigned char *)s; *p; p++)
        k += (size_t)(*p < 0x80 && *p >= 0x20 ? (e[k] = (char)*p, 1)
                                              : snprintf(e + k, 5, "\\x%02x", *p));
    e[k] = 0;
    v = json_string(e);
    free(e);
    return v;
}

static json_t *jseqs(const struct st_seq_list *l)
{
    /* [[first, last], ...] ranges of consecutive seqs. */
    json_t *a = json_array();
    for (size_t i = 0; a && i < l->n;) {
        size_t k = i;
        while (k + 1 < l->n && l->v[k + 1] == l->v[k] + 1)
            k++;
        json_array_append_new(a, json_pack("[I,I]", (json_int_t)l->v[i], (json_int_t)l->v[k]));
        i = k + 1;
    }
    return a;
}

/* One record as a JSON object: its sequence number, type, and the fields its type uses. */
static json_t *update_json(uint64_t seq, const struct st_update *u)
{
    json_t *o = json_object();
    if (!o)
        return NULL;
    jset(o, "seq", json_integer((json_int_t)seq));
    jset(o, "type", json_string(st_update_name(u->type)));
    switch (u->type) {
    case ST_DATASET_REGISTERED:
        jset(o, "dataset", jstr(u->name));
        jset(o, "def_bytes", json_integer((json_int_t)u->def_len));
        jset(o, "pipeline", jstr(u->text ? u->text : ""));
        jset(o, "split_size", json_integer((json_int_t)u->split_size));
        break;
    case ST_JOB_CREATED:
        jset(o, "job", json_integer((json_int_t)u->id));
        jset(o, "name", jstr(u->name));
        jset(o, "dataset", jstr(u->name2));
        jset(o, "mode", json_string(mode_name((enum sluice_mode)u->mode)));
        jset(o, "num_consumers", json_integer(u->num_consumers));
        jset(o, "deterministic", json_boolean(u->deterministic));
        if (u->target_workers != SLUICE_TARGET_WORKERS_ANY)
            jset(o, "target_workers",
                 json_string(target_workers_name((enum sluice_target_workers)u->target_workers)));
        if (u->selector)
            jset(o, "worker_selector", jstr(u->selector));
        if (u->job_weight && u->job_weight != 1)
            jset(o, "weight", json_real(u->job_weight));
        if (u->min_workers)
            jset(o, "min_workers", json_integer(u->min_workers));
        if (u->max_workers)
            jset(o, "max_workers", json_integer(u->max_workers));
        break;
    case ST_ITERATION_CREATED:
        jset(o, "iteration", json_integer((json_int_t)u->id));
        jset(o, "job", json_integer((json_int_t)u->ref));
        jset(o, "repetition", json_integer((json_int_t)u->ref2));
        if (u->distributed) {
            jset(o, "splits_per_pass", json_integer((json_int_t)u->plan.per_pass));
            jset(o, "split_size", json_integer((json_int_t)u->plan.split_size));
        }
        if (u->start || u->seqs.n) {
            jset(o, "restored_at", json_integer((json_int_t)u->start));
            jset(o, "reissued", jseqs(&u->seqs));
        }
        break;
    case ST_TASK_CREATED:
        jset(o, "task", json_integer((json_int_t)u->id));
        jset(o, "iteration", json_integer((json_int_t)u->ref));
        jset(o, "worker", json_integer((json_int_t)u->ref2));
        break;
    case ST_TASK_FINISHED:
        jset(o, "task", json_integer((json_int_t)u->id));
        break;
    case ST_TASK_REMOVED:
        jset(o, "task", json_integer((json_int_t)u->id));
        jset(o, "iteration", json_integer((json_int_t)u->ref));
        break;
    case ST_WORKER_REGISTERED: {
        char inc[17];
        snprintf(inc, sizeof inc, "%016" PRIx64, u->incarnation);
        jset(o, "worker", json_integer((json_int_t)u->id));
        jset(o, "address", jstr(u->address));
        jset(o, "incarnation", json_string(inc));
        if (u->host_id[0])
            jset(o, "host_id", jstr(u->host_id));
        if (u->labels)
            jset(o, "labels", jstr(u->labels));
        if (u->task_slots)
            jset(o, "task_slots", json_integer(u->task_slots));
        break;
    }
    case ST_WORKER_REMOVED:
    case ST_WORKER_DRAINING:
        jset(o, "worker", json_integer((json_int_t)u->id));
        break;
    case ST_CLIENT_ACQUIRED:
        jset(o, "client", json_integer((json_int_t)u->id));
        jset(o, "iteration", json_integer((json_int_t)u->ref));
        if (u->host_id[0])
            jset(o, "host_id", jstr(u->host_id));
        break;
    case ST_CLIENT_RELEASED:
        jset(o, "client", json_integer((json_int_t)u->id));
        break;
    case ST_SPLITS_LEASED:
    case ST_SPLITS_FINISHED:
    case ST_SPLITS_RETURNED:
        jset(o, "iteration", json_integer((json_int_t)u->ref));
        jset(o, "task", json_integer((json_int_t)u->ref2));
        jset(o, "splits", jseqs(&u->seqs));
        break;
    case ST_ITERATION_FINISHED:
    case ST_ITERATION_GC:
        jset(o, "iteration", json_integer((json_int_t)u->id));
        break;
    case ST_ROUNDS_SCHEDULED: {
        jset(o, "iteration", json_integer((json_int_t)u->ref));
        jset(o, "from_round", json_integer((json_int_t)u->ref2));
        json_t *t = json_array();
        for (size_t i = 0; t && i < u->seqs.n; i++)
            json_array_append_new(t, json_integer((json_int_t)u->seqs.v[i]));
        jset(o, "tasks", t);
        break;
    }
    case ST_ROUNDS_GRANTED:
        jset(o, "iteration", json_integer((json_int_t)u->ref));
        jset(o, "below_round", json_integer((json_int_t)u->ref2));
        break;
    case ST_ITERATION_FAILED:
        jset(o, "iteration", json_integer((json_int_t)u->id));
        jset(o, "error", jstr(u->text ? u->text : ""));
        break;
    case ST_SAVE_STARTED:
        jset(o, "save", json_integer((json_int_t)u->id));
        jset(o, "job", json_integer((json_int_t)u->ref));
        jset(o, "iteration", json_integer((json_int_t)u->ref2));
        jset(o, "dataset", jstr(u->name));
        jset(o, "path", jstr(u->text ? u->text : ""));
        break;
    case ST_SAVE_FINISHED:
        jset(o, "save", json_integer((json_int_t)u->id));
        break;
    case ST_SAVE_FAILED:
        jset(o, "save", json_integer((json_int_t)u->id));
        jset(o, "error", jstr(u->text ? u->text : ""));
        break;
    case ST_MIX_WEIGHTS:
        jset(o, "job", jstr(u->name));
        jset(o, "dataset", jstr(u->name2));
        jset(o, "horizon", json_integer((json_int_t)u->start));
        if (u->nweights) {
            json_t *w = json_array();
            for (size_t i = 0; i < u->nweights; i++)
                json_array_append_new(w, json_real(u->weights[i]));
            jset(o, "from", json_integer((json_int_t)u->ref));
            jset(o, "weights", w);
        }
        break;
    case ST_JOB_POSITION:
        jset(o, "job", jstr(u->name));
        jset(o, "iteration", json_integer((json_int_t)u->ref));
        jset(o, "consumer", json_integer((json_int_t)u->id));
        jset(o, "step", json_integer((json_int_t)u->start));
        jset(o, "bytes", json_integer((json_int_t)u->def_len));
        break;
    }
    return o;
}

static int lookup_def(void *user, const char *id, uint8_t **def, size_t *len, char *err,
                      size_t errlen)
{
    return journal_dataset_read(user, id, def, len, err, errlen);
}

struct dump {
    bool damaged;
    json_t *records, *datasets; /* --json: where records and datasets go; NULL: print */
};

/* --json: a damaged record, or damaged part, as {"seq": N, "damaged": why}. */
static void json_damage(json_t *list, uint64_t seq, const char *why)
{
    json_t *o = json_object();
    if (!o)
        return;
    jset(o, "seq", json_integer((json_int_t)seq));
    jset(o, "damaged", jstr(why));
    json_array_append_new(list, o);
}

static int dump_record(void *user, uint64_t seq, const uint8_t *payload, size_t len)
{
    struct dump *d = user;
    struct st_update u;
    char why[SLUICE_ERRMSG_SIZE / 2]; /* quoted in a longer message */
    int rc = update_codec_decode(payload, len, &u, why, sizeof why);
    if (rc < 0) {
        if (d->records) {
            char what[SLUICE_ERRMSG_SIZE];
            snprintf(what, sizeof what, "does not decode: %s", why);
            json_damage(d->records, seq, what);
        } else {
            printf("%" PRIu64 " damaged: does not decode: %s\n", seq, why);
        }
        d->damaged = true;
        return rc == SLUICE_ERR_NOMEM ? rc : 0;
    }
    if (d->records) {
        json_t *o = update_json(seq, &u);
        if (!o || json_array_append_new(d->records, o) < 0)
            rc = SLUICE_ERR_NOMEM;
    } else {
        print_update(seq, &u);
    }
    st_update_release(&u);
    return rc;
}

static void dump_damage(void *user, uint64_t seq, const char *why)
{
    struct dump *d = user;
    if (d->records)
        json_damage(d->records, seq, why);
    else
        printf("%" PRIu64 " damaged: %s\n", seq, why);
}

/* A dataset's definition as pipeline text (malloc'd), or NULL with why it cannot be read. */
static char *definition_text(const uint8_t *data, size_t len, char *why, size_t whylen)
{
    struct pipe_spec *spec = NULL;
    char *text = NULL;
    snprintf(why, whylen, "out of memory");
    if (pipe_spec_decode(data, len, &spec, why, whylen) == 0) {
        int n = pipe_spec_format(spec, NULL, 0);
        if (n >= 0 && (text = malloc((size_t)n + 1)))
            pipe_spec_format(spec, text, (size_t)n + 1);
    }
    pipe_spec_free(spec);
    return text;
}

static int dump_dataset(void *user, const char *id, const uint8_t *data, size_t len)
{
    struct dump *d = user;
    char why[SLUICE_ERRMSG_SIZE];
    char *text = definition_text(data, len, why, sizeof why);
    if (d->datasets) {
        json_t *o = json_object();
        if (o) {
            jset(o, "id", jstr(id));
            jset(o, "def_bytes", json_integer((json_int_t)len));
            jset(o, text ? "pipeline" : "unreadable", jstr(text ? text : why));
            json_array_append_new(d->datasets, o);
        }
        free(text);
        return o ? 0 : SLUICE_ERR_NOMEM;
    }
    printf("dataset ");
    print_quoted(id);
    printf(" def_bytes=%zu", len);
    printf(text ? " pipeline=" : " unreadable=");
    print_quoted(text ? text : why);
    putchar('\n');
    free(text);
    return 0;
}

static int dump(struct journal *j, const char *dir, bool as_json)
{
    char err[SLUICE_ERRMSG_SIZE];
    struct dump d = {.damaged = false};
    json_t *root = NULL, *snapshot = NULL;
    if (as_json) {
        root = json_object();
        d.records = json_array();
        d.datasets = json_array();
        snapshot = json_object();
        if (!root || !d.records || !d.datasets || !snapshot) {
            json_decref(root);
            json_decref(d.records);
            json_decref(d.datasets);
            json_decref(snapshot);
            cli_error("journal", "%s", sluice_strerror(SLUICE_ERR_NOMEM));
            return CLI_EXIT_FAIL;
        }
    }
    struct journal_info info;
    uint64_t inc = 0, seq = 0;
    uint8_t *snap = NULL;
    size_t len = 0;
    int rc = journal_get_info(j, &info, err, sizeof err);
    if (rc < 0) {
        cli_error("journal", "%s: %s", dir, err);
        return CLI_EXIT_FAIL;
    }
    if (journal_meta_get_u64(j, "incarnation", &inc, err, sizeof err) < 0)
        inc = 0;
    if (root) {
        char hex[17];
        snprintf(hex, sizeof hex, "%016" PRIx64, inc);
        jset(root, "work_dir", jstr(dir));
        jset(root, "incarnation", json_string(hex));
        jset(root, "records", json_integer((json_int_t)info.records));
        jset(root, "bytes_used", json_integer((json_int_t)info.map_used));
        jset(root, "bytes_max", json_integer((json_int_t)info.map_size));
    } else {
        printf("journal %s: incarnation %016" PRIx64 ", %" PRIu64 " records, %" PRIu64
               " datasets, %zu of %zu bytes used\n",
               dir, inc, info.records, info.datasets, info.map_used, info.map_size);
    }

    rc = journal_snapshot_read(j, &seq, &snap, &len, err, sizeof err);
    if (rc == 0) {
        struct state s;
        char why[SLUICE_ERRMSG_SIZE];
        if (update_codec_snapshot_decode(snap, len, lookup_def, j, &s, why, sizeof why) < 0) {
            if (root) {
                jset(snapshot, "seq", json_integer((json_int_t)seq));
                jset(snapshot, "damaged", jstr(why));
            } else {
                printf("snapshot %" PRIu64 " damaged: %s\n", seq, why);
            }
            d.damaged = true;
        } else {
            if (root) {
                json_t *o = json_pack(
                    "{s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I}", "seq", (json_int_t)seq, "bytes",
                    (json_int_t)len, "applied", (json_int_t)s.applied, "datasets",
                    (json_int_t)s.ndatasets, "jobs", (json_int_t)s.njobs, "iterations",
                    (json_int_t)s.niterations, "tasks", (json_int_t)s.ntasks, "workers",
                    (json_int_t)s.nworkers, "clients", (json_int_t)s.nclients);
                if (o)
                    json_object_update(snapshot, o);
                json_decref(o);
                if (s.nsaves)
                    jset(snapshot, "saves", json_integer((json_int_t)s.nsaves));
            } else {
                printf("snapshot %" PRIu64 " bytes=%zu applied=%" PRIu64 " datasets=%zu "
                       "jobs=%zu iterations=%zu tasks=%zu workers=%zu clients=%zu",
                       seq, len, s.applied, s.ndatasets, s.njobs, s.niterations, s.ntasks,
                       s.nworkers, s.nclients);
                /* Only when there are saves: older dumps read the same as before. */
                if (s.nsaves)
                    printf(" saves=%zu", s.nsaves);
                putchar('\n');
            }
            state_release(&s);
        }
        free(snap);
    } else if (rc != SLUICE_ERR_NOT_FOUND) {
        if (root)
            jset(snapshot, "damaged", jstr(err));
        else
            printf("snapshot damaged: %s\n", err);
        d.damaged = true;
    }
    rc = journal_datasets_each(j, dump_dataset, &d, err, sizeof err);
    if (rc < 0) {
        if (root)
            jset(root, "datasets_damaged", jstr(err));
        else
            printf("datasets damaged: %s\n", err);
        d.damaged = true;
    }
    rc = journal_replay(j, seq + 1, dump_record, dump_damage, &d, NULL, err, sizeof err);
    if (rc == SLUICE_ERR_CORRUPT) {
        d.damaged = true;
    } else if (rc < 0) {
        json_decref(root);
        json_decref(d.records);
        json_decref(d.datasets);
        json_decref(snapshot);
        cli_error("journal", "%s: %s", dir, err);
        return CLI_EXIT_FAIL;
    }
    if (root) {
        jset(root, "snapshot", json_object_size(snapshot) ? snapshot : NULL);
        if (!json_object_size(snapshot))
            json_decref(snapshot);
        jset(root, "datasets", d.datasets);
        jset(root, "log", d.records);
        jset(root, "damaged", json_boolean(d.damaged));
        char *text = json_dumps(root, JSON_INDENT(2));
        json_decref(root);
        if (!text) {
            cli_error("journal", "%s", sluice_strerror(SLUICE_ERR_NOMEM));
            return CLI_EXIT_FAIL;
        }
        puts(text);
        free(text);
    }
    if (d.damaged) {
        cli_error("journal", "%s: the journal is damaged (see the lines marked damaged)", dir);
        return CLI_EXIT_FAIL;
    }
    return CLI_EXIT_OK;
}

/* Names the records --recover-to-last-good would drop, when only the log's tail is damaged. */
static void tail_hint(const struct journal_verdict *v, char *out, size_t len)
{
    out[0] = '\0';
    if (v->rc == SLUICE_ERR_CORRUPT && v->damage.tail)
        snprintf(out, len,
                 "; only the tail of the log is damaged: sluice-dispatcher "
                 "--recover-to-last-good would drop records %" PRIu64 " to %" PRIu64,
                 v->damage.seq, v->last_seq > v->damage.seq ? v->last_seq : v->damage.seq);
}

static int verify(const char *dir)
{
    struct journal_verdict v;
    char hint[160];
    struct journal_opts o = {.work_dir = dir, .read_only = true};
    if (journal_verify(&o, recovery_check, NULL, &v) < 0) {
        tail_hint(&v, hint, sizeof hint);
        cli_error("journal", "%s: %s%s", dir, v.msg, hint);
        return CLI_EXIT_FAIL;
    }
    printf("journal %s: ok: %s\n", dir, v.summary);
    return CLI_EXIT_OK;
}

static int backup(const char *dir, const char *to)
{
    struct journal_verdict v;
    char err[SLUICE_ERRMSG_SIZE];
    if (journal_backup(dir, to, recovery_check, NULL, &v, err, sizeof err) < 0) {
        cli_error("journal", "%s: backup: %s", dir, err);
        return CLI_EXIT_FAIL;
    }
    printf("journal %s: backed up to %s: %s\n", dir, to, v.summary);
    return CLI_EXIT_OK;
}

static int restore(const char *from, const char *dir, bool force)
{
    struct journal_verdict v;
    char err[SLUICE_ERRMSG_SIZE], replaced[PATH_MAX];
    if (journal_restore(from, dir, force, recovery_check, NULL, &v, replaced, sizeof replaced, err,
                        sizeof err) < 0) {
        cli_error("journal", "%s: restore: %s", dir, err);
        return CLI_EXIT_FAIL;
    }
    printf("journal %s: restored from %s: %s\n", dir, from, v.summary);
    if (replaced[0])
        printf("journal %s: the journal that was there is kept as %s\n", dir, replaced);
    return CLI_EXIT_OK;
}

/* ---- a replica's Raft directory ---------------------------------------------------------- */

static void print_state(const char *what, const struct state *s)
{
    printf("%s applied=%" PRIu64 " datasets=%zu jobs=%zu iterations=%zu tasks=%zu workers=%zu "
           "clients=%zu",
           what, s->applied, s->ndatasets, s->njobs, s->niterations, s->ntasks, s->nworkers,
           s->nclients);
    if (s->nsaves)
        printf(" saves=%zu", s->nsaves);
}

static void print_configuration(const struct raft_configuration *c)
{
    for (unsigned i = 0; i < c->n; i++) {
        const struct raft_server *m = &c->servers[i];
        printf("%s%llu=%s%s", i ? "," : "", (unsigned long long)m->id, m->address,
               m->role == RAFT_VOTER     ? ""
               : m->role == RAFT_STANDBY ? "(standby)"
                                         : "(spare)");
    }
}

static int raft_dump_snapshot(void *user, const struct replica_log *log, const struct state *st)
{
    (void)user;
    const struct raft_snapshot *s = log->snapshot;
    printf("snapshot index=%llu term=%llu bytes=%zu file=%s ", (unsigned long long)s->index,
           (unsigned long long)s->term, s->bufs[0].len, log->snapshot_file);
    print_state("state", st);
    printf(" configuration=");
    print_configuration(&s->configuration);
    putchar('\n');
    return 0;
}

static int raft_dump_entry(void *user, uint64_t index, const struct raft_entry *raw,
                           const struct replica_entry *e, bool replayed)
{
    (void)user;
    printf("entry %" PRIu64 " term=%llu ", index, (unsigned long long)raw->term);
    if (raw->type == RAFT_CHANGE) {
        struct raft_configuration c;
        raft_configuration_init(&c);
        if (raft_configuration_decode(&raw->buf, &c) == 0) {
            printf("configuration ");
            print_configuration(&c);
        } else {
            printf("configuration unreadable bytes=%zu", raw->buf.len);
        }
        raft_configuration_close(&c);
    } else if (raw->type == RAFT_BARRIER) {
        printf("barrier");
    } else if (!e) {
        printf("type=%d bytes=%zu", (int)raw->type, raw->buf.len);
    } else if (e->seed) {
        printf("seed origin=%" PRIu64 " bytes=%zu", e->origin, e->seed_len);
    } else if (e->count == 0) {
        printf("announcement origin=%" PRIu64 " rpc=", e->origin);
        print_quoted(e->rpc);
    } else {
        printf("batch origin=%" PRIu64 " records=%" PRIu32, e->origin, e->count);
    }
    if (!replayed)
        printf(" (in the snapshot)");
    putchar('\n');
    return 0;
}

static int raft_dump_record(void *user, uint64_t seq, const struct st_update *u)
{
    (void)user;
    printf("  ");
    print_update(seq, u);
    return 0;
}

/* Loads and replays the Raft directory raft_dir into *st; prints it when dump. Returns a CLI
 * exit code: after CLI_EXIT_OK the caller releases *log and *st; on failure the one-line reason
 * is printed and nothing is left to release. */
static int raft_replay(const char *raft_dir, bool dump, struct replica_log *log, struct state *st)
{
    char err[SLUICE_ERRMSG_SIZE];
    int rc = replica_log_load(raft_dir, log, err, sizeof err);
    if (rc < 0) {
        cli_error("journal", "%s", err);
        return CLI_EXIT_FAIL;
    }
    state_init(st);
    if (dump) {
        uint64_t last = log->n          ? log->start_index + log->n - 1
                        : log->snapshot ? log->snapshot->index
                                        : 0;
        printf("raft log %s: cluster %s, term %" PRIu64 ", voted for %" PRIu64 ", ", raft_dir,
               log->cluster[0] ? log->cluster : "(no sluice-cluster file)", log->term,
               log->voted_for);
        if (log->n)
            printf("entries %" PRIu64 " to %" PRIu64 "\n", log->start_index, last);
        else
            printf("no entries\n");
    }
    struct replica_log_visit visit = {
        .snapshot = raft_dump_snapshot,
        .entry = raft_dump_entry,
        .record = raft_dump_record,
    };
    rc = replica_log_replay(log, st, dump ? &visit : NULL, err, sizeof err);
    if (rc < 0) {
        fflush(stdout);
        cli_error("journal", "%s: %s", raft_dir, err);
        replica_log_release(log);
        state_release(st);
        return CLI_EXIT_FAIL;
    }
    return CLI_EXIT_OK;
}

static int raft_dump(const char *raft_dir)
{
    struct replica_log log;
    struct state st;
    int code = raft_replay(raft_dir, true, &log, &st);
    if (code != CLI_EXIT_OK)
        return code;
    print_state("state", &st);
    putchar('\n');
    struct dump d = {.damaged = false};
    for (size_t i = 0; i < st.ndatasets; i++)
        dump_dataset(&d, st.datasets[i].id, st.datasets[i].def, st.datasets[i].def_len);
    printf("state_digest %016" PRIx64 "\n", state_digest(&st));
    state_release(&st);
    replica_log_release(&log);
    return CLI_EXIT_OK;
}

static int raft_verify(const char *raft_dir)
{
    struct replica_log log;
    struct state st;
    int code = raft_replay(raft_dir, false, &log, &st);
    if (code != CLI_EXIT_OK)
        return code;
    uint64_t last = 0, last_term = 0;
    if (log.n) {
        last = log.start_index + log.n - 1;
        last_term = log.entries[log.n - 1].term;
    } else if (log.snapshot) {
        last = log.snapshot->index;
        last_term = log.snapshot->term;
    }
    char snap[64] = "no snapshot";
    if (log.snapshot)
        snprintf(snap, sizeof snap, "snapshot at %llu (term %llu)",
                 (unsigned long long)log.snapshot->index, (unsigned long long)log.snapshot->term);
    printf("raft log %s: ok: %zu entries, %s, last index %" PRIu64 " (term %" PRIu64 "), %" PRIu64
           " updates applied; %zu datasets, %zu jobs, %zu workers, %zu clients; "
           "state_digest %016" PRIx64 "\n",
           raft_dir, log.n, snap, last, last_term, st.applied, st.ndatasets, st.njobs, st.nworkers,
           st.nclients, state_digest(&st));
    state_release(&st);
    replica_log_release(&log);
    return CLI_EXIT_OK;
}

/* Takes the value of --name VALUE or --name=VALUE at argv[*i]; NULL after a usage error. */
static const char *option_value(int argc, char **argv, int *i, const char *name)
{
    const char *a = argv[*i];
    size_t n = strlen(name);
    const char *v = a[n] == '=' ? a + n + 1 : (*i + 1 < argc ? argv[++*i] : NULL);
    if (!v || !*v) {
        cli_error("usage", "%s needs a value", name);
        return NULL;
    }
    return v;
}

static bool is_option(const char *a, const char *name)
{
    size_t n = strlen(name);
    return strncmp(a, name, n) == 0 && (a[n] == '\0' || a[n] == '=');
}

int cli_journal(int argc, char **argv)
{
    const char *action = NULL, *dir = NULL, *to = NULL, *from = NULL;
    bool force = false, json = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            fputs(usage, stdout);
            return CLI_EXIT_OK;
        }
        const char **slot = is_option(a, "--work-dir") ? &dir
                            : is_option(a, "--to")     ? &to
                            : is_option(a, "--from")   ? &from
                                                       : NULL;
        if (slot) {
            const char *name = slot == &dir ? "--work-dir" : slot == &to ? "--to" : "--from";
            if (!(*slot = option_value(argc, argv, &i, name)))
                return CLI_EXIT_USAGE;
        } else if (strcmp(a, "--force") == 0) {
            force = true;
        } else if (strcmp(a, "--json") == 0) {
            json = true;
        } else if (strncmp(a, "--", 2) == 0) {
            cli_error("usage", "unknown option '%s' (try 'sluice journal --help')", a);
            return CLI_EXIT_USAGE;
        } else if (!action && (strcmp(a, "dump") == 0 || strcmp(a, "verify") == 0 ||
                               strcmp(a, "backup") == 0 || strcmp(a, "restore") == 0)) {
            action = a;
        } else {
            cli_error("usage", "unexpected argument '%s' (try 'sluice journal --help')", a);
            return CLI_EXIT_USAGE;
        }
    }
    if (!action) {
        cli_error("usage",
                  "journal needs dump, verify, backup or restore (try 'sluice journal --help')");
        return CLI_EXIT_USAGE;
    }
    if (!dir) {
        cli_error("usage", "journal %s needs --work-dir DIR", action);
        return CLI_EXIT_USAGE;
    }
    bool is_backup = strcmp(action, "backup") == 0, is_restore = strcmp(action, "restore") == 0;
    if (is_backup != (to != NULL)) {
        cli_error("usage",
                  is_backup ? "journal backup needs --to FILE" : "--to is for journal backup");
        return CLI_EXIT_USAGE;
    }
    if (is_restore != (from != NULL)) {
        cli_error("usage", is_restore ? "journal restore needs --from FILE"
                                      : "--from is for journal restore");
        return CLI_EXIT_USAGE;
    }
    if (force && !is_restore) {
        cli_error("usage", "--force is for journal restore");
        return CLI_EXIT_USAGE;
    }
    if (json && strcmp(action, "dump") != 0) {
        cli_error("usage", "--json is for journal dump");
        return CLI_EXIT_USAGE;
    }
    char raft_dir[PATH_MAX], err[SLUICE_ERRMSG_SIZE];
    int is_raft = replica_log_find(dir, raft_dir, sizeof raft_dir, err, sizeof err);
    if (is_raft < 0) {
        cli_error("journal", "%s", err);
        return CLI_EXIT_FAIL;
    }
    if (is_raft && (is_backup || is_restore)) {
        cli_error("usage",
                  "%s is a dispatcher replica's Raft directory: journal %s is for a single "
                  "dispatcher's journal. %s (see 'Dispatcher replicas' in docs/operations.md)",
                  raft_dir, action,
                  is_backup ? "Back a replica up by copying its whole work dir while it is "
                              "stopped (the other replicas keep serving); check the copy with "
                              "'sluice journal verify --work-dir COPY'"
                            : "Put a copy of a stopped replica's work dir back in place while "
                              "the replica is stopped, or start a new group from a journal "
                              "backup restored into an empty work dir with --raft-seed-journal");
        return CLI_EXIT_USAGE;
    }
    if (is_raft && json) {
        cli_error("usage",
                  "%s is a dispatcher replica's Raft directory: its dump is text only "
                  "(--json is for a single dispatcher's journal)",
                  raft_dir);
        return CLI_EXIT_USAGE;
    }
    if (is_raft)
        return strcmp(action, "verify") == 0 ? raft_verify(raft_dir) : raft_dump(raft_dir);
    if (strcmp(action, "verify") == 0)
        return verify(dir);
    if (is_backup)
        return backup(dir, to);
    if (is_restore)
        return restore(from, dir, force);
    struct journal *j;
    struct journal_opts opts = {.work_dir = dir, .read_only = true};
    int rc = journal_open(&opts, &j, err, sizeof err);
    if (rc < 0) {
        cli_error("journal", "%s: %s", dir, err);
        return CLI_EXIT_FAIL;
    }
    int code = dump(j, dir, json);
    journal_close(j);
    return code;
}
