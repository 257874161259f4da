/* Leveled logging to stderr, one line per event: "LEVEL part: message".
 *
 * The level and the part name are process-wide, set once at startup by main(), unless the calling
 * thread has its own: an embedded server (include/sluice/server.h) gives its loop thread its
 * part and level with log_thread_init, so several servers in one process each log under their
 * own name and level. log_write may be called from any thread (each line is written with one
 * fprintf, which stdio locks). A message holding control characters or bytes that are not UTF-8
 * (names peers sent) is written with those bytes escaped as \xNN (common/names.h), so every event
 * is exactly one line. */
#ifndef SLUICE_COMMON_LOG_H
#define SLUICE_COMMON_LOG_H

enum log_level { LOG_DEBUG = 0, LOG_INFO = 1, LOG_WARN = 2, LOG_ERROR = 3, LOG_OFF = 4 };

/* Sets the process's part name (e.g. "sluice-worker") and minimum level. Call before threads. */
void log_init(const char *part, enum log_level level);

/* Sets the part name and level of the calling thread only, overriding log_init's there; part
 * must outlive the thread's logging. */
void log_thread_init(const char *part, enum log_level level);

/* Parses "debug", "info", "warn", "error" or "off". Returns 0, or SLUICE_ERR_INVALID. */
int log_level_parse(const char *text, enum log_level *out);
/* The name log_level_parse accepts for level ("info"). */
const char *log_level_name(enum log_level level);

int log_enabled(enum log_level level);

void log_write(enum log_level level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#define log_debug(...) log_write(LOG_DEBUG, __VA_ARGS__)
#define log_info(...) log_write(LOG_INFO, __VA_ARGS__)
#define log_warn(...) log_write(LOG_WARN, __VA_ARGS__)
#define log_error(...) log_write(LOG_ERROR, __VA_ARGS__)

#endif
