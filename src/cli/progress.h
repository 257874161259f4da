/* The progress display of `sluice read`: a live line on a terminal, or plain lines for logs. */
#ifndef SLUICE_CLI_PROGRESS_H
#define SLUICE_CLI_PROGRESS_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

enum progress_mode {
    PROGRESS_OFF,   /* --quiet, or standard error is not a terminal */
    PROGRESS_LIVE,  /* a terminal: one line redrawn in place */
    PROGRESS_LINES, /* --progress: a plain line every PROGRESS_LINES_MS */
};

#define PROGRESS_LIVE_MS 250
#define PROGRESS_LINES_MS 5000
#define PROGRESS_MAX_STRIDE 4096
#define PROGRESS_CHECK_BYTES (1u << 20)

struct progress {
    enum progress_mode mode;
    FILE *out;
    uint64_t start_ns, last_ns;
    uint64_t elements, bytes;
    /* The clock is read once every `stride` elements (or MiB), not per element: the stride
     * grows while elements come fast and shrinks while they come slowly. */
    uint64_t stride, next_check, bytes_check, checked_ns;
    size_t drawn; /* characters of the live line drawn last */
};

/* Starts timing. */
void progress_start(struct progress *p, enum progress_mode mode, FILE *out);

/* One element of nbytes value bytes was read. Returns whether a report is due: the caller then
 * calls progress_draw (the split counts are asked for only then). */
bool progress_element(struct progress *p, uint64_t nbytes);

/* Draws a report; done and total are the splits handed out whole and the epoch's splits (total
 * 0: unknown). */
void progress_draw(struct progress *p, uint64_t done, uint64_t total);

/* Before another line goes to the same stream: on a terminal, blanks the live line (it is drawn
 * again with the next report). */
void progress_clear(struct progress *p);

/* The read ended (or stopped): the final figures, and a newline after a live line. */
void progress_finish(struct progress *p, uint64_t done, uint64_t total);

/* The text of one report into buf: "1.23M elements  456k/s  12.3 MB/s  0:27  37% ETA 0:46"
 * (the fraction and ETA only when total is known). Pure. */
void progress_format(char *buf, size_t len, uint64_t elements, uint64_t bytes, double seconds,
                     uint64_t done, uint64_t total);

#endif
