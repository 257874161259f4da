/* The dispatcher core's test harness (lib/state_harness.h). */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "lib/state_harness.h"

#include "lib/rng.h"

#include "common/error.h"
#include "dispatcher/update_codec.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- formatting updates ---------------------------------------------------------------------- */

void harness_printf(struct harness_buf *b, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(b->s + b->n, sizeof b->s - b->n, fmt, ap);
    va_end(ap);
    assert_true(n >= 0 && (size_t)n < sizeof b->s - b->n);
    b->n += (size_t)n;
}

static void format_plan(struct harness_buf *b, const struct split_plan *p)
{
    harness_printf(b, " plan=(len=%" PRIu64 ",size=%" PRIu64 ",per_pass=%" PRIu64 ",passes=",
                   p->source_len, p->split_size, p->per_pass);
    if (p->passes == UINT64_MAX)
        harness_printf(b, "inf");
    else
        harness_printf(b, "%" PRIu64, p->passes);
    for (size_t i = 0; i < p->npaths; i++)
        harness_printf(b, "%s%s", i == 0 ? ",paths=" : "|", p->paths[i]);
    harness_printf(b, ")");
}

/* One line per update: its type, then every field that is set, in a fixed order. */
void harness_format_update(struct harness_buf *b, const struct st_update *u)
{
    harness_printf(b, "%s", st_update_name(u->type));
    if (u->id)
        harness_printf(b, " id=%" PRIu64, u->id);
    if (u->ref)
        harness_printf(b, " ref=%" PRIu64, u->ref);
    if (u->ref2)
        harness_printf(b, " ref2=%" PRIu64, u->ref2);
    if (u->name[0])
        harness_printf(b, " name='%s'", u->name);
    if (u->name2[0])
        harness_printf(b, " name2='%s'", u->name2);
    if (u->address[0])
        harness_printf(b, " address='%s'", u->address);
    if (u->incarnation)
        harness_printf(b, " inc=%" PRIu64, u->incarnation);
    if (u->type == ST_JOB_CREATED)
        harness_printf(b, " mode=%s", mode_name((enum sluice_mode)u->mode));
    if (u->num_consumers)
        harness_printf(b, " consumers=%" PRIu32, u->num_consumers);
    if (u->deterministic)
        harness_printf(b, " det");
    if (u->xtc_bytes)
        harness_printf(b, " xtc=%" PRIu64, u->xtc_bytes);
    if (u->target_workers)
        harness_printf(b, " target=%s",
                       target_workers_name((enum sluice_target_workers)u->target_workers));
    if (u->host_id[0])
        harness_printf(b, " host='%s'", u->host_id);
    if (u->labels)
        harness_printf(b, " labels='%s'", u->labels);
    if (u->task_slots)
        harness_printf(b, " slots=%" PRIu32, u->task_slots);
    if (u->selector)
        harness_printf(b, " selector='%s'", u->selector);
    if (u->job_weight && u->job_weight != 1)
        harness_printf(b, " weight=%g", u->job_weight);
    if (u->min_workers)
        harness_printf(b, " min=%" PRIu32, u->min_workers);
    if (u->max_workers)
        harness_printf(b, " max=%" PRIu32, u->max_workers);
    if (u->compression)
        harness_printf(b, " comp=%d", u->compression);
    if (u->split_size)
        harness_printf(b, " split=%" PRIu64, u->split_size);
    if (u->def)
        harness_printf(b, " def='%.*s'", (int)u->def_len, (const char *)u->def);
    if (u->text)
        harness_printf(b, " text='%s'", u->text);
    if (u->type == ST_ITERATION_CREATED)
        harness_printf(b, " dist=%d", u->distributed);
    if (u->start)
        harness_printf(b, " start=%" PRIu64, u->start);
    if (u->distributed)
        format_plan(b, &u->plan);
    if (u->seqs.n) {
        harness_printf(b, " seqs=[");
        for (size_t i = 0; i < u->seqs.n; i++)
            harness_printf(b, "%s%" PRIu64, i ? "," : "", u->seqs.v[i]);
        harness_printf(b, "]");
    }
    if (u->key.set)
        harness_printf(b, " key=%.*s", ST_KEY_LEN, (const char *)u->key.b);
    harness_printf(b, "\n");
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
    /* So v holds each task once (distinct ids, each with its own key, as many as the tasks),
     * and a key's tasks are its run in v: range() must give exactly that run. */
    for (size_t i = 0; i < n;) {
        size_t end = i + 1;
        while (end < n && v[end].key == v[i].key)
            end++;
        size_t m;
        const struct st_task_ref *mine = range(s, v[i].key, &m);
        assert_int_equal(m, end - i);
        for (size_t k = 0; k < m; k++) {
            assert_int_equal(mine[k].key, v[i].key);
            assert_int_equal(mine[k].task_id, v[i + k].task_id);
        }
        i = end;
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

void harness_check_invariants(const struct state *s)
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
        assert_true(sv->path[0] == '/' || strncmp(sv->path, "s3://", 5) == 0);
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

void harness_init(struct harness *h)
{
    memset(h, 0, sizeof *h);
    state_init(&h->s);
}

void harness_release(struct harness *h)
{
    state_release(&h->s);
    st_update_list_release(&h->ups);
    st_update_list_release(&h->record);
}

/* Applies the planned updates and moves them (with their ownership) to the record. */
void harness_commit(struct harness *h)
{
    for (size_t i = 0; i < h->ups.n; i++) {
        int rc = state_apply(&h->s, &h->ups.v[i]);
        if (rc != 0) {
            struct harness_buf b = {0};
            harness_format_update(&b, &h->ups.v[i]);
            fail_msg("apply %s failed: %d", b.s, rc);
        }
        struct st_update *r = st_update_list_push(&h->record, h->ups.v[i].type);
        assert_non_null(r);
        *r = h->ups.v[i];
    }
    h->ups.n = 0; /* ownership moved to the record */
    harness_check_invariants(&h->s);
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

/* total=N|inf: sets *plan to N one-element splits (inf: 2 per pass, forever) and returns plan;
 * NULL without total. */
static struct split_plan *opt_total(char **words, size_t nwords, struct split_plan *plan)
{
    const char *v = opt(words, nwords, "total");
    if (!v)
        return NULL;
    plan->split_size = 1;
    if (strcmp(v, "inf") == 0) {
        plan->source_len = plan->per_pass = 2;
        plan->passes = UINT64_MAX;
    } else {
        plan->source_len = plan->per_pass = strtoull(v, NULL, 10);
        plan->passes = 1;
    }
    return plan;
}

/* msg=A_B: "A B" into msg ('_' is a space); "" without msg. */
static void opt_msg(char **words, size_t nwords, char *msg, size_t len)
{
    const char *v = opt(words, nwords, "msg");
    snprintf(msg, len, "%s", v ? v : "");
    for (char *p = msg; *p; p++)
        if (*p == '_')
            *p = ' ';
}

const char *harness_run(struct harness *h, const char *line)
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
    char err[SLUICE_ERRMSG_SIZE] = "", outs[256] = "";
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
        const char *text = opt(words, nw, "text");
        rc = plan_register_dataset(&h->s, strcmp(words[1], "-") == 0 ? "" : words[1],
                                   (const uint8_t *)def, strlen(def), comp, split,
                                   text ? text : def, id_out, &h->ups, err, sizeof err);
        snprintf(outs, sizeof outs, "id=%s", id_out);
    } else if (strcmp(cmd, "job") == 0) {
        enum sluice_mode mode = SLUICE_PARALLEL_EPOCHS;
        if ((v = opt(words, nw, "mode")))
            assert_int_equal(mode_parse(v, &mode), 0);
        v = opt(words, nw, "consumers");
        uint32_t consumers = v ? (uint32_t)atoi(v) : 0;
        struct split_plan plan = {0}, *pp = opt_total(words, nw, &plan);
        char *paths[4];
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
        /* sel=S: the worker selector ('_' is a space); weight=W, min=N, max=N. */
        char selbuf[256];
        if ((v = opt(words, nw, "sel"))) {
            snprintf(selbuf, sizeof selbuf, "%s", v);
            for (char *p = selbuf; *p; p++)
                if (*p == '_')
                    *p = ' ';
            job.selector = selbuf;
        }
        if ((v = opt(words, nw, "weight")))
            job.weight = strtod(v, NULL);
        if ((v = opt(words, nw, "min")))
            job.min_workers = (uint32_t)strtoul(v, NULL, 10);
        if ((v = opt(words, nw, "max")))
            job.max_workers = (uint32_t)strtoul(v, NULL, 10);
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
        /* slots=N: the worker's task slots. */
        if ((v = opt(words, nw, "slots")))
            hb.task_slots = (uint32_t)strtoul(v, NULL, 10);
        /* labels=K=V;K=V: the worker's labels. */
        char labelbuf[512];
        const char *labels[LABELS_MAX + 2];
        if ((v = opt(words, nw, "labels"))) {
            snprintf(labelbuf, sizeof labelbuf, "%s", v);
            char *s4 = NULL;
            for (char *l = strtok_r(labelbuf, ";", &s4); l && hb.nlabels < LABELS_MAX + 2;
                 l = strtok_r(NULL, ";", &s4))
                labels[hb.nlabels++] = l;
            hb.labels = labels;
        }
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
        sr.pool_held = opt(words, nw, "held") != NULL;
        sr.share = opt(words, nw, "share") != NULL;
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
        char msg[SLUICE_ERRMSG_SIZE];
        opt_msg(words, nw, msg, sizeof msg);
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
        /* redo ITERATION SEQS [tasks=T1,T2]: the tasks whose productions the consumer saw. */
        uint64_t seqs[64], tasks[64];
        size_t n = nw > 2 ? parse_list(words[2], seqs, 64) : 0;
        const char *tv = opt(words, nw, "tasks");
        if (tv)
            assert_int_equal(parse_list(tv, tasks, 64), n);
        rc = plan_splits_redo(&h->s, strtoull(words[1], NULL, 10), seqs, tv ? tasks : NULL, n,
                              &h->ups, err, sizeof err);
    } else if (strcmp(cmd, "below") == 0) {
        snprintf(outs, sizeof outs, "below=%" PRIu64,
                 state_splits_finished_below(&h->s, strtoull(words[1], NULL, 10)));
        rc = 0;
    } else if (strcmp(cmd, "save") == 0) {
        /* save DATASET PATH [total=N|inf] [endless]: a save with a plan of N one-element splits
         * (none without total) of a pipeline that ends unless endless. */
        struct split_plan plan = {0}, *pp = opt_total(words, nw, &plan);
        uint64_t save_id = 0;
        rc = plan_save_start(&h->s, words[1], strcmp(words[2], "''") == 0 ? "" : words[2], pp,
                             opt(words, nw, "endless") != NULL, &save_id, &h->ups, err, sizeof err);
        snprintf(outs, sizeof outs, "save=%" PRIu64, save_id);
    } else if (strcmp(cmd, "saved") == 0) {
        rc = plan_save_finished(&h->s, strtoull(words[1], NULL, 10), &h->ups, err, sizeof err);
    } else if (strcmp(cmd, "savefail") == 0) {
        char msg[SLUICE_ERRMSG_SIZE];
        opt_msg(words, nw, msg, sizeof msg);
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
    } else if (strcmp(cmd, "waiting") == 0) {
        /* waiting ITERATION: why its tasks wait, as its readers hear it (plan_iteration_waiting).
         */
        char why[200];
        plan_iteration_waiting(&h->s, strtoull(words[1], NULL, 10), why, sizeof why);
        snprintf(outs, sizeof outs, "waiting='%s'", why);
        rc = 0;
    } else if (strcmp(cmd, "back") == 0) {
        rc = plan_return_task_splits(&h->s, strtoull(words[1], NULL, 10), &h->ups, err, sizeof err);
    } else {
        fail_msg("unknown command %s", cmd);
        return NULL;
    }
    if (rc < 0) {
        /* A refusal appends nothing. */
        assert_int_equal(h->ups.n, 0);
        harness_printf(&h->out, "error %s: %s", code_name(rc), err);
        return h->out.s;
    }
    for (size_t i = 0; i < h->ups.n; i++)
        harness_format_update(&h->out, &h->ups.v[i]);
    harness_printf(&h->out, "=>%s%s", outs[0] ? " " : "", outs);
    harness_commit(h);
    return h->out.s;
}

/* Runs every line of script; each must succeed. */
void harness_run_script(struct harness *h, const char *script)
{
    char copy[4096], *save = NULL;
    snprintf(copy, sizeof copy, "%s", script);
    for (char *line = strtok_r(copy, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
        const char *r = harness_run(h, line);
        if (strncmp(r, "error", 5) == 0)
            fail_msg("setup '%s' failed: %s", line, r);
    }
}

/* Runs each case on a fresh harness: the setup, then the command, whose output must be exactly
 * the expected text; a refusal leaves the state as it was. */
void harness_run_cases(const struct harness_case *cases, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        const struct harness_case *c = &cases[i];
        struct harness h;
        harness_init(&h);
        harness_run_script(&h, c->setup);
        uint64_t before = state_digest(&h.s);
        const char *got = harness_run(&h, c->cmd);
        if (strcmp(got, c->expect) != 0)
            fail_msg("case '%s':\n-- expected --\n%s\n-- got --\n%s", c->name, c->expect, got);
        if (strncmp(got, "error", 5) == 0)
            assert_int_equal(state_digest(&h.s), before);
        harness_release(&h);
    }
}

void harness_run_story(struct harness *h, const char *setup, const struct harness_step *steps,
                       size_t n)
{
    harness_run_script(h, setup);
    for (size_t i = 0; i < n; i++) {
        const char *got = harness_run(h, steps[i].cmd);
        if (strcmp(got, steps[i].expect) != 0)
            fail_msg("step %zu '%s':\n-- expected --\n%s\n-- got --\n%s", i, steps[i].cmd,
                     steps[i].expect, got);
    }
}

/* ---- checks ---------------------------------------------------------------------------------- */

void harness_record_copy(const struct st_update *u, struct st_update *out)
{
    uint8_t *b = NULL;
    size_t len = 0;
    char err[SLUICE_ERRMSG_SIZE];
    assert_int_equal(update_codec_encode(u, &b, &len), 0);
    int rc = update_codec_decode(b, len, out, err, sizeof err);
    free(b);
    if (rc != 0)
        fail_msg("decoding an encoded %s: %s", st_update_name(u->type), err);
    struct harness_buf want = {0}, got = {0};
    harness_format_update(&want, u);
    harness_format_update(&got, out);
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

void harness_check_snapshot(const struct state *s)
{
    uint8_t *b = NULL;
    size_t len = 0;
    char err[SLUICE_ERRMSG_SIZE];
    assert_int_equal(update_codec_snapshot_encode(s, &b, &len), 0);
    struct state back;
    int rc = update_codec_snapshot_decode(b, len, defs_of_state, (void *)s, &back, err, sizeof err);
    free(b);
    if (rc != 0)
        fail_msg("snapshot decode: %s", err);
    assert_int_equal(state_digest(&back), state_digest(s));
    harness_check_invariants(&back); /* the decoded snapshot built its indexes */
    state_release(&back);
}

/* Replays the harness's record, encoded and decoded as the journal stores it, onto a fresh
 * state: the same digest as live. Returns how many SPLITS_FINISHED with no task (a consumer's
 * report) it held. */
size_t harness_replay_through_records(const struct harness *h)
{
    struct state r;
    state_init(&r);
    size_t from_pool = 0;
    for (size_t i = 0; i < h->record.n; i++) {
        struct st_update copy;
        harness_record_copy(&h->record.v[i], &copy);
        from_pool += copy.type == ST_SPLITS_FINISHED && copy.ref2 == 0;
        assert_int_equal(state_apply(&r, &copy), 0);
        st_update_release(&copy);
    }
    assert_int_equal(state_digest(&r), state_digest(&h->s));
    state_release(&r);
    harness_check_snapshot(&h->s);
    return from_pool;
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
const char *harness_places(const struct state *s, uint64_t iteration_id, char *out, size_t len)
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

uint64_t harness_pick(uint64_t *x, uint64_t n)
{
    return n ? rng_next(x) % n : 0;
}
