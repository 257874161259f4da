#include "progress.h"

#include <string.h>
#include <time.h>

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* 950, 12.3k, 4.56M, 7.89G */
static void human(char *buf, size_t len, double v)
{
    if (v < 1e3)
        snprintf(buf, len, "%.0f", v);
    else if (v < 1e6)
        snprintf(buf, len, "%.3gk", v / 1e3);
    else if (v < 1e9)
        snprintf(buf, len, "%.3gM", v / 1e6);
    else
        snprintf(buf, len, "%.3gG", v / 1e9);
}

/* 0:07, 12:34, 1:02:03 */
static void clock_text(char *buf, size_t len, double seconds)
{
    uint64_t s = seconds > 0 ? (uint64_t)(seconds + 0.5) : 0;
    if (s >= 3600)
        snprintf(buf, len, "%llu:%02llu:%02llu", (unsigned long long)(s / 3600),
                 (unsigned long long)(s / 60 % 60), (unsigned long long)(s % 60));
    else
        snprintf(buf, len, "%llu:%02llu", (unsigned long long)(s / 60),
                 (unsigned long long)(s % 60));
}

void progress_format(char *buf, size_t len, uint64_t elements, uint64_t bytes, double seconds,
                     uint64_t done, uint64_t total)
{
    char n[32], rate[32], elapsed[32];
    human(n, sizeof n, (double)elements);
    double secs = seconds > 1e-6 ? seconds : 1e-6;
    human(rate, sizeof rate, (double)elements / secs);
    clock_text(elapsed, sizeof elapsed, seconds);
    int k = snprintf(buf, len, "%s elements  %s/s  %.1f MB/s  %s", n, rate,
                     (double)bytes / secs / 1e6, elapsed);
    if (total > 0 && k > 0 && (size_t)k < len) {
        double frac = (double)done / (double)total;
        if (frac > 1)
            frac = 1;
        if (done > 0 && done < total) {
            char eta[32];
            clock_text(eta, sizeof eta, seconds * (1 - frac) / frac);
            snprintf(buf + k, len - (size_t)k, "  %.0f%% ETA %s", 100 * frac, eta);
        } else {
            snprintf(buf + k, len - (size_t)k, "  %.0f%%", 100 * frac);
        }
    }
}

void progress_start(struct progress *p, enum progress_mode mode, FILE *out)
{
    memset(p, 0, sizeof *p);
    p->mode = mode;
    p->out = out;
    p->start_ns = p->last_ns = p->checked_ns = now_ns();
    p->stride = 1;
    p->next_check = 1;
    p->bytes_check = PROGRESS_CHECK_BYTES;
}

static void draw(struct progress *p, uint64_t now, uint64_t done, uint64_t total, bool final)
{
    char line[200];
    progress_format(line, sizeof line, p->elements, p->bytes, (double)(now - p->start_ns) / 1e9,
                    done, total);
    if (p->mode == PROGRESS_LIVE) {
        size_t n = strlen(line);
        /* Overwrite the last line, blanking what is left of a longer one. */
        fprintf(p->out, "\r%s%*s%s", line, p->drawn > n ? (int)(p->drawn - n) : 0, "",
                final ? "\n" : "");
        p->drawn = n;
    } else {
        fprintf(p->out, "sluice: read %s\n", line);
    }
    fflush(p->out);
    p->last_ns = now;
}

bool progress_element(struct progress *p, uint64_t nbytes)
{
    p->elements++;
    p->bytes += nbytes;
    if (p->mode == PROGRESS_OFF)
        return false;
    if (p->elements < p->next_check && p->bytes < p->bytes_check)
        return false;
    uint64_t now = now_ns();
    /* Aim at a clock read every millisecond or so, whatever the element rate. */
    if (now - p->checked_ns < 1000000u && p->stride < PROGRESS_MAX_STRIDE)
        p->stride *= 2;
    else if (now - p->checked_ns > 20000000u && p->stride > 1)
        p->stride /= 2;
    p->checked_ns = now;
    p->next_check = p->elements + p->stride;
    p->bytes_check = p->bytes + PROGRESS_CHECK_BYTES;
    uint64_t every = p->mode == PROGRESS_LIVE ? PROGRESS_LIVE_MS : PROGRESS_LINES_MS;
    return now - p->last_ns >= every * 1000000u;
}

void progress_draw(struct progress *p, uint64_t done, uint64_t total)
{
    draw(p, now_ns(), done, total, false);
}

void progress_clear(struct progress *p)
{
    if (p->mode != PROGRESS_LIVE || p->drawn == 0)
        return;
    fprintf(p->out, "\r%*s\r", (int)p->drawn, "");
    fflush(p->out);
    p->drawn = 0;
}

void progress_finish(struct progress *p, uint64_t done, uint64_t total)
{
    if (p->mode != PROGRESS_OFF)
        draw(p, now_ns(), done, total, true);
}
