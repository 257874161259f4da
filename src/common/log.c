#include "log.h"

#include "error.h"
#include "names.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

static const char *log_part = "sluice";
static enum log_level log_min = LOG_INFO;
static const char *const level_names[] = {"debug", "info", "warn", "error", "off"};
/* A thread's own part and level; NULL: the process-wide ones. */
static _Thread_local const char *thread_part;
static _Thread_local enum log_level thread_min;

void log_init(const char *part, enum log_level level)
{
    log_part = part;
    log_min = level;
}

void log_thread_init(const char *part, enum log_level level)
{
    thread_part = part;
    thread_min = level;
}

int log_level_parse(const char *text, enum log_level *out)
{
    for (int i = LOG_DEBUG; i <= LOG_OFF; i++) {
        if (strcmp(text, level_names[i]) == 0) {
            *out = (enum log_level)i;
            return 0;
        }
    }
    return SLUICE_ERR_INVALID;
}

const char *log_level_name(enum log_level level)
{
    return level_names[level];
}

int log_enabled(enum log_level level)
{
    return level >= (thread_part ? thread_min : log_min) && level < LOG_OFF;
}

void log_write(enum log_level level, const char *fmt, ...)
{
    if (!log_enabled(level))
        return;
    char line[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof(line), fmt, ap);
    va_end(ap);
    /* Messages quote names and text that peers sent: every line stays one line of valid UTF-8,
     * whatever bytes they hold (a newline in a worker address cannot forge a line). */
    char safe[sizeof(line) * 4];
    name_escape(line, safe, sizeof(safe));
    fprintf(stderr, "%s %s: %s\n", level_names[level], thread_part ? thread_part : log_part, safe);
}
