#include "log.h"

#include "error.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

static const char *log_part = "sluice";
static enum log_level log_min = LOG_INFO;
static const char *const level_names[] = {"debug", "info", "warn", "error", "off"};

void log_init(const char *part, enum log_level level)
{
    log_part = part;
    log_min = level;
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

int log_enabled(enum log_level level)
{
    return level >= log_min && level < LOG_OFF;
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
    fprintf(stderr, "%s %s: %s\n", level_names[level], log_part, line);
}
