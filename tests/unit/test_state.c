/* The dispatcher's state machine: every planning function's exact updates and refusals (driven
 * by a small command script, one table row per case), state_apply() refusing updates that do not
 * fit the state without changing it, GetSplits retries after lost replies losing no split, and
 * long random runs whose recorded updates, replayed onto a fresh state, give the same digest at
 * every step, with ids that never repeat and every split of a finished iteration finished
 * exactly once. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "common/error.h"
#include "common/sha256.h"
#include "dispatcher/update_codec.h"
#include "dispatcher/server.h"
#include "dispatcher/plan.h"
#include "dispatcher/state.h"
#include "dispatcher/status.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <jansson.h>

/* ---- formatting updates ---------------------------------------------------------------------- */

struct buf {
    char s[16384];
    size_t n;
};

static void bprintf(struct buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void bprintf(struct buf *b, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(b->s + b->n, sizeof b->s - b->n, fmt, ap);
    va_end(ap);
    assert_true(n >= 0 && (size_t)n < sizeof b->s - b->n);
    b->n += (size_t)n;
}

static void format_plan(struct buf *b, const struct split_plan *p)
{
    bprintf(b,
            " plan=(len=%" PRIu64 ",size=%" PRIu64 ",per_pass=%" PRIu64 ",passes=", p->source_len,
            p->split_size, p->per_pass);
    if (p->passes == UINT64_MAX)
        bprintf(b, "inf");
    else
        bprintf(b, "%" PRIu64, p->passes);
    for (size_t i = 0; i < p->npaths; i++)
        bprintf(b, "%s%s", i == 0 ? ",paths=" : "|", p->paths[i]);
    bprintf(b, ")");
}

/* One line per update: its type, then every field that is set, in a fixed order. */
static void format_update(struct buf *b, const struct st_update *u)
{
    bprintf(b, "%s", st_update_name(u->type));
    if (u->id)
        bprintf(b, " id=%" PRIu64, u->id);
    if (u->ref)
        bprintf(b, " ref=%" PRIu64, u->ref);
    if (u->ref2)
        bprintf(b, " ref2=%" PRIu64, u->ref2);
    if (u->name[0])
        bprintf(b, " name='%s'", u->name);
    if (u->name2[0])
        bprintf(b, " name2='%s'", u->name2);
    if (u->address[0])
        bprintf(b, " address='%s'", u->address);
    if (u->incarnation)
        bprintf(b, " inc=%" PRIu64, u->incarnation);
    if (u->type == ST_JOB_CREATED)
        bprintf(b, " mode=%s", mode_name((enum sluice_mode)u->mode));
    if (u->num_consumers)
        bprintf(b, " consumers=%" PRIu32, u->num_consumers);
    if (u->deterministic)
        bprintf(b, " det");
    if (u->xtc_bytes)
        bprintf(b, " xtc=%" PRIu64, u->xtc_bytes);
    if (u->target_workers)
        bprintf(b, " target=%s",
                target_workers_name((enum sluice_target_workers)u->target_workers));
    if (u->host_id[0])
        bprintf(b, " host='%s'", u->host_id);
    if (u->compression)
        bprintf(b, " comp=%d", u->compression);
    if (u->split_size)
        bprintf(b, " split=%" PRIu64, u->split_size);
    if (u->def)
        bprintf(b, " def='%.*s'", (int)u->def_len, (const char *)u->def);
    if (u->text)
        bprintf(b, " text='%s'", u->text);
    if (u->type == ST_ITERATION_CREATED)
        bprintf(b, " dist=%d", u->distributed);
    if (u->start)
        bprintf(b, " start=%" PRIu64, u->start);
    if (u->distributed)
        format_plan(b, &u->plan);
    if (u->seqs.n) {
        bprintf(b, " seqs=[");
        for (size_t i = 0; i < u->seqs.n; i++)
            bprintf(b, "%s%" PRIu64, i ? "," : "", u->seqs.v[i]);
        bprintf(b, "]");
    }
    if (u->key.set)
        bprintf(b, " key=%.*s", ST_KEY_LEN, (const char *)u->key.b);
    bprintf(b, "\n");
}

static const char *code_name(int rc)
{
    switch (rc) {
    case SLUICE_ERR_INVALID:
        return "INVALID";
    case SLUICE_ERR_NOT_FOUND:
        return "NOT_FOUND";
    case SLUICE_ERR_EXISTS:
        return "EXISTS";
    case SLUICE_ERR_CORRUPT:
        return "CORRUPT";
    case SLUICE_ERR_UNSUPPORTED:
        return "UNSUPPORTED";
    case SLUICE_ERR_NOMEM:
        return "NOMEM";
    case SLUICE_ERR_DENIED:
        return "DENIED";
    case SLUICE_ERR_LIMIT:
        return "LIMIT";
    case SLUICE_ERR_UNAVAILABLE:
        return "UNAVAILABLE";
    default:
        return "OTHER";
    }
}

/* ---- invariants ------------------------------------------------------------------------------ */

#define SORTED(s, table)                                                                           \
    do {                                                                                           \
        for (size_t i_ = 1; i_ < (s)->n##table; i_++)                                              \
            assert_true((s)->table[i_ - 1].id < (s)->table[i_].id);                                \
    } while (0)

static void check_seqs(const struct st_seq_list *l)
{
    for (size_t i = 1; i < l->n; i++)
        assert_true(l->v[i - 1] < l->v[i]);
}

/* What state.h promises always holds after a successful apply. */
/* An index of tasks lists exactly the tasks, sorted by (key, task), key being what field()
 * gives of the task; and each key's range holds exactly its tasks. */
static void check_index(const struct state *s, const struct st_task_ref *v, size_t n,
                        uint64_t (*field)(const struct st_task *),
                        const struct st_task_ref *(*range)(const struct state *, uint64_t,
                                                           size_t *))
{
    assert_int_equal(n, s->ntasks);
    for (size_t i = 0; i < n; i++) {
        const struct st_task_ref *r = &v[i];
        const struct st_task *t = state_task(s, r->task_id);
        assert_non_null(t);
        assert_int_equal(field(t), r->key);
        if (i > 0)
            assert_true(v[i - 1].key < r->key ||
                        (v[i - 1].key == r->key && v[i - 1].task_id < r->task_id));
    }
    for (size_t i = 0; i < s->ntasks; i++) {
        uint64_t key = field(&s->tasks[i]);
        size_t m, want = 0;
        const struct st_task_ref *mine = range(s, key, &m);
        for (size_t k = 0; k < s->ntasks; k++)
            want += field(&s->tasks[k]) == key;
        assert_int_equal(m, want);
        for (size_t k = 0; k < m; k++)
            assert_int_equal(mine[k].key, key);
    }
}

static uint64_t task_worker(const struct st_task *t)
{
    return t->worker_id;
}

static uint64_t task_iteration(const struct st_task *t)
{
    return t->iteration_id;
}

static void check_by_worker(const struct state *s)
{
    check_index(s, s->by_worker, s->nby_worker, task_worker, state_worker_tasks);
    check_index(s, s->by_iteration, s->nby_iteration, task_iteration, state_iteration_tasks);
    for (size_t i = 0; i < s->nworkers; i++) {
        size_t n;
        state_worker_tasks(s, s->workers[i].id, &n);
        size_t want = 0;
        for (size_t k = 0; k < s->ntasks; k++)
            want += s->tasks[k].worker_id == s->workers[i].id;
        assert_int_equal(n, want);
    }
}

static void check_invariants(const struct state *s)
{
    check_by_worker(s);
    for (size_t i = 1; i < s->ndatasets; i++)
        assert_true(strcmp(s->datasets[i - 1].id, s->datasets[i].id) < 0);
    SORTED(s, jobs);
    SORTED(s, iterations);
    SORTED(s, tasks);
    SORTED(s, workers);
    SORTED(s, clients);
    for (size_t i = 0; i < s->nworkers; i++) {
        assert_true(s->workers[i].id < s->next_worker_id);
        for (size_t k = i + 1; k < s->nworkers; k++)
            assert_string_not_equal(s->workers[i].address, s->workers[k].address);
        assert_ptr_equal(state_worker_by_address(s, s->workers[i].address), &s->workers[i]);
    }
    /* The address index: every worker once, by increasing address. */
    assert_int_equal(s->nby_address, s->nworkers);
    for (size_t i = 0; i < s->nby_address; i++) {
        assert_non_null(state_worker(s, s->by_address[i]));
        if (i > 0)
            assert_true(strcmp(state_worker(s, s->by_address[i - 1])->address,
                               state_worker(s, s->by_address[i])->address) < 0);
    }
    for (size_t i = 0; i < s->njobs; i++) {
        const struct st_job *j = &s->jobs[i];
        assert_true(j->id < s->next_job_id);
        assert_non_null(state_dataset(s, j->dataset_id));
        const struct st_iteration *it = state_iteration(s, j->iteration_id);
        assert_non_null(it);
        assert_int_equal(it->job_id, j->id);
        if (it->state == ST_ITER_GC)
            assert_true(j->name[0] != '\0');
    }
    for (size_t i = 0; i < s->niterations; i++) {
        const struct st_iteration *it = &s->iterations[i];
        assert_true(it->id < s->next_iteration_id);
        const struct st_job *j = state_job(s, it->job_id);
        assert_non_null(j);
        assert_int_equal(j->iteration_id, it->id);
        check_seqs(&it->pool);
        uint64_t leased = 0, sum = 0;
        size_t ntasks = 0, nfinished = 0;
        for (size_t k = 0; k < s->ntasks; k++) {
            if (s->tasks[k].iteration_id == it->id) {
                sum += state_task_mix(s->tasks[k].id, s->tasks[k].worker_id);
                leased += s->tasks[k].leased.n;
                ntasks++;
                nfinished += s->tasks[k].finished;
                /* The held index maps every leased split to its task. */
                for (size_t q = 0; q < s->tasks[k].leased.n; q++) {
                    uint64_t holder = 0;
                    assert_true(u64map_get(&it->held, s->tasks[k].leased.v[q], &holder));
                    assert_int_equal(holder, s->tasks[k].id);
                }
            }
        }
        assert_int_equal(leased, it->splits_leased);
        /* ... and nothing else. */
        assert_int_equal(it->held.n, it->splits_leased);
        assert_int_equal(it->tasks_sum, sum);
        if (it->held.n > 0) {
            uint64_t low = UINT64_MAX;
            for (size_t k = 0; k < s->ntasks; k++) {
                if (s->tasks[k].iteration_id == it->id && s->tasks[k].leased.n > 0 &&
                    s->tasks[k].leased.v[0] < low)
                    low = s->tasks[k].leased.v[0];
            }
            assert_int_equal(it->held_low, low);
        }
        assert_true(it->split_cursor <= it->split_total || it->state == ST_ITER_GC);
        for (size_t k = 0; k < it->pool.n; k++)
            assert_true(it->pool.v[k] < it->split_cursor);
        (void)nfinished;
        if (it->state == ST_ITER_FINISHED) {
            /* Its tasks may since have gone with their workers. */
            if (it->distributed) {
                assert_int_equal(it->splits_finished, it->split_total);
                assert_int_equal(it->pool.n, 0);
                assert_int_equal(it->splits_leased, 0);
            }
        }
        if (it->state == ST_ITER_GC)
            assert_int_equal(ntasks, 0);
        /* Round schedules: coordinated iterations only, in order, none past the grant. */
        if (!state_iteration_coordinated(s, it) || it->state == ST_ITER_GC) {
            assert_int_equal(it->nepochs, 0);
            assert_true(it->rounds_granted == 0 || state_iteration_coordinated(s, it));
        }
        assert_true(it->nepochs <= ST_ROUND_EPOCHS_MAX);
        for (size_t k = 0; k < it->nepochs; k++) {
            assert_true(it->epochs[k].start <= it->rounds_granted);
            assert_true(k == 0 || it->epochs[k - 1].start < it->epochs[k].start);
            check_seqs(&it->epochs[k].tasks);
        }
    }
    for (size_t i = 0; i < s->ntasks; i++) {
        const struct st_task *t = &s->tasks[i];
        assert_true(t->id < s->next_task_id);
        assert_non_null(state_iteration(s, t->iteration_id));
        assert_non_null(state_worker(s, t->worker_id));
        check_seqs(&t->leased);
        if (t->finished)
            assert_int_equal(t->leased.n, 0);
        for (size_t k = i + 1; k < s->ntasks; k++)
            assert_false(s->tasks[k].iteration_id == t->iteration_id &&
                         s->tasks[k].worker_id == t->worker_id);
    }
    for (size_t i = 0; i < s->nclients; i++) {
        const struct st_iteration *it = state_iteration(s, s->clients[i].iteration_id);
        assert_non_null(it);
        assert_true(it->state != ST_ITER_GC);
    }
    /* A running save's iteration is there, distributed and not collected; of the saves into a
     * path, all but the newest failed. */
    SORTED(s, saves);
    for (size_t i = 0; i < s->nsaves; i++) {
        const struct st_save *sv = &s->saves[i];
        assert_true(sv->path[0] == '/');
        for (size_t k = i + 1; k < s->nsaves; k++)
            assert_true(strcmp(sv->path, s->saves[k].path) != 0 || sv->state == ST_SV_FAILED);
        if (sv->state != ST_SV_RUNNING)
            continue;
        const struct st_iteration *it = state_iteration(s, sv->iteration_id);
        assert_non_null(it);
        assert_true(it->distributed && it->state != ST_ITER_GC);
        assert_int_equal(it->split_total, sv->chunks);
        assert_true(state_save_committed(s, sv) <= sv->chunks);
    }
}

/* ---- the script harness ---------------------------------------------------------------------- */

/* Commands, one per line, words separated by spaces:
 *   ds ID DEF [comp=N] [split=N]          register (ID "-" asks for a generated id; DEF is both
 *                                         the definition bytes and the text)
 *   job DATASET [name=N] [mode=M] [consumers=N] [total=N|inf] [paths=a,b] [ends]
 *                                         get or create a job; total gives a split plan of
 *                                         total one-element splits (inf: 2 per pass, forever);
 *                                         ends: the dataset's pipeline is finite
 *   hb ADDRESS INC [fin=1,2] [drain]      a worker heartbeat
 *   rm WORKER                             remove a worker
 *   splits TASK MAX [fin=1,2] [req=N] [ret=3,4]
 *                                         get splits (request number N; default 0, unnumbered),
 *                                         handing back ret (plan_get_splits);
 *                                         outputs end and the seqs of the reply
 *   done ITERATION [1,2]                  consumers received these splits in full
 *   back TASK                             hand every split leased to the task back
 *   chb CLIENT [round=N] [window=N]     a client heartbeat at round N asking grants of window
 *                                         rounds; outputs the grant of a coordinated read
 *   rel CLIENT | gc ITERATION
 *   failed WORKER TASK,... [msg=A_B]       the worker reports the tasks failed ('_' in msg is a
 *                                         space)
 *   limits [datasets=N] [pipeline=N] [jobs=N]
 *                                         sets the state's limits (configuration; no update)
 * job also takes [owner=N], the incarnation of the sluice_client asking (default 0), and
 * [target=local|auto|N] [host=H], its target workers and host; hb takes [host=H], the worker's
 * host (it then registers with the secret 's' * 16).
 * A command prints its updates, one per line, then "=> " and its outputs; or "error CODE: msg". */
struct harness {
    struct state s;
    struct st_update_list ups;
    struct st_update_list record; /* every update applied, in order */
    struct buf out;
};

static void harness_init(struct harness *h)
{
    memset(h, 0, sizeof *h);
    state_init(&h->s);
}

static void harness_release(struct harness *h)
{
    state_release(&h->s);
    st_update_list_release(&h->ups);
    st_update_list_release(&h->record);
}

/* Applies the planned updates and moves them (with their ownership) to the record. */
static void commit(struct harness *h)
{
    for (size_t i = 0; i < h->ups.n; i++) {
        int rc = state_apply(&h->s, &h->ups.v[i]);
        if (rc != 0) {
            struct buf b = {0};
            format_update(&b, &h->ups.v[i]);
            fail_msg("apply %s failed: %d", b.s, rc);
        }
        struct st_update *r = st_update_list_push(&h->record, h->ups.v[i].type);
        assert_non_null(r);
        *r = h->ups.v[i];
    }
    h->ups.n = 0; /* ownership moved to the record */
    check_invariants(&h->s);
}

static size_t parse_list(const char *text, uint64_t *v, size_t cap)
{
    size_t n = 0;
    while (*text) {
        char *end;
        assert_true(n < cap);
        v[n++] = strtoull(text, &end, 10);
        assert_true(end != text);
        text = *end == ',' ? end + 1 : end;
    }
    return n;
}

static const char *opt(char **words, size_t nwords, const char *key)
{
    size_t k = strlen(key);
    for (size_t i = 0; i < nwords; i++) {
        if (strncmp(words[i], key, k) == 0 && words[i][k] == '=')
            return words[i] + k + 1;
        if (strcmp(words[i], key) == 0)
            return "";
    }
    return NULL;
}

static const char *run(struct harness *h, const char *line)
{
    char copy[1024], *words[16], *save = NULL;
    size_t nw = 0;
    snprintf(copy, sizeof copy, "%s", line);
    for (char *w = strtok_r(copy, " ", &save); w; w = strtok_r(NULL, " ", &save)) {
        assert_true(nw < 16);
        words[nw++] = w;
    }
    assert_true(nw >= 2);
    h->out.n = 0;
    h->out.s[0] = '\0';
    char err[256] = "", outs[256] = "";
    int rc;
    const char *cmd = words[0], *v;
    uint64_t fin[64];
    size_t nfin = 0;
    if ((v = opt(words, nw, "fin")))
        nfin = parse_list(v, fin, 64);

    if (strcmp(cmd, "ds") == 0) {
        char id_out[ST_ID_MAX] = "";
        const char *def = words[2];
        v = opt(words, nw, "comp");
        int comp = v ? atoi(v) : 0;
        v = opt(words, nw, "split");
        uint64_t split = v ? strtoull(v, NULL, 10) : 0;
        rc = plan_register_dataset(&h->s, strcmp(words[1], "-") == 0 ? "" : words[1],
                                   (const uint8_t *)def, strlen(def), comp, split, def, id_out,
                                   &h->ups, err, sizeof err);
        snprintf(outs, sizeof outs, "id=%s", id_out);
    } else if (strcmp(cmd, "job") == 0) {
        enum sluice_mode mode = SLUICE_PARALLEL_EPOCHS;
        if ((v = opt(words, nw, "mode")))
            assert_int_equal(mode_parse(v, &mode), 0);
        v = opt(words, nw, "consumers");
        uint32_t consumers = v ? (uint32_t)atoi(v) : 0;
        struct split_plan plan = {0}, *pp = NULL;
        char *paths[4];
        if ((v = opt(words, nw, "total"))) {
            pp = &plan;
            plan.split_size = 1;
            if (strcmp(v, "inf") == 0) {
                plan.source_len = plan.per_pass = 2;
                plan.passes = UINT64_MAX;
            } else {
                plan.source_len = plan.per_pass = strtoull(v, NULL, 10);
                plan.passes = 1;
            }
        }
        char pathbuf[256];
        if ((v = opt(words, nw, "paths"))) {
            snprintf(pathbuf, sizeof pathbuf, "%s", v);
            char *s2 = NULL;
            for (char *p = strtok_r(pathbuf, ",", &s2); p; p = strtok_r(NULL, ",", &s2))
                paths[plan.npaths++] = p;
            plan.paths = paths;
        }
        struct plan_job_request job = {.dataset_id = words[1],
                                       .job_name = opt(words, nw, "name"),
                                       .mode = mode,
                                       .num_consumers = consumers,
                                       .deterministic = opt(words, nw, "det") != NULL,
                                       .endless = opt(words, nw, "ends") == NULL,
                                       .plan = pp};
        struct plan_job_result ids = {0};
        if ((v = opt(words, nw, "owner")))
            job.owner = strtoull(v, NULL, 10);
        /* resume=B-E,B-E: a restored read whose reader had splits [B, E) whole; fp=bad: its
         * checkpoint was taken under another split plan. */
        uint64_t bounds[16];
        struct plan_resume resume = {.bounds = bounds};
        char resumebuf[256];
        if ((v = opt(words, nw, "resume"))) {
            job.resume = &resume;
            snprintf(resumebuf, sizeof resumebuf, "%s", v);
            char *s3 = NULL;
            for (char *r = strtok_r(resumebuf, ",", &s3); r && resume.nbounds < 16;
                 r = strtok_r(NULL, ",", &s3)) {
                char *dash = strchr(r, '-');
                bounds[resume.nbounds++] = strtoull(r, NULL, 10);
                if (dash)
                    bounds[resume.nbounds++] = strtoull(dash + 1, NULL, 10);
            }
            resume.plan_fingerprint = opt(words, nw, "fpbad") ? 1 : split_plan_fingerprint(pp);
        }
        if ((v = opt(words, nw, "xtc")))
            job.xtc_bytes = strtoull(v, NULL, 10);
        if ((v = opt(words, nw, "target")))
            job.target = strcmp(v, "local") == 0  ? SLUICE_TARGET_WORKERS_LOCAL
                         : strcmp(v, "auto") == 0 ? SLUICE_TARGET_WORKERS_AUTO
                                                  : (enum sluice_target_workers)atoi(v);
        job.host = opt(words, nw, "host");
        rc = plan_get_or_create_job(&h->s, &job, &ids, &h->ups, err, sizeof err);
        snprintf(outs, sizeof outs, "job=%" PRIu64 " iteration=%" PRIu64 " client=%" PRIu64,
                 ids.job_id, ids.iteration_id, ids.client_id);
    } else if (strcmp(cmd, "hb") == 0) {
        uint64_t wid = 0;
        uint8_t key[ST_KEY_LEN];
        struct plan_heartbeat_request hb = {
            .address = strcmp(words[1], "''") == 0 ? "" : words[1],
            .incarnation = strtoull(words[2], NULL, 10),
            .may_replace = true,
            .host = opt(words, nw, "host"),
            .finished = fin,
            .nfinished = nfin,
            .draining = opt(words, nw, "drain") != NULL,
        };
        if (hb.host) {
            /* host=H: a worker on host H, registering with the secret 's' * 16. */
            memset(key, 's', sizeof key);
            hb.key = key;
            hb.key_len = sizeof key;
        } else if ((v = opt(words, nw, "key"))) {
            /* key=K: the worker's secret is the letter K 16 times; key= sends none; key=KKK
             * (more than one letter) sends those bytes only. stays: the holder of the address
             * is still heartbeating (may_replace false). */
            size_t len = strlen(v) == 1 ? ST_KEY_LEN : strlen(v);
            assert_true(len <= ST_KEY_LEN);
            for (size_t k = 0; k < len; k++)
                key[k] = (uint8_t)(strlen(v) == 1 ? v[0] : v[k]);
            hb.key = key;
            hb.key_len = len;
            hb.may_replace = opt(words, nw, "stays") == NULL;
        } else {
            hb.unkeyed = true;
        }
        rc = plan_worker_heartbeat(&h->s, &hb, &wid, &h->ups, err, sizeof err);
        snprintf(outs, sizeof outs, "worker=%" PRIu64, wid);
    } else if (strcmp(cmd, "rm") == 0) {
        rc = plan_remove_worker(&h->s, strtoull(words[1], NULL, 10), &h->ups, err, sizeof err);
    } else if (strcmp(cmd, "splits") == 0) {
        uint64_t ret[64];
        struct plan_splits_request sr = {.task_id = strtoull(words[1], NULL, 10),
                                         .finished = fin,
                                         .nfinished = nfin,
                                         .returned = ret,
                                         .max = (uint32_t)atoi(words[2])};
        if ((v = opt(words, nw, "req")))
            sr.request_seq = strtoull(v, NULL, 10);
        if ((v = opt(words, nw, "ret")))
            sr.nreturned = parse_list(v, ret, 64);
        if ((v = opt(words, nw, "below")))
            sr.lease_below = strtoull(v, NULL, 10);
        struct plan_splits_result lease;
        rc = plan_get_splits(&h->s, &sr, &lease, &h->ups, err, sizeof err);
        int n = snprintf(outs, sizeof outs, "end=%d", lease.end);
        for (size_t i = 0; i < lease.nseqs && n < 200; i++)
            n += snprintf(outs + n, sizeof outs - (size_t)n, "%s%" PRIu64, i ? "," : " seqs=[",
                          lease.seqs[i]);
        if (lease.nseqs)
            snprintf(outs + n, sizeof outs - (size_t)n, "]");
        free(lease.seqs);
    } else if (strcmp(cmd, "chb") == 0) {
        v = opt(words, nw, "round");
        uint64_t round = v ? strtoull(v, NULL, 10) : 0;
        v = opt(words, nw, "window");
        uint64_t window = v ? strtoull(v, NULL, 10) : 0, granted = 0;
        rc = plan_client_heartbeat(&h->s, strtoull(words[1], NULL, 10), round, window, &h->ups,
                                   &granted, err, sizeof err);
        if (granted)
            snprintf(outs, sizeof outs, "granted=%" PRIu64, granted);
    } else if (strcmp(cmd, "failed") == 0) {
        /* failed WORKER TASK[,TASK...] [msg=WORDS_WITH_UNDERSCORES] */
        uint64_t ids[16];
        size_t n = parse_list(words[2], ids, 16);
        char msg[256] = "";
        if ((v = opt(words, nw, "msg"))) {
            snprintf(msg, sizeof msg, "%s", v);
            for (char *p = msg; *p; p++)
                if (*p == '_')
                    *p = ' ';
        }
        struct plan_task_failure f[16];
        for (size_t i = 0; i < n; i++)
            f[i] = (struct plan_task_failure){ids[i], msg};
        rc = plan_tasks_failed(&h->s, strtoull(words[1], NULL, 10), f, n, &h->ups, err, sizeof err);
    } else if (strcmp(cmd, "limits") == 0) {
        if ((v = opt(words, nw, "datasets")))
            h->s.limits.max_datasets = strtoull(v, NULL, 10);
        if ((v = opt(words, nw, "pipeline")))
            h->s.limits.max_pipeline_bytes = strtoull(v, NULL, 10);
        if ((v = opt(words, nw, "jobs")))
            h->s.limits.max_jobs_per_client = strtoull(v, NULL, 10);
        rc = 0;
    } else if (strcmp(cmd, "rel") == 0) {
        rc = plan_release_client(&h->s, strtoull(words[1], NULL, 10), &h->ups, err, sizeof err);
    } else if (strcmp(cmd, "gc") == 0) {
        rc = plan_gc_iteration(&h->s, strtoull(words[1], NULL, 10), &h->ups, err, sizeof err);
    } else if (strcmp(cmd, "done") == 0) {
        uint64_t seqs[64];
        size_t n = nw > 2 ? parse_list(words[2], seqs, 64) : 0;
        rc = plan_splits_finished(&h->s, strtoull(words[1], NULL, 10), seqs, n, &h->ups, err,
                                  sizeof err);
    } else if (strcmp(cmd, "redo") == 0) {
        uint64_t seqs[64];
        size_t n = nw > 2 ? parse_list(words[2], seqs, 64) : 0;
        rc = plan_splits_redo(&h->s, strtoull(words[1], NULL, 10), seqs, n, &h->ups, err,
                              sizeof err);
    } else if (strcmp(cmd, "below") == 0) {
        snprintf(outs, sizeof outs, "below=%" PRIu64,
                 state_splits_finished_below(&h->s, strtoull(words[1], NULL, 10)));
        rc = 0;
    } else if (strcmp(cmd, "save") == 0) {
        /* save DATASET PATH [total=N|inf] [endless]: a save with a plan of N one-element splits
         * (none without total) of a pipeline that ends unless endless. */
        struct split_plan plan = {.split_size = 1}, *pp = NULL;
        if ((v = opt(words, nw, "total"))) {
            pp = &plan;
            if (strcmp(v, "inf") == 0) {
                plan.source_len = plan.per_pass = 2;
                plan.passes = UINT64_MAX;
            } else {
                plan.source_len = plan.per_pass = strtoull(v, NULL, 10);
                plan.passes = 1;
            }
        }
        uint64_t save = 0;
        rc = plan_save_start(&h->s, words[1], strcmp(words[2], "''") == 0 ? "" : words[2], pp,
                             opt(words, nw, "endless") != NULL, &save, &h->ups, err, sizeof err);
        snprintf(outs, sizeof outs, "save=%" PRIu64, save);
    } else if (strcmp(cmd, "saved") == 0) {
        rc = plan_save_finished(&h->s, strtoull(words[1], NULL, 10), &h->ups, err, sizeof err);
    } else if (strcmp(cmd, "savefail") == 0) {
        char msg[256] = "";
        if ((v = opt(words, nw, "msg"))) {
            snprintf(msg, sizeof msg, "%s", v);
            for (char *p = msg; *p; p++)
                if (*p == '_')
                    *p = ' ';
        }
        rc = plan_save_failed(&h->s, strtoull(words[1], NULL, 10), msg, &h->ups, err, sizeof err);
    } else if (strcmp(cmd, "committed") == 0) {
        const struct st_save *sv = state_save(&h->s, strtoull(words[1], NULL, 10));
        assert_non_null(sv);
        snprintf(outs, sizeof outs, "committed=%" PRIu64 " of %" PRIu64 " %s",
                 state_save_committed(&h->s, sv), sv->chunks, st_save_state_name(sv->state));
        rc = 0;
    } else if (strcmp(cmd, "rep") == 0) {
        rc = plan_job_repetition(&h->s, words[1], strcmp(words[2], "''") == 0 ? "" : words[2],
                                 strtoull(words[3], NULL, 10), &h->ups, err, sizeof err);
    } else if (strcmp(cmd, "back") == 0) {
        rc = plan_return_task_splits(&h->s, strtoull(words[1], NULL, 10), &h->ups, err, sizeof err);
    } else {
        fail_msg("unknown command %s", cmd);
        return NULL;
    }
    if (rc < 0) {
        /* A refusal appends nothing. */
        assert_int_equal(h->ups.n, 0);
        bprintf(&h->out, "error %s: %s", code_name(rc), err);
        return h->out.s;
    }
    for (size_t i = 0; i < h->ups.n; i++)
        format_update(&h->out, &h->ups.v[i]);
    bprintf(&h->out, "=>%s%s", outs[0] ? " " : "", outs);
    commit(h);
    return h->out.s;
}

/* Runs every line of script; each must succeed. */
static void run_script(struct harness *h, const char *script)
{
    char copy[4096], *save = NULL;
    snprintf(copy, sizeof copy, "%s", script);
    for (char *line = strtok_r(copy, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
        const char *r = run(h, line);
        if (strncmp(r, "error", 5) == 0)
            fail_msg("setup '%s' failed: %s", line, r);
    }
}

/* ---- planning cases -------------------------------------------------------------------------- */

struct plan_case {
    const char *name;
    const char *setup;
    const char *cmd;
    const char *expect;
};

/* A distributed job (dataset 1, job 1, iteration 1, client 1) with tasks 1 and 2 on workers 1
 * (a:1) and 2 (b:1), and four splits. */
#define DIST2 "ds - r4\nhb a:1 1\nhb b:1 1\njob 1 mode=distributed_epoch total=4\n"
/* The same job deterministic. */
#define DET2 "ds - r4\nhb a:1 1\nhb b:1 1\njob 1 mode=distributed_epoch total=4 det\n"
/* The same with a parallel_epochs job. */
#define PAR2 "ds - r4\nhb a:1 1\nhb b:1 1\njob 1\n"
/* A coordinated job of two consumers (clients 1 and 2) over tasks 1 and 2, whose first rounds
 * (64) are granted. */
#define COORD2                                                                                     \
    "ds - r4\nhb a:1 1\nhb b:1 1\njob 1 name=c consumers=2\njob 1 name=c consumers=2\n"            \
    "chb 1 window=64\n"

static const struct plan_case plan_cases[] = {
    /* register_dataset */
    {"dataset generated", "", "ds - r10",
     "dataset_registered id=1 name='1' def='r10' text='r10'\n=> id=1"},
    {"dataset generated keeps compression and split size", "", "ds - r10 comp=1 split=3",
     "dataset_registered id=1 name='1' comp=1 split=3 def='r10' text='r10'\n=> id=1"},
    {"dataset anonymous duplicate shares the id", "ds - r10\nds - r20", "ds - r10", "=> id=1"},
    {"dataset anonymous with other compression is new", "ds - r10", "ds - r10 comp=1",
     "dataset_registered id=2 name='2' comp=1 def='r10' text='r10'\n=> id=2"},
    {"dataset anonymous never joins an explicit id", "ds a r10", "ds - r10",
     "dataset_registered id=1 name='1' def='r10' text='r10'\n=> id=1"},
    {"dataset generated skips a taken decimal id", "ds 1 x\nds 2 y", "ds - r10",
     "dataset_registered id=3 name='3' def='r10' text='r10'\n=> id=3"},
    {"dataset explicit", "", "ds mine r10",
     "dataset_registered name='mine' def='r10' text='r10'\n=> id=mine"},
    {"dataset explicit same definition", "ds mine r10", "ds mine r10", "=> id=mine"},
    {"dataset explicit other definition", "ds mine r10", "ds mine r11",
     "error EXISTS: dataset 'mine' already exists with a different pipeline"},
    {"dataset explicit other compression", "ds mine r10", "ds mine r10 comp=1",
     "error EXISTS: dataset 'mine' already exists with compression auto, not none"},
    {"dataset explicit other split size", "ds mine r10 split=8", "ds mine r10 split=16",
     "error EXISTS: dataset 'mine' already exists with split_size 8, not 16"},
    {"dataset id too long", "",
     "ds "
     "xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"
     "xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx r10",
     "error INVALID: dataset id: 128 bytes, longer than the limit of 127"},
    {"dataset id not UTF-8", "",
     "ds ab\xff"
     "c r10",
     "error INVALID: dataset id: not valid UTF-8 at byte 2"},
    {"dataset id with a control character", "", "ds ab\x01 r10",
     "error INVALID: dataset id: control character at byte 2"},
    {"dataset id with a C1 control", "", "ds ab\xc2\x85 r10",
     "error INVALID: dataset id: control character at byte 2"},
    {"dataset id UTF-8", "", "ds caf\xc3\xa9 r10",
     "dataset_registered name='caf\xc3\xa9' def='r10' text='r10'\n=> id=caf\xc3\xa9"},

    /* limits */
    {"dataset limit reached", "limits datasets=2\nds a r1\nds b r2", "ds c r3",
     "error LIMIT: dataset limit reached: 2 datasets (--max-datasets)"},
    {"dataset limit reached, generated id", "limits datasets=2\nds a r1\nds b r2", "ds - r3",
     "error LIMIT: dataset limit reached: 2 datasets (--max-datasets)"},
    {"dataset limit: an existing dataset is still found", "limits datasets=2\nds a r1\nds - r2",
     "ds - r2", "=> id=1"},
    {"dataset limit: an existing explicit id is still found", "limits datasets=2\nds a r1\nds b r2",
     "ds a r1", "=> id=a"},
    {"dataset limit not yet reached", "limits datasets=2\nds a r1", "ds b r2",
     "dataset_registered name='b' def='r2' text='r2'\n=> id=b"},
    {"pipeline over the limit", "limits pipeline=4", "ds a range(100)",
     "error LIMIT: pipeline of 10 bytes is over the limit of 4 bytes (--max-pipeline-bytes)"},
    {"pipeline at the limit", "limits pipeline=4", "ds a r100",
     "dataset_registered name='a' def='r100' text='r100'\n=> id=a"},
    {"job limit per client reached", "limits jobs=2\nds - r4\njob 1 owner=7\njob 1 owner=7",
     "job 1 owner=7",
     "error LIMIT: job limit reached: this client holds 2 jobs (--max-jobs-per-client)"},
    {"job limit: another client is served", "limits jobs=2\nds - r4\njob 1 owner=7\njob 1 owner=7",
     "job 1 owner=8",
     "job_created id=3 name2='1' mode=parallel_epochs\n"
     "iteration_created id=3 ref=3 dist=0\n"
     "client_acquired id=3 ref=3 inc=8\n"
     "=> job=3 iteration=3 client=3"},
    {"job limit: a released client frees its place",
     "limits jobs=2\nds - r4\njob 1 owner=7\njob 1 owner=7\nrel 1", "job 1 owner=7",
     "job_created id=3 name2='1' mode=parallel_epochs\n"
     "iteration_created id=3 ref=3 dist=0\n"
     "client_acquired id=3 ref=3 inc=7\n"
     "=> job=3 iteration=3 client=3"},
    {"job limit: clients of no known owner are not limited", "limits jobs=1\nds - r4\njob 1\njob 1",
     "job 1",
     "job_created id=3 name2='1' mode=parallel_epochs\n"
     "iteration_created id=3 ref=3 dist=0\n"
     "client_acquired id=3 ref=3\n"
     "=> job=3 iteration=3 client=3"},

    /* get_or_create_job */
    {"job anonymous parallel on two workers", "ds - r4\nhb a:1 1\nhb b:1 1", "job 1",
     "job_created id=1 name2='1' mode=parallel_epochs\n"
     "iteration_created id=1 ref=1 dist=0\n"
     "task_created id=1 ref=1 ref2=1\n"
     "task_created id=2 ref=1 ref2=2\n"
     "client_acquired id=1 ref=1\n"
     "=> job=1 iteration=1 client=1"},
    {"job name not UTF-8", "ds - r4", "job 1 name=ab\xff",
     "error INVALID: job name: not valid UTF-8 at byte 2"},
    {"job name with a newline", "ds - r4", "job 1 name=a\nb",
     "error INVALID: job name: control character at byte 1"},
    {"job dataset id not UTF-8", "ds - r4", "job \xc3(",
     "error INVALID: dataset id: not valid UTF-8 at byte 0"},
    {"job with no workers has no tasks", "ds - r4", "job 1 name=n consumers=2",
     "job_created id=1 name='n' name2='1' mode=parallel_epochs consumers=2\n"
     "iteration_created id=1 ref=1 dist=0\n"
     "rounds_scheduled ref=1\n"
     "client_acquired id=1 ref=1\n"
     "=> job=1 iteration=1 client=1"},
    {"job distributed copies the plan", "ds - r4\nhb a:1 1", "job 1 mode=dynamic total=4 paths=x,y",
     "job_created id=1 name2='1' mode=distributed_epoch\n"
     "iteration_created id=1 ref=1 dist=1 plan=(len=4,size=1,per_pass=4,passes=1,paths=x|y)\n"
     "task_created id=1 ref=1 ref2=1\n"
     "client_acquired id=1 ref=1\n"
     "=> job=1 iteration=1 client=1"},
    {"job distributed without a plan", "ds - r4", "job 1 mode=distributed_epoch",
     "error INVALID: a distributed_epoch iteration needs a split plan"},
    {"job unknown dataset", "ds - r4", "job 9", "error NOT_FOUND: dataset '9' not found"},
    {"job anonymous twice makes two jobs", "ds - r4\nhb a:1 1\njob 1", "job 1",
     "job_created id=2 name2='1' mode=parallel_epochs\n"
     "iteration_created id=2 ref=2 dist=0\n"
     "task_created id=2 ref=2 ref2=1\n"
     "client_acquired id=2 ref=2\n"
     "=> job=2 iteration=2 client=2"},
    {"job named is shared", "ds - r4\nhb a:1 1\njob 1 name=n mode=distributed_epoch total=2",
     "job 1 name=n mode=distributed_epoch",
     "client_acquired id=2 ref=1\n=> job=1 iteration=1 client=2"},
    {"job named other mode", "ds - r4\njob 1 name=n", "job 1 name=n mode=distributed_epoch total=2",
     "error EXISTS: job 'n' exists with mode parallel_epochs, not distributed_epoch"},
    {"job named on another dataset is another job", "ds - r4\nds - r5\njob 1 name=n",
     "job 2 name=n",
     "job_created id=2 name='n' name2='2' mode=parallel_epochs\n"
     "iteration_created id=2 ref=2 dist=0\n"
     "client_acquired id=2 ref=2\n"
     "=> job=2 iteration=2 client=2"},
    {"job named is shared per dataset", "ds - r4\nds - r5\njob 1 name=n\njob 2 name=n",
     "job 2 name=n", "client_acquired id=3 ref=2\n=> job=2 iteration=2 client=3"},
    {"job named other mode on its own dataset only",
     "ds - r4\nds - r5\njob 1 name=n\njob 2 name=n mode=distributed_epoch total=2",
     "job 1 name=n mode=distributed_epoch total=2",
     "error EXISTS: job 'n' exists with mode parallel_epochs, not distributed_epoch"},
    {"job coordinated of a finite pipeline", "ds - r4", "job 1 name=n consumers=1 ends",
     "error UNSUPPORTED: num_consumers needs an infinite pipeline: 'r4' ends; add repeat()"},
    {"job finite pipeline without consumers", "ds - r4", "job 1 name=n ends",
     "job_created id=1 name='n' name2='1' mode=parallel_epochs\n"
     "iteration_created id=1 ref=1 dist=0\n"
     "client_acquired id=1 ref=1\n"
     "=> job=1 iteration=1 client=1"},
    {"job named other consumer count", "ds - r4\njob 1 name=n consumers=2",
     "job 1 name=n consumers=3", "error EXISTS: job 'n' exists with num_consumers 2, not 3"},
    {"job named finished is joined", "ds - r4\nhb a:1 1\njob 1 name=n\nhb a:1 1 fin=1",
     "job 1 name=n", "client_acquired id=2 ref=1\n=> job=1 iteration=1 client=2"},
    {"job named after collection gets a new repetition",
     "ds - r4\nhb a:1 1\njob 1 name=n\nrel 1\ngc 1", "job 1 name=n",
     "iteration_created id=2 ref=1 ref2=1 dist=0\n"
     "task_created id=2 ref=2 ref2=1\n"
     "client_acquired id=2 ref=2\n"
     "=> job=1 iteration=2 client=2"},
    {"job skips draining workers", "ds - r4\nhb a:1 1 drain\nhb b:1 1", "job 1",
     "job_created id=1 name2='1' mode=parallel_epochs\n"
     "iteration_created id=1 ref=1 dist=0\n"
     "task_created id=1 ref=1 ref2=2\n"
     "client_acquired id=1 ref=1\n"
     "=> job=1 iteration=1 client=1"},
    {"job static mode", "ds - r4\nhb a:1 1", "job 1 mode=file_or_data",
     "job_created id=1 name2='1' mode=file_or_data\n"
     "iteration_created id=1 ref=1 dist=0\n"
     "task_created id=1 ref=1 ref2=1\n"
     "client_acquired id=1 ref=1\n"
     "=> job=1 iteration=1 client=1"},

    /* worker_heartbeat */
    {"heartbeat registers and joins active iterations",
     "ds - r4\njob 1\njob 1\nhb x:1 1\nhb x:1 1 fin=1\njob 1", "hb b:1 7",
     "worker_registered id=2 address='b:1' inc=7\n"
     "task_created id=4 ref=2 ref2=2\n"
     "task_created id=5 ref=3 ref2=2\n"
     "=> worker=2"},
    {"heartbeat known worker with nothing new", PAR2, "hb a:1 1", "=> worker=1"},
    {"heartbeat: no task for an iteration nobody reads", "ds - r4\nhb a:1 1\njob 1 name=n\nrel 1",
     "hb b:1 7", "worker_registered id=2 address='b:1' inc=7\n=> worker=2"},
    {"heartbeat: a reader that comes back brings the tasks",
     "ds - r4\nhb a:1 1\njob 1 name=n\nrel 1\nhb b:1 7\njob 1 name=n", "hb b:1 7",
     "task_created id=2 ref=1 ref2=2\n=> worker=2"},
    {"task failure recorded", PAR2, "failed 1 1 msg=map(bytes):_too_big",
     "iteration_failed id=1 text='task 1: map(bytes): too big'\n=>"},
    {"task failure: once per iteration", PAR2, "failed 2 2,2 msg=x",
     "iteration_failed id=1 text='task 2: x'\n=>"},
    {"task failure repeated is ignored", PAR2 "failed 1 1 msg=x", "failed 1 1 msg=y", "=>"},
    {"task failure of another worker's task is ignored", PAR2, "failed 2 1 msg=x", "=>"},
    {"task failure of an unknown task is ignored", PAR2, "failed 1 99 msg=x", "=>"},
    {"task failure with an empty message", PAR2, "failed 1 1",
     "iteration_failed id=1 text='task 1: task failed'\n=>"},
    {"task failure: bad bytes in the message are escaped", PAR2, "failed 1 1 msg=a\x01\xff",
     "iteration_failed id=1 text='task 1: a\\x01\\xff'\n=>"},
    {"failed iteration: no task on a new worker", PAR2 "failed 1 1 msg=x", "hb c:1 1",
     "worker_registered id=3 address='c:1' inc=1\n=> worker=3"},
    {"heartbeat address with a control character", "", "hb host:1\x7f 1",
     "error INVALID: worker address: control character at byte 6"},
    {"heartbeat address not UTF-8", "", "hb host\xe2\x82:1 1",
     "error INVALID: worker address: not valid UTF-8 at byte 4"},
    {"heartbeat finishes one of two tasks", PAR2, "hb a:1 1 fin=1",
     "task_finished id=1\n=> worker=1"},
    {"heartbeat finishes the last task", PAR2 "hb a:1 1 fin=1", "hb b:1 1 fin=2",
     "task_finished id=2\niteration_finished id=1\n=> worker=2"},
    {"heartbeat repeated and foreign finishes are ignored", PAR2 "hb a:1 1 fin=1",
     "hb a:1 1 fin=1,2,99,1", "=> worker=1"},
    {"heartbeat distributed with splits left is not finished",
     DIST2 "splits 1 4 fin=", "hb b:1 1 fin=2", "task_finished id=2\n=> worker=2"},
    {"heartbeat distributed all splits done finishes",
     DIST2 "splits 1 4\nsplits 1 0 fin=0,1,2,3\nhb a:1 1 fin=1", "hb b:1 1 fin=2",
     "task_finished id=2\niteration_finished id=1\n=> worker=2"},
    {"heartbeat finished task returns its leases", DIST2 "splits 1 2", "hb a:1 1 fin=1",
     "splits_returned ref=1 ref2=1 seqs=[0,1]\ntask_finished id=1\n=> worker=1"},
    {"heartbeat new incarnation replaces the worker", DIST2 "splits 1 2\nsplits 1 1 fin=0",
     "hb a:1 2",
     "splits_returned ref=1 ref2=1 seqs=[1,2]\n"
     "task_removed id=1 ref=1\n"
     "worker_removed id=1\n"
     "worker_registered id=3 address='a:1' inc=2\n"
     "task_created id=3 ref=1 ref2=3\n"
     "=> worker=3"},
    {"heartbeat new incarnation draining can finish", PAR2 "hb b:1 1 fin=2", "hb a:1 2 drain",
     "task_removed id=1 ref=1\n"
     "worker_removed id=1\n"
     "worker_registered id=3 address='a:1' inc=2\n"
     "worker_draining id=3\n"
     "iteration_finished id=1\n"
     "=> worker=3"},
    {"heartbeat drain gets no new tasks", "ds - r4\nhb a:1 1", "hb a:1 1 drain",
     "worker_draining id=1\n=> worker=1"},
    {"heartbeat draining stays draining", "ds - r4\nhb a:1 1 drain\njob 1", "hb a:1 1",
     "=> worker=1"},
    {"heartbeat skips finished iterations", "ds - r4\nhb a:1 1\njob 1\nhb a:1 1 fin=1", "hb b:1 1",
     "worker_registered id=2 address='b:1' inc=1\n=> worker=2"},
    {"heartbeat empty address", "", "hb '' 1", "error INVALID: worker address is empty"},

    /* remove_worker */
    {"remove unknown worker", PAR2, "rm 9", "error NOT_FOUND: worker 9 not found"},
    {"remove returns leases", DIST2 "splits 1 3\nsplits 1 0 fin=1", "rm 1",
     "splits_returned ref=1 ref2=1 seqs=[0,2]\n"
     "task_removed id=1 ref=1\n"
     "worker_removed id=1\n"
     "=>"},
    {"remove leaves finished peers finishing", PAR2 "hb b:1 1 fin=2", "rm 1",
     "task_removed id=1 ref=1\nworker_removed id=1\niteration_finished id=1\n=>"},
    {"remove the only worker does not finish", "ds - r4\nhb a:1 1\njob 1", "rm 1",
     "task_removed id=1 ref=1\nworker_removed id=1\n=>"},
    {"remove with returned splits does not finish", DIST2 "splits 2 4\nsplits 1 0\nhb a:1 1 fin=1",
     "rm 2",
     "splits_returned ref=1 ref2=2 seqs=[0,1,2,3]\n"
     "task_removed id=2 ref=1\n"
     "worker_removed id=2\n"
     "=>"},

    /* get_splits */
    /* deterministic jobs: the flag, redo, the lease bound, the finished floor */
    {"job deterministic", "ds - r4\nhb a:1 1", "job 1 mode=distributed_epoch total=4 det",
     "job_created id=1 name2='1' mode=distributed_epoch det\n"
     "iteration_created id=1 ref=1 dist=1 plan=(len=4,size=1,per_pass=4,passes=1)\n"
     "task_created id=1 ref=1 ref2=1\n"
     "client_acquired id=1 ref=1\n"
     "=> job=1 iteration=1 client=1"},
    {"job deterministic in another mode", "ds - r4", "job 1 det",
     "error UNSUPPORTED: deterministic reads need mode distributed_epoch without num_consumers, "
     "not parallel_epochs"},
    {"job deterministic coordinated", "ds - r4",
     "job 1 name=n mode=distributed_epoch "
     "consumers=2 det",
     "error UNSUPPORTED: deterministic reads need mode distributed_epoch without num_consumers, "
     "not distributed_epoch with num_consumers"},
    {"job named deterministic joined without",
     "ds - r4\njob 1 name=n mode=distributed_epoch "
     "total=2 det",
     "job 1 name=n mode=distributed_epoch",
     "error EXISTS: job 'n' exists with deterministic true, not false"},
    {"job named joined deterministic", "ds - r4\njob 1 name=n mode=distributed_epoch total=2",
     "job 1 name=n mode=distributed_epoch det",
     "error EXISTS: job 'n' exists with deterministic false, not true"},
    {"job named deterministic is shared",
     "ds - r4\njob 1 name=n mode=distributed_epoch total=2 "
     "det",
     "job 1 name=n mode=distributed_epoch det",
     "client_acquired id=2 ref=1\n=> job=1 iteration=1 client=2"},
    /* cross-trainer caches: the flag and bound, the refusals, the job's identity */
    {"job with a cross-trainer cache", "ds - r4\nhb a:1 1", "job 1 name=n xtc=1048576",
     "job_created id=1 name='n' name2='1' mode=parallel_epochs xtc=1048576\n"
     "iteration_created id=1 ref=1 dist=0\n"
     "task_created id=1 ref=1 ref2=1\n"
     "client_acquired id=1 ref=1\n"
     "=> job=1 iteration=1 client=1"},
    {"job with a cross-trainer cache is shared", "ds - r4\njob 1 name=n xtc=4096",
     "job 1 name=n xtc=4096", "client_acquired id=2 ref=1\n=> job=1 iteration=1 client=2"},
    {"job with a cross-trainer cache in a static sharding mode", "ds - r4",
     "job 1 name=n mode=data xtc=4096",
     "job_created id=1 name='n' name2='1' mode=data xtc=4096\n"
     "iteration_created id=1 ref=1 dist=0\n"
     "client_acquired id=1 ref=1\n"
     "=> job=1 iteration=1 client=1"},
    {"cross-trainer cache without a job name", "ds - r4", "job 1 xtc=4096",
     "error INVALID: cross_trainer_cache needs a job name: the trainers share one job"},
    {"cross-trainer cache in distributed_epoch", "ds - r4",
     "job 1 name=n mode=distributed_epoch total=inf xtc=4096",
     "error UNSUPPORTED: cross_trainer_cache cannot be used with mode distributed_epoch: its "
     "splits are handed out once, not shared between trainers"},
    {"cross-trainer cache coordinated", "ds - r4", "job 1 name=n consumers=2 xtc=4096",
     "error UNSUPPORTED: cross_trainer_cache cannot be combined with num_consumers"},
    {"cross-trainer cache over the limit", "ds - r4", "job 1 name=n xtc=68719476737",
     "error LIMIT: cross_trainer_cache_bytes 68719476737 is over the limit of 68719476736"},
    {"cross-trainer cache over a pipeline that ends", "ds - r4", "job 1 name=n xtc=4096 ends",
     "error UNSUPPORTED: cross_trainer_cache needs an infinite pipeline: 'r4' ends; add repeat()"},
    {"job with a cross-trainer cache joined without", "ds - r4\njob 1 name=n xtc=4096",
     "job 1 name=n", "error EXISTS: job 'n' exists with cross_trainer_cache on, not off"},
    {"job without a cross-trainer cache joined with", "ds - r4\njob 1 name=n",
     "job 1 name=n xtc=4096", "error EXISTS: job 'n' exists with cross_trainer_cache off, not on"},
    {"job with a cross-trainer cache joined with another bound", "ds - r4\njob 1 name=n xtc=4096",
     "job 1 name=n xtc=8192",
     "error EXISTS: job 'n' exists with cross_trainer_cache_bytes 4096, not 8192"},
    {"redo returns leased splits to the pool", DET2 "splits 1 2\nsplits 2 2", "redo 1 3,0,9,3",
     "splits_returned ref=1 ref2=1 seqs=[0]\nsplits_returned ref=1 ref2=2 seqs=[3]\n=>"},
    {"redo of splits in the pool or finished", DET2 "splits 1 2\ndone 1 1\nredo 1 0",
     "redo 1 0,1,2", "=>"},
    {"redo refused for a job that is not deterministic", DIST2, "redo 1 0",
     "error INVALID: iteration 1 is not read deterministically: no split is produced again on "
     "request"},
    {"redo leases the split again first", DET2 "splits 1 2\nsplits 2 1\nredo 1 1", "splits 2 2",
     "splits_leased ref=1 ref2=2 seqs=[1,3]\n=> end=0 seqs=[1,3]"},
    {"splits bounded by the reader's window", DET2, "splits 1 3 below=2",
     "splits_leased ref=1 ref2=1 seqs=[0,1]\n=> end=0 seqs=[0,1]"},
    {"splits bounded: the pool is leased past the bound", DET2 "splits 1 2\nrm 1",
     "splits 2 3 below=1", "splits_leased ref=1 ref2=2 seqs=[0,1]\n=> end=0 seqs=[0,1]"},
    {"splits bounded below the cursor lease nothing", DET2 "splits 1 3", "splits 2 3 below=2",
     "=> end=0"},
    {"finished below: the lowest split not finished", DET2 "splits 1 2\nsplits 2 2\ndone 1 0,2",
     "below 1", "=> below=1"},
    {"finished below: the pool counts", DET2 "splits 1 2\ndone 1 0,1\nsplits 2 1\nredo 1 2",
     "below 1", "=> below=2"},
    {"splits from the cursor", DIST2, "splits 1 3",
     "splits_leased ref=1 ref2=1 seqs=[0,1,2]\n=> end=0 seqs=[0,1,2]"},
    {"splits capped by the total", DIST2 "splits 1 3", "splits 2 3",
     "splits_leased ref=1 ref2=2 seqs=[3]\n=> end=0 seqs=[3]"},
    {"splits pool first then cursor", DIST2 "splits 1 2\nrm 1", "splits 2 3",
     "splits_leased ref=1 ref2=2 seqs=[0,1,2]\n=> end=0 seqs=[0,1,2]"},
    {"splits finished are filtered sorted and unique", DIST2 "splits 1 2\nsplits 2 1",
     "splits 1 0 fin=1,2,1,7,0", "splits_finished ref=1 ref2=1 seqs=[0,1]\n=> end=0"},
    {"splits none left while another task holds leases", DIST2 "splits 1 4", "splits 2 2",
     "=> end=0"},
    {"splits end once everything is finished", DIST2 "splits 1 4", "splits 1 2 fin=3,2,1,0",
     "splits_finished ref=1 ref2=1 seqs=[0,1,2,3]\n=> end=1"},
    {"splits end for an empty source", "ds - r4\nhb a:1 1\njob 1 mode=distributed_epoch total=0",
     "splits 1 5", "=> end=1"},
    {"splits of a finished task", DIST2 "splits 1 4\nsplits 1 0 fin=0,1,2,3\nhb a:1 1 fin=1",
     "splits 1 1", "=> end=1"},
    {"splits of an endless source", "ds - r4\nhb a:1 1\njob 1 mode=distributed_epoch total=inf",
     "splits 1 3", "splits_leased ref=1 ref2=1 seqs=[0,1,2]\n=> end=0 seqs=[0,1,2]"},
    {"splits unknown task", DIST2, "splits 9 1", "error NOT_FOUND: task 9 not found"},
    {"splits of a parallel task", PAR2, "splits 1 1",
     "error INVALID: task 1 is not in a distributed_epoch iteration"},
    {"splits retried report already finished by the task is a no-op",
     DIST2 "splits 1 2\nsplits 1 0 fin=0,1", "splits 1 1 fin=0,1",
     "splits_leased ref=1 ref2=1 seqs=[2]\n=> end=0 seqs=[2]"},

    /* get_splits: numbered requests */
    {"splits numbered request is recorded with its lease", DIST2, "splits 1 2 req=1",
     "splits_leased id=1 ref=1 ref2=1 seqs=[0,1]\n=> end=0 seqs=[0,1]"},
    {"splits repeated request gets the same lease", DIST2 "splits 1 2 req=1", "splits 1 3 req=1",
     "=> end=0 seqs=[0,1]"},
    {"splits repeated request with its finished list",
     DIST2 "splits 1 2 req=1\nsplits 1 2 fin=0 req=2", "splits 1 2 fin=0 req=2",
     "=> end=0 seqs=[2,3]"},
    {"splits repeated request finishing more leaves those out", DIST2 "splits 1 3 req=1",
     "splits 1 3 fin=1 req=1", "splits_finished ref=1 ref2=1 seqs=[1]\n=> end=0 seqs=[0,2]"},
    {"splits repeated request leaves out what finished since",
     DIST2 "splits 1 3 req=1\nsplits 1 0 fin=1 req=2", "splits 1 3 req=1", "=> end=0 seqs=[0,2]"},
    {"splits repeated request with all of its lease finished",
     DIST2 "splits 1 4 req=1\nsplits 1 0 fin=0,1,2,3 req=2", "splits 1 4 req=1", "=> end=1"},
    {"splits repeated request of a finished task", DIST2 "splits 1 2 req=1\nhb a:1 1 fin=1",
     "splits 1 2 req=1", "=> end=1"},
    {"splits repeated request is answered after a lease to another task",
     DIST2 "splits 1 1 req=1\nsplits 2 1 req=1", "splits 1 1 req=1", "=> end=0 seqs=[0]"},
    {"splits newer request is a new lease", DIST2 "splits 1 1 req=1", "splits 1 1 req=5",
     "splits_leased id=5 ref=1 ref2=1 seqs=[1]\n=> end=0 seqs=[1]"},
    {"splits newer request with nothing to lease records nothing", DIST2 "splits 1 4 req=1",
     "splits 1 4 req=2", "=> end=0"},
    {"splits stale request", DIST2 "splits 1 1 req=1\nsplits 1 1 req=2", "splits 1 1 fin=0 req=1",
     "error INVALID: task 1: stale request 1 (request 2 was answered)"},
    {"splits unnumbered request keeps the record", DIST2 "splits 1 1 req=3\nsplits 1 1",
     "splits 1 1 req=3", "=> end=0 seqs=[0]"},
    {"splits request number out of range", DIST2, "splits 1 1 req=18446744073709551615",
     "error INVALID: task 1: request number 18446744073709551615 is out of range"},

    /* coordinated rounds */
    {"rounds start at round 0 on the tasks of a new iteration", "ds - r4\nhb a:1 1\nhb b:1 1",
     "job 1 name=c consumers=2",
     "job_created id=1 name='c' name2='1' mode=parallel_epochs consumers=2\n"
     "iteration_created id=1 ref=1 dist=0\n"
     "task_created id=1 ref=1 ref2=1\n"
     "task_created id=2 ref=1 ref2=2\n"
     "rounds_scheduled ref=1 seqs=[1,2]\n"
     "client_acquired id=1 ref=1\n"
     "=> job=1 iteration=1 client=1"},
    {"rounds the first heartbeat is granted a window",
     "ds - r4\nhb a:1 1\njob 1 name=c consumers=1", "chb 1 window=64",
     "rounds_granted ref=1 ref2=64\n=> granted=64"},
    {"rounds no grant while half the window is left", COORD2, "chb 2 round=32 window=64",
     "=> granted=64"},
    {"rounds granted again once fewer than half are left", COORD2, "chb 2 round=33 window=64",
     "rounds_granted ref=1 ref2=97\n=> granted=97"},
    {"rounds a consumer that reports the grant reached gets more", COORD2,
     "chb 1 round=64 window=100", "rounds_granted ref=1 ref2=164\n=> granted=164"},
    {"rounds window 0 grants nothing", COORD2, "chb 1 round=60", "=> granted=64"},
    {"rounds none granted to a read that is not coordinated", PAR2, "chb 1 round=5 window=64",
     "=>"},
    {"rounds a new worker's task takes part from the first round not granted", COORD2, "hb c:1 1",
     "worker_registered id=3 address='c:1' inc=1\n"
     "task_created id=3 ref=1 ref2=3\n"
     "rounds_scheduled ref=1 ref2=64 seqs=[1,2,3]\n"
     "=> worker=3"},
    {"rounds a draining worker's task stops after the rounds granted", COORD2, "hb a:1 1 drain",
     "worker_draining id=1\nrounds_scheduled ref=1 ref2=64 seqs=[2]\n=> worker=1"},
    {"rounds a removed worker's task stops", COORD2, "rm 2",
     "task_removed id=2 ref=1\nworker_removed id=2\nrounds_scheduled ref=1 ref2=64 seqs=[1]\n=>"},
    {"rounds a restarted worker's new task replaces the old one at one round", COORD2, "hb b:1 2",
     "task_removed id=2 ref=1\n"
     "worker_removed id=2\n"
     "worker_registered id=3 address='b:1' inc=2\n"
     "task_created id=3 ref=1 ref2=3\n"
     "rounds_scheduled ref=1 ref2=64 seqs=[1,3]\n"
     "=> worker=3"},
    {"rounds a finished task stops", COORD2, "hb a:1 1 fin=1",
     "task_finished id=1\nrounds_scheduled ref=1 ref2=64 seqs=[2]\n=> worker=1"},
    {"rounds the last task gone leaves rounds served by none",
     "ds - r4\nhb a:1 1\njob 1 name=c consumers=1\nchb 1 window=64", "rm 1",
     "task_removed id=1 ref=1\nworker_removed id=1\nrounds_scheduled ref=1 ref2=64\n=>"},
    {"rounds a worker joining before any grant changes round 0",
     "ds - r4\nhb a:1 1\njob 1 name=c consumers=1", "hb b:1 1",
     "worker_registered id=2 address='b:1' inc=1\n"
     "task_created id=2 ref=1 ref2=2\n"
     "rounds_scheduled ref=1 seqs=[1,2]\n"
     "=> worker=2"},
    {"rounds a heartbeat changing nothing schedules nothing", COORD2, "hb a:1 1", "=> worker=1"},
    {"rounds a collected coordinated iteration schedules nothing", COORD2 "rel 1\nrel 2\ngc 1",
     "hb c:1 1", "worker_registered id=3 address='c:1' inc=1\n=> worker=3"},

    /* clients */
    {"client heartbeat", PAR2, "chb 1", "=>"},
    {"client heartbeat unknown", PAR2, "chb 7", "error NOT_FOUND: client 7 not found"},
    {"client release", PAR2, "rel 1", "client_released id=1\n=>"},
    {"client release unknown", PAR2, "rel 7", "error NOT_FOUND: client 7 not found"},

    /* gc_iteration */
    {"gc with clients", PAR2, "gc 1", "error INVALID: iteration 1 has 1 clients"},
    {"gc unknown", PAR2, "gc 3", "error NOT_FOUND: iteration 3 not found"},
    {"gc removes tasks and leases", DIST2 "splits 1 2\nrel 1", "gc 1",
     "task_removed id=1 ref=1\ntask_removed id=2 ref=1\niteration_gc id=1\n=>"},
    {"gc twice", "ds - r4\njob 1 name=n\nrel 1\ngc 1", "gc 1",
     "error INVALID: iteration 1 is already garbage-collected"},
    {"gc of a failed iteration", PAR2 "failed 1 1 msg=x\nrel 1", "gc 1",
     "task_removed id=1 ref=1\ntask_removed id=2 ref=1\niteration_gc id=1\n=>"},
    {"a failed named job collected starts a clean repetition",
     "ds - r4\nhb a:1 1\njob 1 name=n\nfailed 1 1 msg=x\nrel 1\ngc 1", "job 1 name=n",
     "iteration_created id=2 ref=1 ref2=1 dist=0\n"
     "task_created id=2 ref=2 ref2=1\n"
     "client_acquired id=2 ref=2\n"
     "=> job=1 iteration=2 client=2"},
};

/* Runs each case on a fresh harness: the setup, then the command, whose output must be exactly
 * the expected text; a refusal leaves the state as it was. */
static void run_plan_cases(const struct plan_case *cases, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        const struct plan_case *c = &cases[i];
        struct harness h;
        harness_init(&h);
        run_script(&h, c->setup);
        uint64_t before = state_digest(&h.s);
        const char *got = run(&h, c->cmd);
        if (strcmp(got, c->expect) != 0)
            fail_msg("case '%s':\n-- expected --\n%s\n-- got --\n%s", c->name, c->expect, got);
        if (strncmp(got, "error", 5) == 0)
            assert_int_equal(state_digest(&h.s), before);
        harness_release(&h);
    }
}

/* A repeating reader of a named job asks for its next repetition: joined when it is there,
 * the previous one collected once nobody holds it, a wait while readers still do, and a clear
 * refusal once the job has moved past it. */
static const struct plan_case repetition_cases[] = {
    {"the current repetition is joined", "ds - r4\nhb a:1 1\njob 1 name=n", "rep 1 n 0", "=>"},
    {"anonymous jobs have no repetitions", "ds - r4\nhb a:1 1\njob 1", "rep 1 '' 1", "=>"},
    {"still read", "ds - r4\nhb a:1 1\njob 1 name=n\njob 1 name=n", "rep 1 n 1",
     "error UNAVAILABLE: job 'n': repetition 0 is still being read by 2 readers; repetition 1 "
     "starts once they finish"},
    {"nobody holds it: collected", "ds - r4\nhb a:1 1\njob 1 name=n\nrel 1", "rep 1 n 1",
     "task_removed id=1 ref=1\niteration_gc id=1\n=>"},
    {"already collected", "ds - r4\nhb a:1 1\njob 1 name=n\nrel 1\ngc 1", "rep 1 n 1", "=>"},
    {"the next one is there", "ds - r4\nhb a:1 1\njob 1 name=n\nrel 1\ngc 1\njob 1 name=n",
     "rep 1 n 1", "=>"},
    {"moved past it",
     "ds - r4\nhb a:1 1\njob 1 name=n\nrel 1\ngc 1\njob 1 name=n\nrel 2\ngc 2\njob 1 name=n",
     "rep 1 n 1",
     "error INVALID: job 'n': repetition 1 was read without this reader; the job is at "
     "repetition 2"},
    {"collected past it", "ds - r4\nhb a:1 1\njob 1 name=n\nrel 1\ngc 1\njob 1 name=n\nrel 2\ngc 2",
     "rep 1 n 1",
     "error INVALID: job 'n': repetition 1 was read without this reader; the job is at "
     "repetition 1 (collected)"},
    {"not there yet", "ds - r4\nhb a:1 1\njob 1 name=n", "rep 1 n 2",
     "error INVALID: job 'n': no repetition 2 to read next; the job is at repetition 0"},
    {"no such job", "ds - r4", "rep 1 n 1",
     "error NOT_FOUND: job 'n' of dataset '1' not found (asked for its repetition 1)"},
};

static void test_plan_repetition(void **unused)
{
    (void)unused;
    run_plan_cases(repetition_cases, sizeof repetition_cases / sizeof *repetition_cases);
    /* After the collection the read creates the next repetition of the same job. */
    struct harness h;
    harness_init(&h);
    run_script(&h, "ds - r4\nhb a:1 1\njob 1 name=n\nrel 1\nrep 1 n 1");
    assert_string_equal(run(&h, "job 1 name=n"), "iteration_created id=2 ref=1 ref2=1 dist=0\n"
                                                 "task_created id=2 ref=2 ref2=1\n"
                                                 "client_acquired id=2 ref=2\n"
                                                 "=> job=1 iteration=2 client=2");
    harness_release(&h);
}

/* A read restored from a checkpoint: a new iteration starts past the splits its reader had
 * whole, with the gaps below them (the splits that were in flight) in its pool; a checkpoint of
 * another split plan, or bounds that do not describe splits of the plan, are refused. */
static const struct plan_case resume_cases[] = {
    {"starts past the finished splits", "ds d r10",
     "job d mode=distributed_epoch total=10 resume=0-3,5-7",
     "job_created id=1 name2='d' mode=distributed_epoch\n"
     "iteration_created id=1 ref=1 dist=1 start=7 plan=(len=10,size=1,per_pass=10,passes=1) "
     "seqs=[3,4]\n"
     "client_acquired id=1 ref=1\n"
     "=> job=1 iteration=1 client=1"},
    {"all finished", "ds d r10", "job d mode=distributed_epoch total=10 resume=0-10",
     "job_created id=1 name2='d' mode=distributed_epoch\n"
     "iteration_created id=1 ref=1 dist=1 start=10 plan=(len=10,size=1,per_pass=10,passes=1)\n"
     "client_acquired id=1 ref=1\n"
     "=> job=1 iteration=1 client=1"},
    {"nothing finished", "ds d r10", "job d mode=distributed_epoch total=10 resume=",
     "job_created id=1 name2='d' mode=distributed_epoch\n"
     "iteration_created id=1 ref=1 dist=1 plan=(len=10,size=1,per_pass=10,passes=1)\n"
     "client_acquired id=1 ref=1\n"
     "=> job=1 iteration=1 client=1"},
    {"another plan", "ds d r10", "job d mode=distributed_epoch total=10 resume=0-3 fpbad",
     "error INVALID: the checkpoint does not fit dataset 'd': its split plan changed since the "
     "checkpoint was taken (now 10 splits; its files, split size or pipeline differ)"},
    {"past the end", "ds d r10", "job d mode=distributed_epoch total=10 resume=0-11",
     "error INVALID: checkpoint: its finished splits are not sorted ranges within the 10 splits of "
     "the plan"},
    {"overlapping", "ds d r10", "job d mode=distributed_epoch total=10 resume=0-4,3-6",
     "error INVALID: checkpoint: its finished splits are not sorted ranges within the 10 splits of "
     "the plan"},
    {"an odd bound", "ds d r10", "job d mode=distributed_epoch total=10 resume=0-4,6",
     "error INVALID: checkpoint: an odd number of split bounds"},
    {"not distributed", "ds d r10", "job d total=10 resume=0-4",
     "error UNSUPPORTED: a checkpoint restores distributed_epoch reads only, not parallel_epochs"},
};

/* Saves (docs/snapshots.md): an anonymous distributed_epoch job whose iteration has a task on
 * every worker although nobody reads it, whose tasks report their splits finished once the
 * chunks are committed, that is not collected while it runs; the same dataset and path is the
 * same save; the refusals. */
#define SAVE2 "ds - r4\nhb a:1 1\nhb b:1 1\nsave 1 /snap/x total=3\n"
static const struct plan_case save_cases[] = {
    {"starts a job, an iteration and a task per worker", "ds - r4\nhb a:1 1\nhb b:1 1",
     "save 1 /snap/x total=3",
     "job_created id=1 name2='1' mode=distributed_epoch\n"
     "iteration_created id=1 ref=1 dist=1 plan=(len=3,size=1,per_pass=3,passes=1)\n"
     "task_created id=1 ref=1 ref2=1\n"
     "task_created id=2 ref=1 ref2=2\n"
     "save_started id=1 ref=1 ref2=1 name='1' text='/snap/x'\n"
     "=> save=1"},
    {"no task on a draining worker", "ds - r4\nhb a:1 1\nhb b:1 1 drain", "save 1 /s total=1",
     "job_created id=1 name2='1' mode=distributed_epoch\n"
     "iteration_created id=1 ref=1 dist=1 plan=(len=1,size=1,per_pass=1,passes=1)\n"
     "task_created id=1 ref=1 ref2=1\n"
     "save_started id=1 ref=1 ref2=1 name='1' text='/s'\n"
     "=> save=1"},
    {"the same dataset and path is the same save", SAVE2, "save 1 /snap/x", "=> save=1"},
    {"the same save once it finished", SAVE2 "saved 1", "save 1 /snap/x", "=> save=1"},
    {"a second path is a second save", SAVE2, "save 1 /snap/y total=1",
     "job_created id=2 name2='1' mode=distributed_epoch\n"
     "iteration_created id=2 ref=2 dist=1 plan=(len=1,size=1,per_pass=1,passes=1)\n"
     "task_created id=3 ref=2 ref2=1\n"
     "task_created id=4 ref=2 ref2=2\n"
     "save_started id=2 ref=2 ref2=2 name='1' text='/snap/y'\n"
     "=> save=2"},
    {"another dataset at the path", SAVE2 "ds other r5", "save other /snap/x total=5",
     "error EXISTS: snapshot path '/snap/x' holds a save of dataset '1', not 'other'"},
    {"unknown dataset", "", "save nope /snap/x total=1",
     "error NOT_FOUND: dataset 'nope' not found"},
    {"relative path", "ds - r4", "save 1 snap/x total=4",
     "error INVALID: snapshot path 'snap/x' is not absolute (dispatcher, workers and readers must "
     "see it at the same absolute path)"},
    {"empty path", "ds - r4", "save 1 '' total=4", "error INVALID: snapshot path is empty"},
    {"path with a control character", "ds - r4", "save 1 /a\x01 total=4",
     "error INVALID: snapshot path: control character at byte 2"},
    {"endless pipeline", "ds - r4", "save 1 /s total=inf endless",
     "error UNSUPPORTED: cannot save dataset '1': its pipeline 'r4' never ends"},
    {"endless splits", "ds - r4", "save 1 /s total=inf",
     "error UNSUPPORTED: cannot save dataset '1': its splits never end"},
    {"no plan", "ds - r4", "save 1 /s", "error INVALID: a save needs a split plan"},
    {"a new worker gets a task though nobody reads", SAVE2, "hb c:1 1",
     "worker_registered id=3 address='c:1' inc=1\n"
     "task_created id=3 ref=1 ref2=3\n"
     "=> worker=3"},
    {"no task once the save is over", SAVE2 "savefail 1 msg=x", "hb c:1 1",
     "worker_registered id=3 address='c:1' inc=1\n=> worker=3"},
    {"not collected while it runs", SAVE2, "gc 1", "error INVALID: iteration 1 runs save 1"},
    {"the task's report finishes its splits", SAVE2 "splits 1 2", "splits 1 2 fin=0,1",
     "splits_finished ref=1 ref2=1 seqs=[0,1]\n"
     "splits_leased ref=1 ref2=1 seqs=[2]\n"
     "=> end=0 seqs=[2]"},
    {"committed chunks are the finished splits", SAVE2 "splits 1 2\nsplits 1 0 fin=1",
     "committed 1", "=> committed=1 of 3 running"},
    {"the iteration finishes with the last chunk",
     SAVE2 "splits 1 3\nsplits 1 0 fin=0,1,2\nhb a:1 1 fin=1", "hb b:1 1 fin=2",
     "task_finished id=2\niteration_finished id=1\n=> worker=2"},
    {"finished", SAVE2, "saved 1", "save_finished id=1\n=>"},
    {"finished counts every chunk", SAVE2 "saved 1", "committed 1", "=> committed=3 of 3 finished"},
    {"failed", SAVE2, "savefail 1 msg=chunk_2:_damaged",
     "save_failed id=1 text='chunk 2: damaged'\n=>"},
    {"failed with bad bytes escaped", SAVE2, "savefail 1 msg=a\x02",
     "save_failed id=1 text='a\\x02'\n=>"},
    {"over only once", SAVE2 "saved 1", "savefail 1 msg=x", "=>"},
    {"a failed save is started again", SAVE2 "savefail 1 msg=x", "save 1 /snap/x total=3",
     "job_created id=2 name2='1' mode=distributed_epoch\n"
     "iteration_created id=2 ref=2 dist=1 plan=(len=3,size=1,per_pass=3,passes=1)\n"
     "task_created id=3 ref=2 ref2=1\n"
     "task_created id=4 ref=2 ref2=2\n"
     "save_started id=2 ref=2 ref2=2 name='1' text='/snap/x'\n"
     "=> save=2"},
    {"started again, it is the path's save", SAVE2 "savefail 1 msg=x\nsave 1 /snap/x total=3",
     "save 1 /snap/x", "=> save=2"},
    {"another dataset at a failed save's path", SAVE2 "savefail 1 msg=x\nds other r5",
     "save other /snap/x total=5",
     "error EXISTS: snapshot path '/snap/x' holds a save of dataset '1', not 'other'"},
    {"collected once over", SAVE2 "saved 1", "gc 1",
     "task_removed id=1 ref=1\ntask_removed id=2 ref=1\niteration_gc id=1\n=>"},
    {"unknown save", "", "saved 9", "error NOT_FOUND: save 9 not found"},
};

static void test_save_cases(void **unused)
{
    (void)unused;
    run_plan_cases(save_cases, sizeof save_cases / sizeof save_cases[0]);
}

static void test_resume_cases(void **unused)
{
    (void)unused;
    run_plan_cases(resume_cases, sizeof resume_cases / sizeof resume_cases[0]);
}

static void test_plan_cases(void **unused)
{
    (void)unused;
    run_plan_cases(plan_cases, sizeof plan_cases / sizeof plan_cases[0]);
}

static size_t replay_through_records(const struct harness *h);

/* A worker's secret: registered with its first heartbeat, required on every later one (draining
 * too) of the same incarnation; a new incarnation may take over the address only when the shell
 * says the holder stopped heartbeating; a worker journaled without a secret is not checked. */
static const struct plan_case key_cases[] = {
    {"registers with its secret", "", "hb a:1 7 key=s",
     "worker_registered id=1 address='a:1' inc=7 key=ssssssssssssssss\n=> worker=1"},
    {"the same secret again", "hb a:1 7 key=s", "hb a:1 7 key=s", "=> worker=1"},
    {"a wrong secret, same incarnation", "hb a:1 7 key=s", "hb a:1 7 key=x",
     "error DENIED: worker at a:1: the worker key does not match its registration"},
    {"a forged drain", "hb a:1 7 key=s", "hb a:1 7 key=x drain",
     "error DENIED: worker at a:1: the worker key does not match its registration"},
    {"no secret, same incarnation", "hb a:1 7 key=s", "hb a:1 7 key=",
     "error DENIED: worker at a:1: the worker key does not match its registration"},
    {"a short secret, same incarnation", "hb a:1 7 key=s", "hb a:1 7 key=sss",
     "error DENIED: worker at a:1: the worker key does not match its registration"},
    {"registering without a secret", "", "hb a:1 7 key=",
     "error DENIED: worker at a:1: a worker key of 16 bytes is required to register"},
    {"registering with a short secret", "", "hb a:1 7 key=abc",
     "error DENIED: worker at a:1: a worker key of 16 bytes is required to register"},
    {"a new incarnation while the holder heartbeats", "hb a:1 7 key=s", "hb a:1 8 key=t stays",
     "error DENIED: address a:1 is held by worker 1, which is still heartbeating"},
    {"a new incarnation once the holder went silent", "hb a:1 7 key=s", "hb a:1 8 key=t",
     "worker_removed id=1\nworker_registered id=2 address='a:1' inc=8 key=tttttttttttttttt\n"
     "=> worker=2"},
    {"a journal without secrets: not checked", "hb a:1 7", "hb a:1 7 key=x drain",
     "worker_draining id=1\n=> worker=1"},
};

/* Local workers (docs/reading.md "Local workers"): a local job's tasks go only to workers on its
 * readers' hosts. Workers 1 (a:1) and 2 (b:1) on host ha, 3 (c:1) on hb. */
#define HOSTS3 "ds - r4\nhb a:1 1 host=ha\nhb b:1 1 host=ha\nhb c:1 1 host=hb\n"
static const struct plan_case local_cases[] = {
    {"a worker records its host", "", "hb a:1 7 host=h1",
     "worker_registered id=1 address='a:1' inc=7 host='h1' key=ssssssssssssssss\n=> worker=1"},
    {"a known worker's host stays", "hb a:1 7 host=h1", "hb a:1 7 host=h2", "=> worker=1"},
    {"a worker host id with a space", "", "hb a:1 7 host=h\x01",
     "error INVALID: worker host id: byte 1 is not printable ASCII without spaces"},
    {"local: tasks only on the reader's host", HOSTS3, "job 1 target=local host=ha",
     "job_created id=1 name2='1' mode=parallel_epochs target=local\n"
     "iteration_created id=1 ref=1 dist=0\n"
     "task_created id=1 ref=1 ref2=1\n"
     "task_created id=2 ref=1 ref2=2\n"
     "client_acquired id=1 ref=1 host='ha'\n"
     "=> job=1 iteration=1 client=1"},
    {"local distributed: tasks only on the reader's host", HOSTS3,
     "job 1 mode=distributed_epoch total=4 target=local host=hb",
     "job_created id=1 name2='1' mode=distributed_epoch target=local\n"
     "iteration_created id=1 ref=1 dist=1 plan=(len=4,size=1,per_pass=4,passes=1)\n"
     "task_created id=1 ref=1 ref2=3\n"
     "client_acquired id=1 ref=1 host='hb'\n"
     "=> job=1 iteration=1 client=1"},
    {"auto: tasks everywhere", HOSTS3, "job 1 target=auto host=hb",
     "job_created id=1 name2='1' mode=parallel_epochs target=auto\n"
     "iteration_created id=1 ref=1 dist=0\n"
     "task_created id=1 ref=1 ref2=1\n"
     "task_created id=2 ref=1 ref2=2\n"
     "task_created id=3 ref=1 ref2=3\n"
     "client_acquired id=1 ref=1 host='hb'\n"
     "=> job=1 iteration=1 client=1"},
    {"any records the reader's host", HOSTS3, "job 1 host=hb",
     "job_created id=1 name2='1' mode=parallel_epochs\n"
     "iteration_created id=1 ref=1 dist=0\n"
     "task_created id=1 ref=1 ref2=1\n"
     "task_created id=2 ref=1 ref2=2\n"
     "task_created id=3 ref=1 ref2=3\n"
     "client_acquired id=1 ref=1 host='hb'\n"
     "=> job=1 iteration=1 client=1"},
    {"local with no worker on the host", HOSTS3, "job 1 target=local host=hc",
     "error NOT_FOUND: no local worker: target_workers local needs a worker on this host (host id "
     "hc), and none is registered"},
    {"local with only a draining worker on the host", HOSTS3 "hb c:1 1 host=hb drain",
     "job 1 target=local host=hb",
     "error NOT_FOUND: no local worker: target_workers local needs a worker on this host (host id "
     "hb), and none is registered"},
    {"local with workers of unknown hosts", "ds - r4\nhb a:1 1", "job 1 target=local host=ha",
     "error NOT_FOUND: no local worker: target_workers local needs a worker on this host (host id "
     "ha), and none is registered"},
    {"local without a host", HOSTS3, "job 1 target=local",
     "error INVALID: target_workers local needs the reader's host id"},
    {"a reader's host id with a control character", HOSTS3, "job 1 host=h\x7f",
     "error INVALID: host id: byte 1 is not printable ASCII without spaces"},
    {"unknown target", HOSTS3, "job 1 target=7 host=ha", "error INVALID: unknown target_workers 7"},
    {"local with num_consumers", HOSTS3 "ds e r(inf)",
     "job e name=c consumers=2 target=local host=ha",
     "error UNSUPPORTED: target_workers local cannot be combined with num_consumers: coordinated "
     "reads need every worker"},
    {"auto with num_consumers", HOSTS3 "ds e r(inf)",
     "job e name=c consumers=2 target=auto host=ha",
     "error UNSUPPORTED: target_workers auto cannot be combined with num_consumers: coordinated "
     "reads need every worker"},
    {"local with static sharding", HOSTS3, "job 1 mode=file target=local host=ha",
     "error UNSUPPORTED: target_workers local cannot be used with mode file: its shards are on the "
     "--worker-addresses workers, wherever they run"},
    {"a named job joined with another target", HOSTS3 "job 1 name=j target=local host=ha",
     "job 1 name=j host=ha", "error EXISTS: job 'j' exists with target_workers local, not any"},
    {"a named job joined with auto", HOSTS3 "job 1 name=j host=ha",
     "job 1 name=j target=auto host=ha",
     "error EXISTS: job 'j' exists with target_workers any, not auto"},
    {"a reader from another host brings tasks to its workers",
     HOSTS3 "job 1 name=j mode=distributed_epoch total=4 target=local host=ha",
     "job 1 name=j mode=distributed_epoch total=4 target=local host=hb",
     "task_created id=3 ref=1 ref2=3\n"
     "client_acquired id=2 ref=1 host='hb'\n"
     "=> job=1 iteration=1 client=2"},
    {"a reader from the same host brings nothing new", HOSTS3 "job 1 name=j target=local host=ha",
     "job 1 name=j target=local host=ha",
     "client_acquired id=2 ref=1 host='ha'\n=> job=1 iteration=1 client=2"},
    {"a worker registering on the reader's host gets the task", HOSTS3 "job 1 target=local host=hb",
     "hb d:1 1 host=hb",
     "worker_registered id=4 address='d:1' inc=1 host='hb' key=ssssssssssssssss\n"
     "task_created id=2 ref=1 ref2=4\n"
     "=> worker=4"},
    {"a worker registering on another host gets none", HOSTS3 "job 1 target=local host=hb",
     "hb d:1 1 host=ha",
     "worker_registered id=4 address='d:1' inc=1 host='ha' key=ssssssssssssssss\n"
     "=> worker=4"},
    {"a worker of an unknown host gets no local task", HOSTS3 "job 1 target=local host=hb",
     "hb d:1 1", "worker_registered id=4 address='d:1' inc=1\n=> worker=4"},
    {"a worker gets an auto job's task wherever it runs", HOSTS3 "job 1 target=auto host=hb",
     "hb d:1 1 host=hz",
     "worker_registered id=4 address='d:1' inc=1 host='hz' key=ssssssssssssssss\n"
     "task_created id=4 ref=1 ref2=4\n"
     "=> worker=4"},
    {"the last reader of a host leaving takes the host's tasks",
     HOSTS3 "job 1 name=j mode=distributed_epoch total=4 target=local host=ha\n"
            "job 1 name=j mode=distributed_epoch total=4 target=local host=hb\nsplits 3 2",
     "rel 2",
     "client_released id=2\n"
     "splits_returned ref=1 ref2=3 seqs=[0,1]\n"
     "task_removed id=3 ref=1\n"
     "=>"},
    {"a host keeps its tasks while one of its readers remains",
     HOSTS3 "job 1 name=j target=local host=ha\njob 1 name=j target=local host=ha", "rel 1",
     "client_released id=1\n=>"},
    {"a reader of an any job leaving takes nothing", HOSTS3 "job 1 name=j host=ha", "rel 1",
     "client_released id=1\n=>"},
    {"the rest finishes once the leaving host's unfinished task goes",
     HOSTS3 "job 1 name=j target=local host=ha\njob 1 name=j target=local host=hb\n"
            "hb a:1 1 host=ha fin=1\nhb b:1 1 host=ha fin=2",
     "rel 2", "client_released id=2\ntask_removed id=3 ref=1\niteration_finished id=1\n=>"},
    {"a collected local job's name is free for another target",
     HOSTS3 "job 1 name=j target=local host=ha\nrel 1\ngc 1", "job 1 name=j host=ha",
     "job_created id=2 name='j' name2='1' mode=parallel_epochs\n"
     "iteration_created id=2 ref=2 dist=0\n"
     "task_created id=3 ref=2 ref2=1\n"
     "task_created id=4 ref=2 ref2=2\n"
     "task_created id=5 ref=2 ref2=3\n"
     "client_acquired id=2 ref=2 host='ha'\n"
     "=> job=2 iteration=2 client=2"},
};

static void test_local_workers(void **unused)
{
    (void)unused;
    run_plan_cases(local_cases, sizeof local_cases / sizeof local_cases[0]);
    /* Hosts and targets survive the journal's encoding, replay and snapshots, and are part of
     * the digest. */
    struct harness h;
    harness_init(&h);
    run_script(&h, HOSTS3 "job 1 name=j mode=distributed_epoch total=4 target=local host=ha\n"
                          "job 1 name=j mode=distributed_epoch total=4 target=local host=hb\n"
                          "job 1 target=auto host=hb\nhb d:1 1 host=hb\nsplits 1 2\nsplits 3 2");
    replay_through_records(&h);
    const struct st_job *j = state_job(&h.s, 1);
    assert_int_equal(j->target_workers, SLUICE_TARGET_WORKERS_LOCAL);
    assert_string_equal(state_worker(&h.s, 3)->host_id, "hb");
    assert_string_equal(state_client(&h.s, 2)->host_id, "hb");
    uint64_t before = state_digest(&h.s);
    h.s.workers[2].host_id[1] = 'x';
    assert_int_not_equal(state_digest(&h.s), before);
    h.s.workers[2].host_id[1] = 'b';
    h.s.clients[0].host_id[0] = 'x';
    assert_int_not_equal(state_digest(&h.s), before);
    h.s.clients[0].host_id[0] = 'h';
    h.s.jobs[0].target_workers = SLUICE_TARGET_WORKERS_AUTO;
    assert_int_not_equal(state_digest(&h.s), before);
    h.s.jobs[0].target_workers = SLUICE_TARGET_WORKERS_LOCAL;
    assert_int_equal(state_digest(&h.s), before);
    /* Every split of the shared local job goes to a task on a reader's host. */
    size_t n;
    const struct st_task_ref *refs = state_iteration_tasks(&h.s, 1, &n);
    assert_int_equal(n, 4); /* workers 1, 2 (ha), 3 and 4 (hb) */
    for (size_t i = 0; i < n; i++) {
        const struct st_task *t = state_task(&h.s, refs[i].task_id);
        const char *host = state_worker(&h.s, t->worker_id)->host_id;
        assert_true(strcmp(host, "ha") == 0 || strcmp(host, "hb") == 0);
    }
    harness_release(&h);
}

static void test_worker_keys(void **unused)
{
    (void)unused;
    run_plan_cases(key_cases, sizeof key_cases / sizeof key_cases[0]);
    /* Secrets survive the journal's encoding, replay and snapshots, and are part of the digest. */
    struct harness h;
    harness_init(&h);
    run_script(&h, "ds - r4\nhb a:1 7 key=s\nhb b:1 9 key=u\njob 1");
    assert_true(h.s.workers[0].key.set);
    assert_memory_equal(h.s.workers[0].key.b, "ssssssssssssssss", ST_KEY_LEN);
    assert_string_equal(run(&h, "hb a:1 7 key=t"),
                        "error DENIED: worker at a:1: the worker key does not match its "
                        "registration");
    replay_through_records(&h);
    uint64_t before = state_digest(&h.s);
    h.s.workers[1].key.b[3] ^= 1;
    assert_int_not_equal(state_digest(&h.s), before);
    h.s.workers[1].key.b[3] ^= 1;
    harness_release(&h);
}

/* An iteration's secret is drawn by the shell and written into ITERATION_CREATED: the state
 * keeps it, replay and snapshots give it back, and an iteration without one (an older journal)
 * stays without. */
static void test_iteration_keys(void **unused)
{
    (void)unused;
    struct harness h;
    harness_init(&h);
    run_script(&h, "ds - r4\nhb a:1 1");
    struct plan_job_request job = {.dataset_id = "1"};
    struct plan_job_result ids;
    char err[256];
    assert_int_equal(plan_get_or_create_job(&h.s, &job, &ids, &h.ups, err, sizeof err), 0);
    size_t created = 0;
    for (size_t i = 0; i < h.ups.n; i++) {
        if (h.ups.v[i].type != ST_ITERATION_CREATED)
            continue;
        /* Planning draws nothing. */
        assert_false(h.ups.v[i].key.set);
        h.ups.v[i].key.set = true;
        memcpy(h.ups.v[i].key.b, "iteration secret", ST_KEY_LEN);
        created++;
    }
    assert_int_equal(created, 1);
    commit(&h);
    const struct st_iteration *row = state_iteration(&h.s, ids.iteration_id);
    assert_non_null(row);
    assert_true(row->key.set);
    assert_memory_equal(row->key.b, "iteration secret", ST_KEY_LEN);
    assert_true(st_key_matches(&row->key, (const uint8_t *)"iteration secret", ST_KEY_LEN));
    assert_false(st_key_matches(&row->key, (const uint8_t *)"iteration secreT", ST_KEY_LEN));
    assert_false(st_key_matches(&row->key, (const uint8_t *)"iteration secret", ST_KEY_LEN - 1));
    assert_false(st_key_matches(&row->key, NULL, 0));
    /* A second, older-style job: no secret. */
    run_script(&h, "job 1");
    assert_false(h.s.iterations[h.s.niterations - 1].key.set);
    replay_through_records(&h);
    harness_release(&h);
}

/* What collection deletes and keeps. */
/* A coordinated iteration's schedule as state_apply() keeps it: an epoch is replaced while its
 * start has not been granted, refused unless it starts at the grant, and the oldest ones are
 * dropped beyond ST_ROUND_EPOCHS_MAX. */
static void test_round_epochs(void **unused)
{
    (void)unused;
    struct harness h;
    harness_init(&h);
    run_script(&h, "ds - r4\nhb a:1 1\njob 1 name=c consumers=1\nhb b:1 1");
    const struct st_iteration *it = state_iteration(&h.s, 1);
    assert_int_equal(it->nepochs, 1);
    assert_int_equal(it->epochs[0].start, 0);
    assert_int_equal(it->epochs[0].tasks.n, 2);
    assert_int_equal(state_round_epoch(it, 0), 0);
    assert_int_equal(state_round_epoch(it, 1000), 0);

    /* Not at the grant, a task of another iteration, an unknown task, a grant not higher. */
    uint64_t task = 1, other = 99;
    struct st_update u = {.type = ST_ROUNDS_SCHEDULED, .ref = 1, .ref2 = 5};
    u.seqs.v = &task;
    u.seqs.n = 1;
    uint64_t before = state_digest(&h.s);
    assert_int_equal(state_apply(&h.s, &u), SLUICE_ERR_CORRUPT);
    u.ref2 = 0;
    u.seqs.v = &other;
    assert_int_equal(state_apply(&h.s, &u), SLUICE_ERR_CORRUPT);
    struct st_update g = {.type = ST_ROUNDS_GRANTED, .ref = 1, .ref2 = 0};
    assert_int_equal(state_apply(&h.s, &g), SLUICE_ERR_CORRUPT);
    assert_int_equal(state_digest(&h.s), before);

    /* Each grant and worker change adds an epoch at the grant; old ones go beyond the bound. */
    char line[128];
    for (int k = 1; k <= ST_ROUND_EPOCHS_MAX + 3; k++) {
        snprintf(line, sizeof line, "chb 1 round=%d window=10", 10 * k);
        run_script(&h, line);
        snprintf(line, sizeof line, "hb w%d:1 1", k);
        run_script(&h, line);
    }
    it = state_iteration(&h.s, 1);
    assert_int_equal(it->nepochs, ST_ROUND_EPOCHS_MAX);
    assert_int_equal(it->rounds_granted, 10 * (ST_ROUND_EPOCHS_MAX + 3) + 10);
    /* The epoch of the k-th worker starts at the k-th grant, 10 (k + 1); the first 4 are gone. */
    assert_int_equal(it->epochs[0].start, 10 * 5);
    assert_int_equal(it->epochs[ST_ROUND_EPOCHS_MAX - 1].start, it->rounds_granted);
    assert_int_equal(it->epochs[ST_ROUND_EPOCHS_MAX - 1].tasks.n, ST_ROUND_EPOCHS_MAX + 3 + 2);
    assert_int_equal(state_round_epoch(it, 49), -1);
    assert_int_equal(state_round_epoch(it, 50), 0);
    assert_int_equal(state_round_epoch(it, 59), 0);
    assert_int_equal(state_round_epoch(it, 60), 1);
    assert_int_equal(state_round_epoch(it, UINT64_MAX), ST_ROUND_EPOCHS_MAX - 1);
    harness_release(&h);
}

static void test_gc_rows(void **unused)
{
    (void)unused;
    struct harness h;
    harness_init(&h);
    run_script(&h, "ds - r4\nhb a:1 1\njob 1 mode=distributed_epoch total=3\n"
                   "job 1 name=n mode=distributed_epoch total=3\nrel 1\nrel 2\nsplits 2 1");
    run_script(&h, "gc 1\ngc 2");
    /* The anonymous job went with its iteration; the named one keeps its collected iteration. */
    assert_null(state_job(&h.s, 1));
    assert_null(state_iteration(&h.s, 1));
    const struct st_job *j = state_job_by_key(&h.s, "1", "n");
    assert_non_null(j);
    const struct st_iteration *it = state_iteration(&h.s, j->iteration_id);
    assert_non_null(it);
    assert_int_equal(it->state, ST_ITER_GC);
    assert_int_equal(it->pool.n, 0);
    assert_int_equal(it->plan.npaths, 0);
    assert_int_equal(h.s.ntasks, 0);
    /* The next iteration replaces the collected row. */
    run_script(&h, "job 1 name=n mode=distributed_epoch total=3");
    assert_int_equal(h.s.niterations, 1);
    assert_int_equal(h.s.iterations[0].id, 3);
    assert_int_equal(h.s.iterations[0].repetition, 1);
    harness_release(&h);
}

/* ---- apply refusals -------------------------------------------------------------------------- */

struct apply_case {
    const char *name;
    enum st_update_type type;
    uint64_t id, ref, ref2;
    const char *name1, *name2, *address;
    int mode;
    bool distributed;
    uint64_t seqs[4];
    size_t nseqs;
};

/* Each runs on APPLY_SETUP: task 1 holds seqs 0 and 1 from its request 3 (cursor 2 of 4), and
 * worker 3 (draining) has no task. */
#define APPLY_SETUP DIST2 "splits 1 2 req=3\nhb c:1 1 drain"

static const struct apply_case apply_cases[] = {
    {"unknown type", (enum st_update_type)99, 1},
    {"dataset again", ST_DATASET_REGISTERED, 0, 0, 0, "1"},
    {"dataset empty id", ST_DATASET_REGISTERED, 0, 0, 0, ""},
    {"dataset number does not match", ST_DATASET_REGISTERED, 5, 0, 0, "6"},
    {"job id taken", ST_JOB_CREATED, 1, 0, 0, "", "1"},
    {"job zero id", ST_JOB_CREATED, 0, 0, 0, "", "1"},
    {"job unknown dataset", ST_JOB_CREATED, 5, 0, 0, "", "7"},
    {"job bad mode", ST_JOB_CREATED, 5, 0, 0, "", "1", NULL, 9},
    {"iteration for unknown job", ST_ITERATION_CREATED, 5, 9},
    {"iteration while one is live", ST_ITERATION_CREATED, 5, 1, 0, NULL, NULL, NULL, 0, true},
    {"task id taken", ST_TASK_CREATED, 1, 1, 1},
    {"task unknown iteration", ST_TASK_CREATED, 5, 9, 1},
    {"task unknown worker", ST_TASK_CREATED, 5, 1, 9},
    {"task second on a worker", ST_TASK_CREATED, 5, 1, 1},
    {"finish unknown task", ST_TASK_FINISHED, 9},
    {"finish a task holding leases", ST_TASK_FINISHED, 1},
    {"remove unknown task", ST_TASK_REMOVED, 9},
    {"worker address taken", ST_WORKER_REGISTERED, 5, 0, 0, NULL, NULL, "a:1"},
    {"worker empty address", ST_WORKER_REGISTERED, 5, 0, 0, NULL, NULL, ""},
    {"worker removed with tasks", ST_WORKER_REMOVED, 1},
    {"worker removed unknown", ST_WORKER_REMOVED, 9},
    {"drain unknown worker", ST_WORKER_DRAINING, 9},
    {"client unknown iteration", ST_CLIENT_ACQUIRED, 5, 9},
    {"client id taken", ST_CLIENT_ACQUIRED, 1, 1},
    {"release unknown client", ST_CLIENT_RELEASED, 9},
    {"lease skipping the cursor", ST_SPLITS_LEASED, 0, 1, 2, .seqs = {3}, .nseqs = 1},
    {"lease a leased split", ST_SPLITS_LEASED, 0, 1, 2, .seqs = {1}, .nseqs = 1},
    {"lease past the end", ST_SPLITS_LEASED, 0, 1, 2, .seqs = {2, 3, 4}, .nseqs = 3},
    {"lease nothing", ST_SPLITS_LEASED, 0, 1, 2},
    {"lease to a task of another iteration", ST_SPLITS_LEASED, 0, 9, 2, .seqs = {2}, .nseqs = 1},
    {"lease out of order", ST_SPLITS_LEASED, 0, 1, 2, .seqs = {3, 2}, .nseqs = 2},
    {"lease repeating the last request number", ST_SPLITS_LEASED, 3, 1, 1, .seqs = {2}, .nseqs = 1},
    {"lease under an older request number", ST_SPLITS_LEASED, 2, 1, 1, .seqs = {2}, .nseqs = 1},
    {"lease under the last request number", ST_SPLITS_LEASED, UINT64_MAX, 1, 1, .seqs = {2},
     .nseqs = 1},
    {"finish a split not leased to the task", ST_SPLITS_FINISHED, 0, 1, 2, .seqs = {0}, .nseqs = 1},
    {"finish a split twice in one update", ST_SPLITS_FINISHED, 0, 1, 1, .seqs = {0, 0}, .nseqs = 2},
    {"return a split not leased", ST_SPLITS_RETURNED, 0, 1, 1, .seqs = {2}, .nseqs = 1},
    {"finish unknown iteration", ST_ITERATION_FINISHED, 9},
    {"gc an iteration with clients and tasks", ST_ITERATION_GC, 1},
    {"gc unknown iteration", ST_ITERATION_GC, 9},
    /* The last id would wrap its counter (the same updates with UINT64_MAX - 1 apply: see
     * test_apply_last_ids). */
    {"dataset number wraps the counter", ST_DATASET_REGISTERED, UINT64_MAX, 0, 0,
     "18446744073709551615"},
    {"job id wraps the counter", ST_JOB_CREATED, UINT64_MAX, 0, 0, "", "1"},
    {"worker id wraps the counter", ST_WORKER_REGISTERED, UINT64_MAX, 0, 0, NULL, NULL, "z:1"},
    {"client id wraps the counter", ST_CLIENT_ACQUIRED, UINT64_MAX, 1},
    {"task id wraps the counter", ST_TASK_CREATED, UINT64_MAX, 1, 3},
    {"rounds scheduled for a read that is not coordinated", ST_ROUNDS_SCHEDULED, 0, 1, 0,
     .seqs = {1}, .nseqs = 1},
    {"rounds granted to a read that is not coordinated", ST_ROUNDS_GRANTED, 0, 1, 10},
    {"rounds scheduled for an unknown iteration", ST_ROUNDS_SCHEDULED, 0, 9, 0},
    {"save without a path", ST_SAVE_STARTED, 1, 1, 1, "1"},
    {"save of an unknown iteration", ST_SAVE_STARTED, 1, 1, 9, "1"},
    {"save with the wrong id", ST_SAVE_STARTED, 2, 1, 1, "1"},
    {"save finished unknown", ST_SAVE_FINISHED, 9},
    {"save failed unknown", ST_SAVE_FAILED, 9},
};

static void test_apply_refuses(void **unused)
{
    (void)unused;
    for (size_t i = 0; i < sizeof apply_cases / sizeof apply_cases[0]; i++) {
        const struct apply_case *c = &apply_cases[i];
        struct harness h;
        harness_init(&h);
        run_script(&h, APPLY_SETUP);
        struct st_update u;
        memset(&u, 0, sizeof u);
        u.type = c->type;
        u.id = c->id;
        u.ref = c->ref;
        u.ref2 = c->ref2;
        snprintf(u.name, sizeof u.name, "%s", c->name1 ? c->name1 : "");
        snprintf(u.name2, sizeof u.name2, "%s", c->name2 ? c->name2 : "");
        snprintf(u.address, sizeof u.address, "%s", c->address ? c->address : "");
        u.mode = c->mode;
        u.distributed = c->distributed;
        u.plan.per_pass = u.plan.passes = 1;
        u.seqs.v = (uint64_t *)c->seqs;
        u.seqs.n = c->nseqs;
        uint64_t before = state_digest(&h.s);
        int rc = state_apply(&h.s, &u);
        if (rc != SLUICE_ERR_CORRUPT)
            fail_msg("case '%s': apply returned %d", c->name, rc);
        assert_int_equal(state_digest(&h.s), before);
        check_invariants(&h.s);
        harness_release(&h);
    }
}

/* The refusals of the id UINT64_MAX above are about the id alone: one less applies, and raises
 * the counter to the last value. */
static void test_apply_last_ids(void **unused)
{
    (void)unused;
    const uint64_t last = UINT64_MAX - 1;
    for (int k = 0; k < 6; k++) {
        struct harness h;
        harness_init(&h);
        run_script(&h, APPLY_SETUP);
        struct st_update u;
        memset(&u, 0, sizeof u);
        u.id = last;
        uint64_t *counter = NULL;
        uint64_t seq = 2;
        switch (k) {
        case 0:
            u.type = ST_DATASET_REGISTERED;
            snprintf(u.name, sizeof u.name, "%" PRIu64, last);
            counter = &h.s.next_dataset_id;
            break;
        case 1:
            u.type = ST_JOB_CREATED;
            snprintf(u.name2, sizeof u.name2, "1");
            counter = &h.s.next_job_id;
            break;
        case 2:
            u.type = ST_WORKER_REGISTERED;
            snprintf(u.address, sizeof u.address, "z:1");
            counter = &h.s.next_worker_id;
            break;
        case 3:
            u.type = ST_CLIENT_ACQUIRED;
            u.ref = 1;
            counter = &h.s.next_client_id;
            break;
        case 4:
            u.type = ST_TASK_CREATED;
            u.ref = 1;
            u.ref2 = 3;
            counter = &h.s.next_task_id;
            break;
        default:
            u.type = ST_SPLITS_LEASED;
            u.ref = 1;
            u.ref2 = 1;
            u.seqs.v = &seq;
            u.seqs.n = 1;
            break;
        }
        assert_int_equal(state_apply(&h.s, &u), 0);
        if (k != 1) /* a job alone has no iteration yet, which the check expects */
            check_invariants(&h.s);
        if (counter)
            assert_true(*counter == UINT64_MAX);
        else
            assert_true(state_task(&h.s, 1)->last_request == last);
        harness_release(&h);
    }
}

/* ---- lost replies ---------------------------------------------------------------------------- */

static uint64_t rng_next(uint64_t *x)
{
    *x ^= *x << 13;
    *x ^= *x >> 7;
    *x ^= *x << 17;
    return *x;
}

static uint64_t pick(uint64_t *x, uint64_t n)
{
    return n ? rng_next(x) % n : 0;
}

/* A worker's side of GetSplits, as lease.c keeps it: the request in flight (its number, what it
 * reports finished) is sent again as it was until a reply arrives. */
struct sim_task {
    uint64_t id;
    uint64_t number;
    uint64_t fin[64];
    size_t nfin;
    bool pending; /* the request failed: send it again */
    bool ended;
};

/* Two tasks lease and finish the splits of a 40-split iteration while many replies are lost
 * after the dispatcher applied the request (as when it dies after its journal write). Every
 * split is finished exactly once, by the task it was leased to, and the iteration ends: a lost
 * lease comes back to the task that retries, instead of staying leased to it forever. */
static void test_lost_replies(void **unused)
{
    (void)unused;
    struct harness h;
    harness_init(&h);
    run_script(&h, "ds - r4\nhb a:1 1\nhb b:1 1\njob 1 mode=distributed_epoch total=40");
    struct sim_task tasks[2] = {{.id = 1}, {.id = 2}};
    uint8_t finished_by[40] = {0};
    uint64_t x = 0x5eed;
    size_t lost = 0, repeats = 0;
    for (int round = 0; round < 1000 && !(tasks[0].ended && tasks[1].ended); round++) {
        struct sim_task *t = &tasks[pick(&x, 2)];
        if (t->ended)
            continue;
        if (!t->pending)
            t->number++;
        struct plan_splits_request sr = {.task_id = t->id,
                                         .request_seq = t->number,
                                         .finished = t->fin,
                                         .nfinished = t->nfin,
                                         .max = 2};
        struct plan_splits_result lease;
        char err[256];
        size_t before = h.record.n;
        assert_int_equal(plan_get_splits(&h.s, &sr, &lease, &h.ups, err, sizeof err), 0);
        uint64_t *seqs = lease.seqs;
        size_t nseqs = lease.nseqs;
        bool end = lease.end;
        repeats += t->pending && nseqs > 0;
        commit(&h);
        /* A repeat plans nothing new: the lease it answers with was journaled before. */
        if (t->pending) {
            for (size_t i = before; i < h.record.n; i++)
                assert_int_not_equal(h.record.v[i].type, ST_SPLITS_LEASED);
        }
        if (pick(&x, 3) == 0) {
            lost++;
            t->pending = true;
            free(seqs);
            continue;
        }
        for (size_t i = 0; i < t->nfin; i++)
            finished_by[t->fin[i]] = (uint8_t)t->id;
        t->pending = false;
        t->ended = end;
        /* Everything leased is run before the next request, which reports it. */
        assert_true(nseqs <= 64);
        for (size_t i = 0; i < nseqs; i++) {
            assert_int_equal(finished_by[seqs[i]], 0);
            t->fin[i] = seqs[i];
        }
        t->nfin = nseqs;
        free(seqs);
    }
    assert_true(tasks[0].ended && tasks[1].ended);
    assert_true(lost >= 8);
    assert_true(repeats >= 5);
    const struct st_iteration *it = state_iteration(&h.s, 1);
    assert_int_equal(it->splits_finished, 40);
    assert_int_equal(it->splits_leased, 0);
    for (size_t i = 0; i < 40; i++)
        assert_true(finished_by[i] == 1 || finished_by[i] == 2);
    /* The record holds every split finished exactly once, by the task it was leased to. */
    uint8_t leased_to[40] = {0}, finishes[40] = {0};
    for (size_t i = 0; i < h.record.n; i++) {
        const struct st_update *u = &h.record.v[i];
        for (size_t k = 0; k < u->seqs.n && u->type == ST_SPLITS_LEASED; k++)
            leased_to[u->seqs.v[k]] = (uint8_t)u->ref2;
        for (size_t k = 0; k < u->seqs.n && u->type == ST_SPLITS_FINISHED; k++) {
            assert_int_equal(leased_to[u->seqs.v[k]], u->ref2);
            finishes[u->seqs.v[k]]++;
        }
    }
    for (size_t i = 0; i < 40; i++)
        assert_int_equal(finishes[i], 1);
    harness_release(&h);
}

/* ---- random runs: apply/replay equivalence, unique ids, exactly-once splits ------------------ */

/* One random planned operation; refusals are fine (they must append nothing). */
static void random_op(struct harness *h, uint64_t *x)
{
    static const char *const defs[] = {"r1", "r2", "r3"};
    static const char *const ids[] = {"-", "-", "-", "a", "b", "7"};
    static const char *const names[] = {"", "", "n", "m"};
    static const char *const addrs[] = {"w0:1", "w1:1", "w2:1", "w3:1"};
    char cmd[512];
    const struct state *s = &h->s;
    switch (pick(x, 10)) {
    case 0:
        snprintf(cmd, sizeof cmd, "ds %s %s comp=%d", ids[pick(x, 6)], defs[pick(x, 3)],
                 (int)pick(x, 2));
        break;
    case 1: {
        if (s->ndatasets == 0)
            return;
        const char *name = names[pick(x, 4)];
        bool dist = pick(x, 3) != 0;
        int n = snprintf(cmd, sizeof cmd, "job %s%s%s", s->datasets[pick(x, s->ndatasets)].id,
                         *name ? " name=" : "", name);
        if (!dist && *name && pick(x, 2) == 0)
            snprintf(cmd + n, sizeof cmd - (size_t)n, " consumers=2");
        else if (dist)
            snprintf(cmd + n, sizeof cmd - (size_t)n, " mode=distributed_epoch total=%d%s",
                     (int)pick(x, 7), !*name && pick(x, 2) == 0 ? " det" : "");
        break;
    }
    case 2:
    case 3:
    case 4: {
        /* A worker reports some of its unfinished tasks finished, or restarts. */
        const char *addr = addrs[pick(x, 4)];
        const struct st_worker *w = state_worker_by_address(s, addr);
        uint64_t inc = w && pick(x, 8) != 0 ? w->incarnation : 1 + pick(x, 3);
        int n = snprintf(cmd, sizeof cmd, "hb %s %" PRIu64, addr, inc);
        if (w) {
            const char *sep = " fin=";
            for (size_t i = 0; i < s->ntasks && n < 400; i++) {
                if (s->tasks[i].worker_id == w->id && pick(x, 3) == 0) {
                    n += snprintf(cmd + n, sizeof cmd - (size_t)n, "%s%" PRIu64, sep,
                                  s->tasks[i].id);
                    sep = ",";
                }
            }
        }
        if (pick(x, 20) == 0)
            snprintf(cmd + n, sizeof cmd - (size_t)n, " drain");
        break;
    }
    case 5:
    case 6:
    case 7: {
        if (s->ntasks == 0)
            return;
        const struct st_task *t = &s->tasks[pick(x, s->ntasks)];
        if (pick(x, 6) == 0) {
            /* A deterministic reader asks for some of the task's splits again (refused for
             * other jobs). */
            int n = snprintf(cmd, sizeof cmd, "redo %" PRIu64 " ", t->iteration_id);
            const char *sep = "";
            for (size_t i = 0; i < t->leased.n && n < 400; i++) {
                if (pick(x, 2) == 0) {
                    n += snprintf(cmd + n, sizeof cmd - (size_t)n, "%s%" PRIu64, sep,
                                  t->leased.v[i]);
                    sep = ",";
                }
            }
            if (!*sep)
                snprintf(cmd + n, sizeof cmd - (size_t)n, "0");
            break;
        }
        int n = snprintf(cmd, sizeof cmd, "splits %" PRIu64 " %d", t->id, (int)pick(x, 4));
        const char *sep = " fin=";
        for (size_t i = 0; i < t->leased.n && n < 400; i++) {
            if (pick(x, 2) == 0) {
                n += snprintf(cmd + n, sizeof cmd - (size_t)n, "%s%" PRIu64, sep, t->leased.v[i]);
                sep = ",";
            }
        }
        /* Unnumbered, a retry of the last request, a newer one, or a stale one (refused). */
        uint64_t k = pick(x, 6), req = 0;
        if (k == 1 || k == 2)
            req = t->last_request;
        else if (k == 3 || k == 4)
            req = t->last_request + 1 + pick(x, 2);
        else if (k == 5 && t->last_request > 1)
            req = t->last_request - 1;
        if (req)
            snprintf(cmd + n, sizeof cmd - (size_t)n, " req=%" PRIu64, req);
        break;
    }
    case 8:
        if (pick(x, 3) == 0 && s->nclients > 0) {
            /* A consumer's progress: coordinated reads get rounds granted. */
            snprintf(cmd, sizeof cmd, "chb %" PRIu64 " round=%d window=%d",
                     s->clients[pick(x, s->nclients)].id, (int)pick(x, 300), 64);
        } else if (pick(x, 3) == 0 && s->nworkers > 0) {
            snprintf(cmd, sizeof cmd, "rm %" PRIu64, s->workers[pick(x, s->nworkers)].id);
        } else if (s->nclients > 0) {
            snprintf(cmd, sizeof cmd, "rel %" PRIu64, s->clients[pick(x, s->nclients)].id);
        } else {
            return;
        }
        break;
    default:
        if (s->niterations == 0)
            return;
        snprintf(cmd, sizeof cmd, "gc %" PRIu64, s->iterations[pick(x, s->niterations)].id);
        break;
    }
    run(h, cmd);
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

static void check_unique(uint64_t *v, size_t n, const char *what)
{
    qsort(v, n, sizeof *v, cmp_u64);
    for (size_t i = 1; i < n; i++) {
        if (v[i] == v[i - 1])
            fail_msg("%s id %" PRIu64 " used twice", what, v[i]);
    }
}

#define RANDOM_STEPS 3000

typedef void (*random_op_fn)(struct harness *h, uint64_t *x);

/* Checked beside the replay: every update survives the journal's encoding unchanged. */
static void record_copy(const struct st_update *u, struct st_update *out);
/* The live state survives a snapshot's encoding with the same digest. */
static void check_snapshot(const struct state *s);

/* Returns how many splits were finished from the pool (SPLITS_FINISHED with no task). */
static size_t random_run(uint64_t seed, random_op_fn op, bool through_records)
{
    size_t from_pool = 0;
    struct harness h;
    harness_init(&h);
    uint64_t x = seed;
    size_t *marks = calloc(RANDOM_STEPS, sizeof *marks);
    uint64_t *digests = calloc(RANDOM_STEPS, sizeof *digests);
    assert_non_null(marks);
    assert_non_null(digests);
    size_t finished_iterations = 0;
    for (size_t step = 0; step < RANDOM_STEPS; step++) {
        op(&h, &x);
        marks[step] = h.record.n;
        digests[step] = state_digest(&h.s);
    }

    /* Replay onto a fresh state: the same digest after every step's updates. */
    struct state r;
    state_init(&r);
    size_t applied = 0;
    for (size_t step = 0; step < RANDOM_STEPS; step++) {
        for (; applied < marks[step]; applied++) {
            if (!through_records) {
                assert_int_equal(state_apply(&r, &h.record.v[applied]), 0);
                continue;
            }
            struct st_update copy;
            record_copy(&h.record.v[applied], &copy);
            assert_int_equal(state_apply(&r, &copy), 0);
            st_update_release(&copy);
        }
        if (state_digest(&r) != digests[step])
            fail_msg("seed %" PRIu64 ": replay differs after step %zu", seed, step);
    }
    assert_int_equal(r.applied, h.record.n);
    state_release(&r);
    if (through_records)
        check_snapshot(&h.s);

    /* Ids never repeat, and no split is finished twice in one iteration. */
    size_t n = h.record.n;
    uint64_t *ids[6];
    size_t nids[6] = {0};
    for (int k = 0; k < 6; k++) {
        ids[k] = malloc((n ? n : 1) * sizeof(uint64_t));
        assert_non_null(ids[k]);
    }
    uint64_t *fin = malloc(((n ? n : 1) * 8) * sizeof *fin);
    size_t nfin = 0;
    assert_non_null(fin);
    for (size_t i = 0; i < n; i++) {
        const struct st_update *u = &h.record.v[i];
        int k = u->type == ST_DATASET_REGISTERED  ? 0
                : u->type == ST_JOB_CREATED       ? 1
                : u->type == ST_ITERATION_CREATED ? 2
                : u->type == ST_TASK_CREATED      ? 3
                : u->type == ST_WORKER_REGISTERED ? 4
                : u->type == ST_CLIENT_ACQUIRED   ? 5
                                                  : -1;
        if (k == 0 && u->id == 0)
            continue;
        if (k >= 0)
            ids[k][nids[k]++] = u->id;
        if (u->type == ST_ITERATION_FINISHED)
            finished_iterations++;
        if (u->type == ST_SPLITS_FINISHED) {
            if (u->ref2 == 0)
                from_pool += u->seqs.n;
            /* iteration id in the high bits: both stay small in these runs */
            for (size_t j = 0; j < u->seqs.n; j++)
                fin[nfin++] = (u->ref << 32) | u->seqs.v[j];
        }
    }
    static const char *const kinds[] = {"dataset", "job", "iteration", "task", "worker", "client"};
    for (int k = 0; k < 6; k++) {
        check_unique(ids[k], nids[k], kinds[k]);
        free(ids[k]);
    }
    check_unique(fin, nfin, "finished split");
    free(fin);
    /* The run must exercise what it claims to. */
    assert_true(finished_iterations > 0);
    assert_true(nfin > 0);
    free(marks);
    free(digests);
    harness_release(&h);
    return from_pool;
}

static void test_random_replay(void **unused)
{
    (void)unused;
    for (uint64_t seed = 1; seed <= 20; seed++)
        random_run(seed * 0x9e3779b97f4a7c15ull, random_op, false);
}

/* ---- names ----------------------------------------------------------------------------------- */

static void test_mode_names(void **unused)
{
    (void)unused;
    static const struct {
        const char *text;
        int rc;
        enum sluice_mode mode;
    } cases[] = {
        {"parallel_epochs", 0, SLUICE_PARALLEL_EPOCHS},
        {"off", 0, SLUICE_PARALLEL_EPOCHS},
        {"distributed_epoch", 0, SLUICE_DISTRIBUTED_EPOCH},
        {"dynamic", 0, SLUICE_DISTRIBUTED_EPOCH},
        {"file", 0, SLUICE_SHARD_FILE},
        {"data", 0, SLUICE_SHARD_DATA},
        {"file_or_data", 0, SLUICE_SHARD_FILE_OR_DATA},
        {"hint", 0, SLUICE_SHARD_HINT},
        {"", SLUICE_ERR_INVALID, 0},
        {"Dynamic", SLUICE_ERR_INVALID, 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        enum sluice_mode m = (enum sluice_mode)77;
        assert_int_equal(mode_parse(cases[i].text, &m), cases[i].rc);
        if (cases[i].rc == 0)
            assert_int_equal(m, cases[i].mode);
    }
    assert_string_equal(mode_name(SLUICE_SHARD_FILE_OR_DATA), "file_or_data");
    assert_string_equal(mode_name((enum sluice_mode)42), "unknown");
    assert_string_equal(st_update_name(ST_WORKER_DRAINING), "worker_draining");
    assert_string_equal(st_update_name((enum st_update_type)0), "unknown");
}

/* ---- the status document and the shell's arithmetic ------------------------------------------ */

static void test_status_json(void **unused)
{
    (void)unused;
    struct harness h;
    harness_init(&h);
    run_script(&h, "ds - r4\nds mine r5 comp=1\nhb a:1 255\nhb b:2 1 drain\n"
                   "job 1 name=n mode=distributed_epoch total=4\njob mine\n"
                   "splits 1 3\nrm 1\nhb a:1 255\nsplits 3 1\nsplits 3 0 fin=0\n"
                   "job 1\nrel 3\ngc 3\njob 1 name=z\nrel 4\ngc 4");
    char *json = NULL;
    assert_int_equal(status_json(&h.s, &json), 0);
    assert_string_equal(
        json, "{\"workers\":["
              "{\"id\":2,\"address\":\"b:2\",\"incarnation\":\"0000000000000001\","
              "\"draining\":true,\"tasks\":[]},"
              "{\"id\":3,\"address\":\"a:1\",\"incarnation\":\"00000000000000ff\","
              "\"draining\":false,\"tasks\":[3,4]}],"
              "\"datasets\":[{\"id\":\"1\",\"pipeline\":\"r4\",\"pipeline_bytes\":2,"
              "\"pipeline_digest\":"
              "\"a2ec8adac7fd24b4b7a8edd89d06990579f6123f5724a14b47ee4bddfb2ba572\","
              "\"pipeline_truncated\":false,\"compression\":\"auto\",\"split_size\":null},"
              "{\"id\":\"mine\",\"pipeline\":\"r5\",\"pipeline_bytes\":2,"
              "\"pipeline_digest\":"
              "\"5eb242aeb68552862913d602cff36deb4cafc18a46cfdea393b4bc1c6917a669\","
              "\"pipeline_truncated\":false,\"compression\":\"none\",\"split_size\":null}],"
              "\"jobs\":["
              "{\"id\":1,\"name\":\"n\",\"dataset_id\":\"1\",\"mode\":\"distributed_epoch\","
              "\"iteration_id\":1,\"repetition\":0,\"state\":\"active\",\"clients\":1,"
              "\"tasks\":[{\"id\":3,\"worker\":\"a:1\",\"finished\":false}],"
              "\"splits\":{\"total\":4,\"size\":1,\"cursor\":3,\"leased\":0,\"returned\":2,"
              "\"finished\":1}},"
              "{\"id\":2,\"name\":null,\"dataset_id\":\"mine\",\"mode\":\"parallel_epochs\","
              "\"iteration_id\":2,\"repetition\":0,\"state\":\"active\",\"clients\":1,"
              "\"tasks\":[{\"id\":4,\"worker\":\"a:1\",\"finished\":false}]},"
              "{\"id\":4,\"name\":\"z\",\"dataset_id\":\"1\",\"mode\":\"parallel_epochs\","
              "\"iteration_id\":4,\"repetition\":0,\"state\":\"garbage_collected\","
              "\"clients\":0,\"tasks\":[]}]}");
    free(json);
    harness_release(&h);
}

/* A coordinated job shows its consumers, its grant and its round schedule. */
static void test_status_json_rounds(void **unused)
{
    (void)unused;
    struct harness h;
    harness_init(&h);
    run_script(&h, "ds - r4\nhb a:1 1\nhb b:1 1\njob 1 name=c consumers=2\nchb 1 window=64\n"
                   "rm 1");
    char *json = NULL;
    assert_int_equal(status_json(&h.s, &json), 0);
    assert_non_null(strstr(json, "\"rounds\":{\"consumers\":2,\"granted\":64,\"schedule\":["
                                 "{\"from\":0,\"tasks\":[1,2]},{\"from\":64,\"tasks\":[2]}]}"));
    free(json);
    harness_release(&h);
}

/* A long pipeline text: the document carries its first STATUS_PIPELINE_PREVIEW bytes (cut before
 * a character that would be split), its length and its SHA-256, so the document's size does not
 * grow with the texts; status_dataset_json has the whole text, and refuses an unknown id. */
static void test_status_json_pipeline_preview(void **unused)
{
    (void)unused;
    struct state s;
    state_init(&s);
    /* 255 ASCII bytes, then "é" (2 bytes) across the 256-byte mark, then more. */
    enum { LEN = 100000 };
    char *text = malloc(LEN + 1);
    assert_non_null(text);
    memset(text, 'a', LEN);
    text[255] = (char)0xc3;
    text[256] = (char)0xa9;
    text[LEN] = '\0';
    char def[] = "r4";
    struct st_update u;
    memset(&u, 0, sizeof u);
    u.type = ST_DATASET_REGISTERED;
    snprintf(u.name, sizeof u.name, "big");
    u.def = (uint8_t *)def;
    u.def_len = 2;
    u.text = text;
    assert_int_equal(state_apply(&s, &u), 0);
    char digest[SHA256_HEX_LEN + 1], want[1024];
    sha256_hex(text, LEN, digest);

    char *json = NULL;
    assert_int_equal(status_json(&s, &json), 0);
    char preview[256];
    memset(preview, 'a', 255);
    preview[255] = '\0';
    snprintf(want, sizeof want,
             "\"datasets\":[{\"id\":\"big\",\"pipeline\":\"%s\",\"pipeline_bytes\":%d,"
             "\"pipeline_digest\":\"%s\",\"pipeline_truncated\":true,",
             preview, LEN, digest);
    if (strstr(json, want) == NULL)
        fail_msg("%.600s", json);
    assert_true(strlen(json) < 1024);
    free(json);

    assert_int_equal(status_dataset_json(&s, "big", &json), 0);
    json_error_t jerr;
    json_t *root = json_loads(json, 0, &jerr);
    assert_non_null(root);
    json_t *ds = json_array_get(json_object_get(root, "datasets"), 0);
    assert_string_equal(json_string_value(json_object_get(ds, "pipeline")), text);
    assert_int_equal(json_integer_value(json_object_get(ds, "pipeline_bytes")), LEN);
    assert_string_equal(json_string_value(json_object_get(ds, "pipeline_digest")), digest);
    assert_true(json_is_false(json_object_get(ds, "pipeline_truncated")));
    json_decref(root);
    free(json);
    json = NULL;
    assert_int_equal(status_dataset_json(&s, "other", &json), SLUICE_ERR_NOT_FOUND);
    assert_null(json);
    free(text);
    state_release(&s);
}

/* Names that an old journal may hold (stored before names were checked) still render: status
 * escapes bytes that are not UTF-8 and control characters instead of failing. */
static void test_status_json_bad_names(void **unused)
{
    (void)unused;
    struct state s;
    state_init(&s);
    struct st_update u[5];
    memset(u, 0, sizeof u);
    char def[] = "r4", text[] = "range(4) | map(\"\xff\")", why[] = "task 1: bad \x01";
    u[0].type = ST_DATASET_REGISTERED;
    snprintf(u[0].name, sizeof u[0].name, "ds\xff\n");
    u[0].def = (uint8_t *)def;
    u[0].def_len = 2;
    u[0].text = text;
    u[1].type = ST_JOB_CREATED;
    u[1].id = 1;
    snprintf(u[1].name, sizeof u[1].name, "job\x85\xc2\x85");
    snprintf(u[1].name2, sizeof u[1].name2, "ds\xff\n");
    u[2].type = ST_ITERATION_CREATED;
    u[2].id = 1;
    u[2].ref = 1;
    u[3].type = ST_WORKER_REGISTERED;
    u[3].id = 1;
    u[3].incarnation = 1;
    snprintf(u[3].address, sizeof u[3].address, "h:1\ninfo forged");
    u[4].type = ST_ITERATION_FAILED;
    u[4].id = 1;
    u[4].text = why;
    for (size_t i = 0; i < 5; i++)
        assert_int_equal(state_apply(&s, &u[i]), 0);
    char *json = NULL;
    assert_int_equal(status_json(&s, &json), 0);
    assert_non_null(strstr(json, "\"address\":\"h:1\\\\x0ainfo forged\""));
    assert_non_null(strstr(json, "\"id\":\"ds\\\\xff\\\\x0a\""));
    assert_non_null(strstr(json, "\"pipeline\":\"range(4) | map(\\\"\\\\xff\\\")\""));
    assert_non_null(strstr(json, "\"name\":\"job\\\\x85\\\\xc2\\\\x85\""));
    assert_non_null(strstr(json, "\"dataset_id\":\"ds\\\\xff\\\\x0a\""));
    assert_non_null(strstr(json, "\"error\":\"task 1: bad \\\\x01\""));
    assert_non_null(strstr(json, "\"state\":\"failed\""));
    free(json);
    state_release(&s);
}

static void test_heartbeat_interval(void **unused)
{
    (void)unused;
    static const uint32_t cases[][2] = {
        {1, 50}, {250, 50}, {300, 60}, {2500, 500}, {5000, 1000}, {10000, 1000}, {UINT32_MAX, 1000},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        assert_int_equal(dispatcher_heartbeat_ms(cases[i][0]), cases[i][1]);
}

/* ---- consumer-acknowledged splits ------------------------------------------------------------ */

/* A distributed job with tasks 1 (worker 1, a:1) and 2 (worker 2, b:1) and eight splits. */
#define DIST8 "ds - r4\nhb a:1 1\nhb b:1 1\njob 1 mode=distributed_epoch total=8\n"
/* DIST8 with splits in every place: 0 leased to task 1, 2 and 3 leased to task 2, 4 and 5 in the
 * pool (their task 3 went with its worker), 1 finished, 6 and 7 beyond the cursor. */
#define MIX DIST8 "splits 1 2\nsplits 2 2\nhb c:1 1\nsplits 3 2\nrm 3\nsplits 1 0 fin=1\n"
/* DIST8 with task 1 holding 0..3 from its request 1, and its worker draining. */
#define DRAIN DIST8 "splits 1 4 req=1\nhb a:1 1 drain\n"

static const struct plan_case settle_cases[] = {
    /* splits_finished */
    {"finished: a mix of places", MIX, "done 1 5,7,0,3,1,4,6,0",
     "splits_finished ref=1 ref2=1 seqs=[0]\n"
     "splits_finished ref=1 ref2=2 seqs=[3]\n"
     "splits_finished ref=1 seqs=[4,5]\n"
     "=>"},
    {"finished: a repeated report is a no-op", MIX "done 1 5,7,0,3,1,4,6,0", "done 1 0,3,4,5,1",
     "=>"},
    {"finished: nothing", MIX, "done 1", "=>"},
    {"finished: one seq of a task holding more", DIST8 "splits 1 4\nsplits 2 2", "done 1 2,9,2,5",
     "splits_finished ref=1 ref2=1 seqs=[2]\nsplits_finished ref=1 ref2=2 seqs=[5]\n=>"},
    {"finished: more seqs than a task holds", DIST8 "splits 1 1\nsplits 2 3",
     "done 1 7,6,5,4,3,2,1,0,3",
     "splits_finished ref=1 ref2=1 seqs=[0]\nsplits_finished ref=1 ref2=2 seqs=[1,2,3]\n=>"},
    {"finished: only from the pool", MIX, "done 1 4", "splits_finished ref=1 seqs=[4]\n=>"},
    {"finished: only beyond the cursor", MIX, "done 1 6,7,100", "=>"},
    {"finished: unknown iteration", MIX, "done 9 1", "error NOT_FOUND: iteration 9 not found"},
    {"finished: a parallel iteration", PAR2, "done 1 0",
     "error INVALID: iteration 1 is not a distributed_epoch iteration"},
    {"finished: a finished iteration",
     DIST2 "splits 1 4\ndone 1 0,1,2,3\nhb a:1 1 fin=1\n"
           "hb b:1 1 fin=2",
     "done 1 0", "=>"},
    {"finished: from the pool is not leased again", MIX "done 1 4", "splits 2 3",
     "splits_leased ref=1 ref2=2 seqs=[5,6,7]\n=> end=0 seqs=[5,6,7]"},
    {"finished: everything ends the task's requests", DIST2 "splits 1 2\nsplits 2 2",
     "done 1 3,2,1,0",
     "splits_finished ref=1 ref2=1 seqs=[0,1]\nsplits_finished ref=1 ref2=2 seqs=[2,3]\n=>"},
    {"finished: then a request ends", DIST2 "splits 1 2\nsplits 2 2\ndone 1 3,2,1,0", "splits 1 1",
     "=> end=1"},
    {"finished: the worker's own report is then a no-op", DIST2 "splits 1 2\ndone 1 0",
     "splits 1 0 fin=0,1", "splits_finished ref=1 ref2=1 seqs=[1]\n=> end=0"},

    /* get_splits_returning */
    {"returning: unstarted splits go to the pool", DRAIN, "splits 1 5 req=2 ret=3,2",
     "splits_returned ref=1 ref2=1 seqs=[2,3]\n=> end=0"},
    {"returning: seqs not held and repeats are ignored", DRAIN "splits 2 1 req=1",
     "splits 1 5 req=2 ret=3,9,4,2,3", "splits_returned ref=1 ref2=1 seqs=[2,3]\n=> end=0"},
    {"returning: nothing held to return", DRAIN, "splits 1 5 req=2 ret=7,6", "=> end=0"},
    {"returning: a seq also finished counts as finished", DRAIN, "splits 1 0 req=2 fin=2 ret=2,3",
     "splits_finished ref=1 ref2=1 seqs=[2]\nsplits_returned ref=1 ref2=1 seqs=[3]\n=> end=0"},
    {"returning: the other task leases them next", DRAIN "splits 1 5 req=2 ret=2,3",
     "splits 2 3 req=1", "splits_leased id=1 ref=1 ref2=2 seqs=[2,3,4]\n=> end=0 seqs=[2,3,4]"},
    {"returning: the retry of a lost reply plans nothing", DRAIN "splits 1 5 req=2 ret=2,3",
     "splits 1 5 req=2 ret=2,3", "=> end=0"},
    {"returning: everything held ends at once", DRAIN, "splits 1 5 req=2 ret=0,1,2,3",
     "splits_returned ref=1 ref2=1 seqs=[0,1,2,3]\n=> end=1"},
    {"returning: a non-draining task also leases", DIST8 "splits 1 4 req=1",
     "splits 1 2 req=2 ret=1",
     "splits_returned ref=1 ref2=1 seqs=[1]\nsplits_leased id=2 ref=1 ref2=1 seqs=[4,5]\n"
     "=> end=0 seqs=[4,5]"},
    {"returning: nothing is not the end while others hold splits",
     DIST8 "splits 1 4\nsplits 2 4\ndone 1 0,1,2,3", "splits 1 5 req=1 ret=", "=> end=0"},

    /* draining without returning */
    {"draining: no new splits while holding produced ones", DRAIN "splits 1 5 req=2 ret=2,3",
     "splits 1 5 req=3", "=> end=0"},
    {"draining: unnumbered request", DRAIN, "splits 1 5", "=> end=0"},
    {"draining: one produced split left", DRAIN "splits 1 5 req=2 ret=2,3\ndone 1 0",
     "splits 1 5 req=3", "=> end=0"},
    {"draining: ends once its splits are finished", DRAIN "splits 1 5 req=2 ret=2,3\ndone 1 1,0",
     "splits 1 5 req=3", "=> end=1"},
    {"draining: a repeated request gets its lease", DRAIN, "splits 1 5 req=1",
     "=> end=0 seqs=[0,1,2,3]"},
    {"draining: the pool is not leased to it", DRAIN "splits 2 2\nback 2", "splits 1 5 req=2",
     "=> end=0"},

    /* return_task_splits */
    {"return: every split the task holds", DIST8 "splits 1 2\nsplits 2 1\nsplits 1 0 fin=0",
     "back 1", "splits_returned ref=1 ref2=1 seqs=[1]\n=>"},
    {"return: none held", DIST8, "back 1", "=>"},
    {"return: unknown task", DIST8, "back 9", "error NOT_FOUND: task 9 not found"},
    {"return: leased again first", DIST8 "splits 1 2\nback 1", "splits 2 3",
     "splits_leased ref=1 ref2=2 seqs=[0,1,2]\n=> end=0 seqs=[0,1,2]"},
    {"return: then finished from the pool", DIST8 "splits 1 2\nback 1", "done 1 1,0",
     "splits_finished ref=1 seqs=[0,1]\n=>"},
    {"return: a finished task holds none", DIST2 "splits 1 4\ndone 1 0,1,2,3\nhb a:1 1 fin=1",
     "back 1", "=>"},
};

static void test_settle_plan_cases(void **unused)
{
    (void)unused;
    run_plan_cases(settle_cases, sizeof settle_cases / sizeof settle_cases[0]);
}

/* "0,3" for a seq list. */
static const char *seqs_text(const struct st_seq_list *l, char *buf, size_t len)
{
    size_t n = 0;
    buf[0] = '\0';
    for (size_t i = 0; i < l->n; i++) {
        int k = snprintf(buf + n, len - n, "%s%" PRIu64, i ? "," : "", l->v[i]);
        assert_true(k >= 0 && (size_t)k < len - n);
        n += (size_t)k;
    }
    return buf;
}

/* The places of an iteration's splits, in one line. */
static const char *places(const struct state *s, uint64_t iteration_id, char *out, size_t len)
{
    const struct st_iteration *it = state_iteration(s, iteration_id);
    assert_non_null(it);
    char pool[128];
    int n =
        snprintf(out, len, "cursor=%" PRIu64 " finished=%" PRIu64 " leased=%" PRIu64 " pool=[%s]",
                 it->split_cursor, it->splits_finished, it->splits_leased,
                 seqs_text(&it->pool, pool, sizeof pool));
    for (size_t i = 0; i < s->ntasks; i++) {
        const struct st_task *t = &s->tasks[i];
        if (t->iteration_id != iteration_id)
            continue;
        char l[128];
        n += snprintf(out + n, len - (size_t)n, " task%" PRIu64 "=[%s]", t->id,
                      seqs_text(&t->leased, l, sizeof l));
        assert_true((size_t)n < len);
    }
    return out;
}

/* Which of seqs 0..7 of the iteration state_split_finished() calls finished, as "10110000".
 * state_splits_finished_each must say the same of them, asked in any order and with repeats. */
static const char *finished_map(const struct state *s, uint64_t iteration_id, char out[9])
{
    for (uint64_t seq = 0; seq < 8; seq++)
        out[seq] = state_split_finished(s, iteration_id, seq) ? '1' : '0';
    out[8] = '\0';
    static const uint64_t ask[] = {7, 3, 0, 5, 3, 1, 6, 2, 4, 0, 100};
    bool each[sizeof ask / sizeof ask[0]];
    assert_int_equal(state_splits_finished_each(s, iteration_id, ask, 11, each), 0);
    for (size_t i = 0; i < 11; i++) {
        bool one = state_split_finished(s, iteration_id, ask[i]);
        if (each[i] != one)
            fail_msg("seq %" PRIu64 ": each says %d, one by one %d", ask[i], each[i], one);
    }
    return out;
}

/* state_splits_finished_each against state_split_finished in every place a split can be, for
 * an active, a finished, an unknown and a parallel iteration, with the tasks holding fewer and
 * more seqs than are asked about. */
static void test_splits_finished_each(void **unused)
{
    (void)unused;
    static const struct {
        const char *script;
        uint64_t iteration;
        const char *want;
    } cases[] = {
        {MIX, 1, "01000000"},
        {MIX "done 1 0,3,4", 1, "11011000"},
        {DIST8 "splits 1 4\nsplits 2 4", 1, "00000000"},
        {DIST8 "splits 1 4\nsplits 2 4\ndone 1 6,1", 1, "01000010"},
        {DIST8 "splits 1 7\ndone 1 0,1,2,3,4,5", 1, "11111100"},
        {DIST2 "splits 1 4\ndone 1 0,1,2,3\nhb a:1 1 fin=1\nhb b:1 1 fin=2", 1, "11111111"},
        {MIX, 9, "00000000"},
        {PAR2, 1, "00000000"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        struct harness h;
        harness_init(&h);
        run_script(&h, cases[i].script);
        char map[9];
        if (strcmp(finished_map(&h.s, cases[i].iteration, map), cases[i].want) != 0)
            fail_msg("case %zu: finished %s, want %s", i, map, cases[i].want);
        bool none;
        assert_int_equal(state_splits_finished_each(&h.s, cases[i].iteration, NULL, 0, &none), 0);
        harness_release(&h);
    }
}

static void record_copy(const struct st_update *u, struct st_update *out)
{
    uint8_t *b = NULL;
    size_t len = 0;
    char err[256];
    assert_int_equal(record_update_encode(u, &b, &len), 0);
    int rc = record_update_decode(b, len, out, err, sizeof err);
    free(b);
    if (rc != 0)
        fail_msg("decoding an encoded %s: %s", st_update_name(u->type), err);
    struct buf want = {0}, got = {0};
    format_update(&want, u);
    format_update(&got, out);
    assert_string_equal(got.s, want.s);
}

/* The journal's datasets table, for decoding a snapshot: the definitions of a state. */
static int defs_of_state(void *user, const char *id, uint8_t **def, size_t *len, char *err,
                         size_t errlen)
{
    const struct st_dataset *d = state_dataset(user, id);
    if (!d)
        return err_set(err, errlen, SLUICE_ERR_NOT_FOUND, "dataset '%s' not found", id);
    *def = malloc(d->def_len ? d->def_len : 1);
    assert_non_null(*def);
    memcpy(*def, d->def, d->def_len);
    *len = d->def_len;
    return 0;
}

static void check_snapshot(const struct state *s)
{
    uint8_t *b = NULL;
    size_t len = 0;
    char err[256];
    assert_int_equal(record_snapshot_encode(s, &b, &len), 0);
    struct state back;
    int rc = record_snapshot_decode(b, len, defs_of_state, (void *)s, &back, err, sizeof err);
    free(b);
    if (rc != 0)
        fail_msg("snapshot decode: %s", err);
    assert_int_equal(state_digest(&back), state_digest(s));
    check_invariants(&back); /* the decoded snapshot built its indexes */
    state_release(&back);
}

/* Replays the harness's record, encoded and decoded as the journal stores it, onto a fresh
 * state: the same digest as live. Returns how many SPLITS_FINISHED with no task it held. */
static size_t replay_through_records(const struct harness *h)
{
    struct state r;
    state_init(&r);
    size_t from_pool = 0;
    for (size_t i = 0; i < h->record.n; i++) {
        struct st_update copy;
        record_copy(&h->record.v[i], &copy);
        from_pool += copy.type == ST_SPLITS_FINISHED && copy.ref2 == 0;
        assert_int_equal(state_apply(&r, &copy), 0);
        st_update_release(&copy);
    }
    assert_int_equal(state_digest(&r), state_digest(&h->s));
    state_release(&r);
    check_snapshot(&h->s);
    return from_pool;
}

/* Consumers' reports finish splits wherever they are: leased to either task, or in the pool. */
static void test_splits_finished_mix(void **unused)
{
    (void)unused;
    struct harness h;
    harness_init(&h);
    run_script(&h, MIX);
    char buf[512], map[9];
    assert_string_equal(places(&h.s, 1, buf, sizeof buf),
                        "cursor=6 finished=1 leased=3 pool=[4,5] task1=[0] task2=[2,3]");
    assert_string_equal(finished_map(&h.s, 1, map), "01000000");
    /* An unknown iteration has no finished split. */
    assert_false(state_split_finished(&h.s, 9, 1));

    assert_string_equal(run(&h, "done 1 5,7,0,3,1,4,6,0"), "splits_finished ref=1 ref2=1 seqs=[0]\n"
                                                           "splits_finished ref=1 ref2=2 seqs=[3]\n"
                                                           "splits_finished ref=1 seqs=[4,5]\n"
                                                           "=>");
    assert_string_equal(places(&h.s, 1, buf, sizeof buf),
                        "cursor=6 finished=5 leased=1 pool=[] task1=[] task2=[2]");
    assert_string_equal(finished_map(&h.s, 1, map), "11011100");
    assert_int_equal(replay_through_records(&h), 1);

    /* The rest: 2 from task 2, then 6 and 7 leased and finished; the tasks end and so does the
     * iteration, whose every split is then finished. */
    run_script(&h, "done 1 2\nsplits 1 5\ndone 1 7,6");
    assert_string_equal(places(&h.s, 1, buf, sizeof buf),
                        "cursor=8 finished=8 leased=0 pool=[] task1=[] task2=[]");
    assert_string_equal(finished_map(&h.s, 1, map), "11111111");
    assert_string_equal(run(&h, "splits 2 1"), "=> end=1");
    assert_string_equal(run(&h, "hb a:1 1 fin=1"), "task_finished id=1\n=> worker=1");
    assert_string_equal(run(&h, "hb b:1 1 fin=2"),
                        "task_finished id=2\niteration_finished id=1\n=> worker=2");
    assert_int_equal(state_iteration(&h.s, 1)->state, ST_ITER_FINISHED);
    assert_string_equal(finished_map(&h.s, 1, map), "11111111");
    assert_string_equal(run(&h, "done 1 0"), "=>");
    assert_int_equal(replay_through_records(&h), 1);

    /* A parallel iteration has no splits; a collected one keeps none finished. */
    run_script(&h, "job 1 name=p");
    assert_string_equal(finished_map(&h.s, 2, map), "00000000");
    run_script(&h, "job 1 name=n mode=distributed_epoch total=2\nrel 3\ngc 3");
    assert_int_equal(state_iteration(&h.s, 3)->state, ST_ITER_GC);
    assert_false(state_split_finished(&h.s, 3, 0));
    harness_release(&h);
}

/* A step of a story: a command and its exact output. */
struct story_step {
    const char *cmd;
    const char *expect;
};

static void run_story(struct harness *h, const struct story_step *steps, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        const char *got = run(h, steps[i].cmd);
        if (strcmp(got, steps[i].expect) != 0)
            fail_msg("step %zu '%s':\n-- expected --\n%s\n-- got --\n%s", i, steps[i].cmd,
                     steps[i].expect, got);
    }
}

/* A worker drains while it holds splits: it hands back those it never started, which another
 * task leases next, and keeps the ones it produced until consumers have received them; only then
 * does its GetSplits say end. Every split is finished exactly once and the iteration ends. */
static void test_drain_story(void **unused)
{
    (void)unused;
    static const struct story_step steps[] = {
        {"splits 1 4 req=1", "splits_leased id=1 ref=1 ref2=1 seqs=[0,1,2,3]\n"
                             "=> end=0 seqs=[0,1,2,3]"},
        {"hb a:1 1 drain", "worker_draining id=1\n=> worker=1"},
        /* 0 and 1 were produced; 2 and 3 never started. */
        {"splits 1 4 req=2 ret=2,3", "splits_returned ref=1 ref2=1 seqs=[2,3]\n=> end=0"},
        /* Its reply was lost: the retry plans nothing more. */
        {"splits 1 4 req=2 ret=2,3", "=> end=0"},
        {"splits 2 3 req=1", "splits_leased id=1 ref=1 ref2=2 seqs=[2,3,4]\n"
                             "=> end=0 seqs=[2,3,4]"},
        {"splits 1 4 req=3", "=> end=0"},
        {"done 1 0,2",
         "splits_finished ref=1 ref2=1 seqs=[0]\nsplits_finished ref=1 ref2=2 seqs=[2]\n=>"},
        {"splits 1 4 req=4", "=> end=0"},
        {"done 1 1", "splits_finished ref=1 ref2=1 seqs=[1]\n=>"},
        {"splits 1 4 req=5", "=> end=1"},
        {"hb a:1 1 fin=1", "task_finished id=1\n=> worker=1"},
        {"splits 2 8 req=2", "splits_leased id=2 ref=1 ref2=2 seqs=[5,6,7]\n"
                             "=> end=0 seqs=[5,6,7]"},
        {"done 1 3,4,5,6,7", "splits_finished ref=1 ref2=2 seqs=[3,4,5,6,7]\n=>"},
        {"splits 2 8 req=3", "=> end=1"},
        {"hb b:1 1 fin=2", "task_finished id=2\niteration_finished id=1\n=> worker=2"},
    };
    struct harness h;
    harness_init(&h);
    run_script(&h, DIST8);
    run_story(&h, steps, sizeof steps / sizeof steps[0]);
    const struct st_iteration *it = state_iteration(&h.s, 1);
    assert_int_equal(it->splits_finished, 8);
    assert_int_equal(it->state, ST_ITER_FINISHED);
    replay_through_records(&h);
    harness_release(&h);
}

/* A task's splits handed back after a lost reply (plan_return_task_splits) go to the pool; a
 * consumer may still report them received from there (SPLITS_FINISHED with no task), and the rest
 * are leased to the other task. The journal's encoding carries the pool finish. */
static void test_return_story(void **unused)
{
    (void)unused;
    static const struct story_step steps[] = {
        {"splits 1 3", "splits_leased ref=1 ref2=1 seqs=[0,1,2]\n=> end=0 seqs=[0,1,2]"},
        {"back 1", "splits_returned ref=1 ref2=1 seqs=[0,1,2]\n=>"},
        {"back 1", "=>"},
        {"done 1 1", "splits_finished ref=1 seqs=[1]\n=>"},
        {"splits 2 8", "splits_leased ref=1 ref2=2 seqs=[0,2,3,4,5,6,7]\n"
                       "=> end=0 seqs=[0,2,3,4,5,6,7]"},
        {"splits 1 8", "=> end=0"},
        {"done 1 0,1,2,3,4,5,6,7", "splits_finished ref=1 ref2=2 seqs=[0,2,3,4,5,6,7]\n=>"},
        {"splits 1 8", "=> end=1"},
    };
    struct harness h;
    harness_init(&h);
    run_script(&h, DIST8);
    run_story(&h, steps, sizeof steps / sizeof steps[0]);
    char buf[512];
    assert_string_equal(places(&h.s, 1, buf, sizeof buf),
                        "cursor=8 finished=8 leased=0 pool=[] task1=[] task2=[]");
    assert_int_equal(replay_through_records(&h), 1);
    harness_release(&h);
}

/* Which worker's heartbeat reply each update changes: the shell lets a heartbeat that changes
 * nothing answer once those are durable (st_update_worker). */
static void test_update_worker(void **unused)
{
    (void)unused;
    struct harness h;
    harness_init(&h);
    run_script(&h, DIST8);
    const struct st_task *t2 = state_task(&h.s, 2);
    assert_non_null(t2);
    uint64_t w2 = t2->worker_id;
    assert_true(w2 != 0);
    static const struct {
        enum st_update_type type;
        uint64_t id, ref, ref2;
        bool of_task2; /* the answer is task 2's worker */
        uint64_t want;
    } cases[] = {
        {ST_TASK_CREATED, 9, 1, 2, false, 2},      {ST_TASK_FINISHED, 2, 0, 0, true, 0},
        {ST_TASK_REMOVED, 2, 1, 0, true, 0},       {ST_TASK_REMOVED, 77, 1, 0, false, 0},
        {ST_WORKER_REGISTERED, 5, 0, 0, false, 5}, {ST_WORKER_REMOVED, 1, 0, 0, false, 1},
        {ST_WORKER_DRAINING, 2, 0, 0, false, 2},   {ST_SPLITS_LEASED, 1, 1, 1, false, 0},
        {ST_SPLITS_FINISHED, 0, 1, 1, false, 0},   {ST_SPLITS_RETURNED, 0, 1, 1, false, 0},
        {ST_ITERATION_CREATED, 3, 1, 0, false, 0}, {ST_ITERATION_FINISHED, 1, 0, 0, false, 0},
        {ST_ITERATION_GC, 1, 0, 0, false, 0},      {ST_ITERATION_FAILED, 1, 0, 0, false, 0},
        {ST_CLIENT_ACQUIRED, 4, 1, 0, false, 0},   {ST_CLIENT_RELEASED, 4, 0, 0, false, 0},
        {ST_JOB_CREATED, 2, 0, 0, false, 0},       {ST_DATASET_REGISTERED, 0, 0, 0, false, 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        struct st_update u;
        memset(&u, 0, sizeof u);
        u.type = cases[i].type;
        u.id = cases[i].id;
        u.ref = cases[i].ref;
        u.ref2 = cases[i].ref2;
        uint64_t want = cases[i].of_task2 ? w2 : cases[i].want;
        if (st_update_worker(&h.s, &u) != want)
            fail_msg("case %zu (%s): worker %" PRIu64 ", want %" PRIu64, i, st_update_name(u.type),
                     st_update_worker(&h.s, &u), want);
    }
    harness_release(&h);
}

/* SPLITS_FINISHED with no task names splits of the pool of a distributed iteration, sorted, at
 * least one; anything else is refused and changes nothing. */
static void test_pool_finished_apply(void **unused)
{
    (void)unused;
    static const struct {
        const char *name;
        enum st_update_type type;
        uint64_t ref;
        uint64_t seqs[3];
        size_t nseqs;
        int rc;
    } cases[] = {
        {"a seq not in the pool", ST_SPLITS_FINISHED, 1, {2}, 1, SLUICE_ERR_CORRUPT},
        {"one of two not in the pool", ST_SPLITS_FINISHED, 1, {0, 2}, 2, SLUICE_ERR_CORRUPT},
        {"a seq beyond the cursor", ST_SPLITS_FINISHED, 1, {7}, 1, SLUICE_ERR_CORRUPT},
        {"unsorted", ST_SPLITS_FINISHED, 1, {1, 0}, 2, SLUICE_ERR_CORRUPT},
        {"repeated", ST_SPLITS_FINISHED, 1, {0, 0}, 2, SLUICE_ERR_CORRUPT},
        {"empty", ST_SPLITS_FINISHED, 1, {0}, 0, SLUICE_ERR_CORRUPT},
        {"unknown iteration", ST_SPLITS_FINISHED, 9, {0}, 1, SLUICE_ERR_CORRUPT},
        {"a parallel iteration", ST_SPLITS_FINISHED, 2, {0}, 1, SLUICE_ERR_CORRUPT},
        {"returning to no task", ST_SPLITS_RETURNED, 1, {0}, 1, SLUICE_ERR_CORRUPT},
        {"leasing to no task", ST_SPLITS_LEASED, 1, {0}, 1, SLUICE_ERR_CORRUPT},
        {"both pool entries", ST_SPLITS_FINISHED, 1, {0, 1}, 2, 0},
        {"one pool entry", ST_SPLITS_FINISHED, 1, {1}, 1, 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        struct harness h;
        harness_init(&h);
        /* Iteration 1 (distributed) has 0 and 1 in its pool and 2 leased to task 2; iteration 2
         * is parallel. */
        run_script(&h, DIST8 "splits 1 2\nsplits 2 1\nback 1\njob 1");
        char buf[256];
        assert_string_equal(places(&h.s, 1, buf, sizeof buf),
                            "cursor=3 finished=0 leased=1 pool=[0,1] task1=[] task2=[2]");
        struct st_update u;
        memset(&u, 0, sizeof u);
        u.type = cases[i].type;
        u.ref = cases[i].ref;
        u.seqs.v = (uint64_t *)cases[i].seqs;
        u.seqs.n = cases[i].nseqs;
        uint64_t before = state_digest(&h.s);
        int rc = state_apply(&h.s, &u);
        if (rc != cases[i].rc)
            fail_msg("case '%s': apply returned %d", cases[i].name, rc);
        if (rc != 0) {
            assert_int_equal(state_digest(&h.s), before);
        } else {
            const struct st_iteration *it = state_iteration(&h.s, 1);
            assert_int_equal(it->splits_finished, cases[i].nseqs);
            assert_int_equal(it->pool.n, 2 - cases[i].nseqs);
            assert_false(state_split_finished(&h.s, 1, 2));
            for (size_t k = 0; k < cases[i].nseqs; k++)
                assert_true(state_split_finished(&h.s, 1, cases[i].seqs[k]));
        }
        check_invariants(&h.s);
        harness_release(&h);
    }
}

/* The shell plans several requests into one list before applying it, so a plan may append to a
 * list that already holds updates and must grow it. A request both reporting finished splits and
 * handing others back then gives the same updates as on an empty list. */
static void test_returning_onto_a_full_list(void **unused)
{
    (void)unused;
    for (size_t pending = 0; pending < 20; pending++) {
        struct harness h;
        harness_init(&h);
        run_script(&h, DRAIN);
        for (size_t i = 0; i < pending; i++)
            assert_non_null(st_update_list_push(&h.ups, ST_CLIENT_RELEASED));
        const uint64_t fin[] = {0, 1}, ret[] = {1, 2};
        struct plan_splits_request sr = {.task_id = 1,
                                         .request_seq = 2,
                                         .finished = fin,
                                         .nfinished = 2,
                                         .returned = ret,
                                         .nreturned = 2,
                                         .max = 4};
        struct plan_splits_result lease = {.end = true};
        char err[256];
        assert_int_equal(plan_get_splits(&h.s, &sr, &lease, &h.ups, err, sizeof err), 0);
        assert_int_equal(h.ups.n, pending + 2);
        struct buf b = {0};
        format_update(&b, &h.ups.v[pending]);
        format_update(&b, &h.ups.v[pending + 1]);
        if (strcmp(b.s, "splits_finished ref=1 ref2=1 seqs=[0,1]\n"
                        "splits_returned ref=1 ref2=1 seqs=[2]\n") != 0)
            fail_msg("with %zu updates pending:\n%s", pending, b.s);
        assert_false(lease.end); /* it still holds 3 */
        assert_int_equal(lease.nseqs, 0);
        free(lease.seqs);
        harness_release(&h);
    }
}

/* random_op, plus consumers' reports, returned task splits, and draining workers handing back
 * what they never started. */
static void random_settle_op(struct harness *h, uint64_t *x)
{
    const struct state *s = &h->s;
    char cmd[512];
    int n;
    switch (pick(x, 12)) {
    case 0:
    case 1:
    case 2: {
        /* A consumer heartbeat finishing a few splits, some of them anywhere. */
        if (s->niterations == 0)
            return;
        const struct st_iteration *it = &s->iterations[pick(x, s->niterations)];
        n = snprintf(cmd, sizeof cmd, "done %" PRIu64, it->id);
        const char *sep = " ";
        for (uint64_t k = pick(x, 5); k > 0 && n < 400; k--) {
            n += snprintf(cmd + n, sizeof cmd - (size_t)n, "%s%" PRIu64, sep,
                          pick(x, it->split_cursor + 2));
            sep = ",";
        }
        break;
    }
    case 3: {
        if (s->ntasks == 0)
            return;
        snprintf(cmd, sizeof cmd, "back %" PRIu64, s->tasks[pick(x, s->ntasks)].id);
        break;
    }
    case 4: {
        if (s->nworkers == 0)
            return;
        const struct st_worker *w = &s->workers[pick(x, s->nworkers)];
        snprintf(cmd, sizeof cmd, "hb %s %" PRIu64 " drain", w->address, w->incarnation);
        break;
    }
    case 5:
    case 6: {
        /* A request handing back some of the task's splits (and a stray seq), reporting others
         * finished, as the next of its numbers. */
        if (s->ntasks == 0)
            return;
        const struct st_task *t = &s->tasks[pick(x, s->ntasks)];
        n = snprintf(cmd, sizeof cmd, "splits %" PRIu64 " %d req=%" PRIu64, t->id, (int)pick(x, 4),
                     t->last_request + 1);
        const char *fsep = " fin=", *rsep = " ret=";
        char rets[256] = "";
        size_t rn = 0;
        for (size_t i = 0; i < t->leased.n && n < 300 && rn < 200; i++) {
            uint64_t k = pick(x, 4);
            if (k == 0) {
                n += snprintf(cmd + n, sizeof cmd - (size_t)n, "%s%" PRIu64, fsep, t->leased.v[i]);
                fsep = ",";
            } else if (k == 1) {
                rn += (size_t)snprintf(rets + rn, sizeof rets - rn, "%s%" PRIu64, rsep,
                                       t->leased.v[i]);
                rsep = ",";
            }
        }
        if (pick(x, 4) == 0)
            rn += (size_t)snprintf(rets + rn, sizeof rets - rn, "%s%" PRIu64, rsep, pick(x, 9));
        snprintf(cmd + n, sizeof cmd - (size_t)n, "%s", rets);
        break;
    }
    default:
        random_op(h, x);
        return;
    }
    run(h, cmd);
}

/* Long random runs with the new operations: replayed through the journal's encoding, the same
 * digest at every step, every split finished once, and snapshots that decode to the same state. */
static void test_random_settle_replay(void **unused)
{
    (void)unused;
    size_t from_pool = 0;
    for (uint64_t seed = 1; seed <= 8; seed++)
        from_pool += random_run(seed * 0xc2b2ae3d27d4eb4full, random_settle_op, true);
    /* The runs must finish splits from the pool, not only from tasks. */
    assert_true(from_pool >= 8);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_plan_cases),
        cmocka_unit_test(test_resume_cases),
        cmocka_unit_test(test_save_cases),
        cmocka_unit_test(test_worker_keys),
        cmocka_unit_test(test_local_workers),
        cmocka_unit_test(test_iteration_keys),
        cmocka_unit_test(test_plan_repetition),
        cmocka_unit_test(test_gc_rows),
        cmocka_unit_test(test_round_epochs),
        cmocka_unit_test(test_status_json_rounds),
        cmocka_unit_test(test_status_json_bad_names),
        cmocka_unit_test(test_status_json_pipeline_preview),
        cmocka_unit_test(test_apply_refuses),
        cmocka_unit_test(test_apply_last_ids),
        cmocka_unit_test(test_lost_replies),
        cmocka_unit_test(test_random_replay),
        cmocka_unit_test(test_mode_names),
        cmocka_unit_test(test_status_json),
        cmocka_unit_test(test_heartbeat_interval),
        cmocka_unit_test(test_settle_plan_cases),
        cmocka_unit_test(test_splits_finished_mix),
        cmocka_unit_test(test_drain_story),
        cmocka_unit_test(test_return_story),
        cmocka_unit_test(test_update_worker),
        cmocka_unit_test(test_pool_finished_apply),
        cmocka_unit_test(test_splits_finished_each),
        cmocka_unit_test(test_random_settle_replay),
        cmocka_unit_test(test_returning_onto_a_full_list),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
