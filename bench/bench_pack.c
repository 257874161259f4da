/* bench_pack: pack()'s cost and padding.
 *
 * Documents of a heavy-tailed length distribution (as tokenized web text: most a few hundred
 * tokens, some thousands; mean about 600) are held in memory and read by a source iterator; the
 * baseline is that source alone (each document copied into an element), in the same run. Then
 * pack(SEQ_LEN) best_fit and first_fit over several windows: tokens per second, packed sequences
 * per second, the padding fraction, and the rate as a ratio of the baseline's.
 *
 *   bench_pack [DOCS] [SEQ_LEN] [ROUNDS]     defaults: 200000 2048 3 (the best round counts) */
#include "pipeline/element.h"
#include "pipeline/pack.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

struct corpus {
    int32_t *tokens;
    uint32_t *len;
    uint64_t *off;
    size_t n;
    uint64_t total;
};

struct src {
    struct pipe_iter base;
    const struct corpus *c;
    size_t next;
};

static int src_next(struct pipe_iter *it, struct sluice_element *out)
{
    struct src *s = (struct src *)it;
    if (s->next == s->c->n)
        return 0;
    size_t i = s->next++;
    size_t bytes = (size_t)s->c->len[i] * 4;
    if (pipe_elem_resize(out, 1))
        return -1;
    struct pipe_tensor *t = &out->t[0];
    t->dtype = SLUICE_INT32;
    if (pipe_tensor_reserve(t, bytes, 0))
        return -1;
    t->rank = 1;
    t->shape[0] = s->c->len[i];
    t->len = bytes;
    memcpy(t->data, s->c->tokens + s->c->off[i], bytes);
    return 1;
}

static void src_destroy(struct pipe_iter *it)
{
    free(it);
}

static const struct pipe_iter_ops src_ops = {src_next, src_destroy};

static uint64_t rng_state = 1;
static uint32_t rng(void)
{
    rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
    return (uint32_t)(rng_state >> 33);
}

static uint32_t doc_len(void)
{
    uint32_t r = rng() % 1000;
    if (r < 600)
        return 20 + rng() % 400;
    if (r < 900)
        return 400 + rng() % 1000;
    if (r < 990)
        return 1400 + rng() % 2600;
    return 4000 + rng() % 12000;
}

struct result {
    double secs;
    uint64_t seqs, padded;
};

/* One pass: the source alone (seq_len 0) or through pack. */
static int run(const struct corpus *c, uint32_t seq_len, bool first_fit, uint32_t window,
               struct result *r)
{
    struct pipe_ctx ctx = {0};
    struct src *s = calloc(1, sizeof *s);
    if (!s)
        return -1;
    s->base.ops = &src_ops;
    s->base.ctx = &ctx;
    s->c = c;
    struct pipe_iter *it = &s->base;
    if (seq_len && pipe_pack_open(seq_len, first_fit, window, &s->base, &ctx, &it))
        return -1;
    struct sluice_element e;
    pipe_elem_init(&e);
    memset(r, 0, sizeof *r);
    double t0 = now_s();
    int rc;
    uint64_t check = 0;
    while ((rc = pipe_next(it, &e)) == 1) {
        r->seqs++;
        if (seq_len) {
            const int32_t *seg = (const int32_t *)(const void *)e.t[1].data;
            /* Padding sits at the end: count back from there. */
            uint32_t k = seq_len;
            while (k > 0 && seg[k - 1] == 0)
                k--;
            r->padded += seq_len - k;
            check += k;
        } else {
            check += (uint64_t)e.t[0].shape[0];
        }
    }
    r->secs = now_s() - t0;
    it->ops->destroy(it);
    pipe_elem_release(&e);
    if (rc != 0 || check != c->total) {
        fprintf(stderr, "bench_pack: rc %d, %" PRIu64 " tokens out of %" PRIu64 "\n", rc, check,
                c->total);
        return -1;
    }
    return 0;
}

int main(int argc, char **argv)
{
    size_t docs = argc > 1 ? strtoull(argv[1], NULL, 10) : 200000;
    uint32_t seq_len = argc > 2 ? (uint32_t)strtoul(argv[2], NULL, 10) : 2048;
    int rounds = argc > 3 ? atoi(argv[3]) : 3;
    if (docs == 0 || rounds < 1 || pipe_pack_problem(seq_len, 1)) {
        fprintf(stderr, "usage: bench_pack [DOCS] [SEQ_LEN] [ROUNDS]\n");
        return 2;
    }
    struct corpus c = {0};
    c.n = docs;
    c.len = malloc(docs * sizeof *c.len);
    c.off = malloc(docs * sizeof *c.off);
    for (size_t i = 0; i < docs; i++) {
        c.len[i] = doc_len();
        c.off[i] = c.total;
        c.total += c.len[i];
    }
    c.tokens = malloc(c.total * sizeof *c.tokens);
    if (!c.len || !c.off || !c.tokens)
        return 1;
    for (uint64_t i = 0; i < c.total; i++)
        c.tokens[i] = (int32_t)(rng() % 100000);
    printf("bench_pack: %zu documents, %" PRIu64 " tokens (mean %.0f), sequences of %u, best of "
           "%d rounds\n",
           docs, c.total, (double)c.total / (double)docs, seq_len, rounds);
    const struct {
        const char *name;
        bool first_fit;
        uint32_t window;
    } cases[] = {{"best_fit, window 16", false, 16},
                 {"first_fit, window 16", true, 16},
                 {"best_fit, window 64", false, 64},
                 {"first_fit, window 64", true, 64},
                 {"best_fit, window 256", false, 256}};
    const size_t ncases = sizeof cases / sizeof *cases;
    double best_base = 1e30, best[8];
    struct result res[8];
    for (size_t k = 0; k < ncases; k++)
        best[k] = 1e30;
    /* Rounds alternate the baseline and every case, so drift hits them alike. */
    for (int r = 0; r < rounds; r++) {
        struct result b;
        if (run(&c, 0, false, 1, &b))
            return 1;
        if (b.secs < best_base)
            best_base = b.secs;
        for (size_t k = 0; k < ncases; k++) {
            struct result x;
            if (pipe_pack_problem(seq_len, cases[k].window) ||
                run(&c, seq_len, cases[k].first_fit, cases[k].window, &x))
                return 1;
            if (x.secs < best[k])
                best[k] = x.secs;
            res[k] = x;
        }
    }
    double base_rate = (double)c.total / best_base;
    printf("%-22s %12s %12s %9s %10s\n", "", "M tokens/s", "seqs/s", "padding", "vs source");
    printf("%-22s %12.1f %12s %9s %10s\n", "source alone", base_rate / 1e6, "-", "-", "1.00");
    for (size_t k = 0; k < ncases; k++) {
        double rate = (double)c.total / best[k];
        printf("%-22s %12.1f %12.0f %8.2f%% %10.2f\n", cases[k].name, rate / 1e6,
               (double)res[k].seqs / best[k],
               100.0 * (double)res[k].padded / ((double)res[k].seqs * seq_len), rate / base_rate);
    }
    free(c.tokens);
    free(c.len);
    free(c.off);
    return 0;
}
