/* Leveled logging to stderr, one line per event: "LEVEL part: message".
 *
 * The level and the part name are process-wide and set once at startup by main(); log_write may
 * then be called from any thread (each line is written with one fprintf, which stdio locks). */
#ifndef SLUICE_COMMON_LOG_H
#define SLUICE_COMMON_LOG_H

enum log_level { LOG_DEBUG = 0, LOG_INFO = 1, LOG_WARN = 2, LOG_ERROR = 3, LOG_OFF = 4 };

/* Sets the process's part name (e.g. "sluice-worker") and minimum level. Call before threads. */
void log_init(const char *part, enum log_level level);

/* Parses "debug", "info", "warn", "error" or "off". Returns 0, or SLUICE_ERR_INVALID. */
int log_level_parse(const char *text, enum log_level *out);

int log_enabled(enum log_level level);

void log_write(enum log_level level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#define log_debug(...) log_write(LOG_DEBUG, __VA_ARGS__)
#define log_info(...) log_write(LOG_INFO, __VA_ARGS__)
#define log_warn(...) log_write(LOG_WARN, __VA_ARGS__)
#define log_error(...) log_write(LOG_ERROR, __VA_ARGS__)

#endif
