#include "why.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Appends to out's paragraph; what does not fit is cut. */
static void say(struct why_result *out, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void say(struct why_result *out, const char *fmt, ...)
{
    size_t n = strlen(out->text);
    if (n + 1 >= sizeof out->text)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(out->text + n, sizeof out->text - n, fmt, ap);
    va_end(ap);
}

static double percent(double share)
{
    return share * 100.0;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* The median of v[0..n) (n >= 1), sorting v. */
static double median(double *v, size_t n)
{
    qsort(v, n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

/* Adds the stages of w into sums (by name, at most STATUS_STAGES_MAX * 4 names). */
static size_t add_stages(struct status_stage *sums, size_t n, size_t cap,
                         const struct why_worker *w)
{
    for (size_t i = 0; i < w->nstages; i++) {
        const struct status_stage *s = &w->stages[i];
        size_t k = 0;
        while (k < n && strcmp(sums[k].name, s->name) != 0)
            k++;
        if (k == n) {
            if (n == cap)
                continue;
            sums[n] = *s;
            sums[n++].seconds = 0;
        }
        sums[k].seconds += s->seconds;
    }
    return n;
}

/* The stage with the most seconds of sums[0..n) into out (ties: the first). */
static void dominant(struct why_result *out, const struct status_stage *sums, size_t n)
{
    double total = 0;
    size_t best = n;
    for (size_t i = 0; i < n; i++) {
        total += sums[i].seconds;
        if (best == n || sums[i].seconds > sums[best].seconds)
            best = i;
    }
    if (best == n || total <= 0)
        return;
    out->has_stage = true;
    snprintf(out->stage, sizeof out->stage, "%s", sums[best].name);
    out->stage_share = sums[best].seconds / total;
}

#define WHY_STAGE_SUMS (STATUS_STAGES_MAX * 4)

void why_attribute(const struct why_input *in, struct why_result *out)
{
    memset(out, 0, sizeof *out);
    /* Consumers: the mean wait share, the slowest by rate. */
    double sum = 0;
    size_t nshare = 0, slowest = in->nconsumers;
    for (size_t i = 0; i < in->nconsumers; i++) {
        const struct status_consumer *c = &in->consumers[i];
        if (c->has_share) {
            sum += c->wait_share;
            nshare++;
        }
        if (slowest == in->nconsumers ||
            c->elements_per_second < in->consumers[slowest].elements_per_second)
            slowest = i;
    }
    if (nshare > 0) {
        out->has_wait = true;
        out->wait_share = sum / (double)nshare;
        out->input_bound = out->wait_share >= WHY_INPUT_BOUND_SHARE;
    }
    if (in->nconsumers >= 2) {
        out->has_consumer = true;
        out->slowest_consumer = in->consumers[slowest].client_id;
        out->consumer_rate = in->consumers[slowest].elements_per_second;
    }
    /* Workers: the slowest against the median. */
    const struct why_worker *slow = NULL;
    if (in->nworkers >= 2) {
        double *rates = malloc(in->nworkers * sizeof *rates);
        if (rates) {
            for (size_t i = 0; i < in->nworkers; i++) {
                rates[i] = in->workers[i].rate;
                if (!slow || in->workers[i].rate < slow->rate)
                    slow = &in->workers[i];
            }
            double med = median(rates, in->nworkers);
            free(rates);
            /* While most workers served nothing over the window there is no straggler to tell
             * apart (a job starting, or one whose readers stopped). */
            if (med > 0) {
                out->has_worker = true;
                out->slowest_worker = slow->address;
                out->worker_ratio = slow->rate / med;
            } else {
                slow = NULL;
            }
        }
    }
    /* The dominant stage: the slowest worker's, else the job's. */
    struct status_stage sums[WHY_STAGE_SUMS];
    size_t nsums = 0;
    if (slow)
        nsums = add_stages(sums, 0, WHY_STAGE_SUMS, slow);
    if (nsums == 0) {
        slow = NULL;
        for (size_t i = 0; i < in->nworkers; i++)
            nsums = add_stages(sums, nsums, WHY_STAGE_SUMS, &in->workers[i]);
    }
    dominant(out, sums, nsums);

    /* The paragraph. */
    say(out, "job %" PRIu64, in->job_id);
    if (in->job_name && in->job_name[0])
        say(out, " (%s)", in->job_name);
    if (!out->has_wait)
        say(out, ": no trainer has reported its wait yet");
    else
        say(out, " is %s: trainers wait %.0f %% of the time",
            out->input_bound ? "input-bound" : "not input-bound", percent(out->wait_share));
    if (out->has_consumer)
        say(out, "; the slowest consumer is client %" PRIu64 " (%.1f elements/s)",
            out->slowest_consumer, out->consumer_rate);
    if (out->has_worker)
        say(out, "; worker %s runs at %.2f of the median of %zu workers", out->slowest_worker,
            out->worker_ratio, in->nworkers);
    else if (in->nworkers == 1)
        say(out, "; its one worker, %s, serves %.1f elements/s", in->workers[0].address,
            in->workers[0].rate);
    if (out->has_stage)
        say(out, "; %s time goes to %s (%.0f %%)",
            slow || in->nworkers == 1 ? "its" : "the workers'", out->stage,
            percent(out->stage_share));
    say(out, ".");
}
