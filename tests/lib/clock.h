/* Time for tests: a monotonic clock to bound waits by, and a sleep. */
#ifndef SLUICE_TESTS_LIB_CLOCK_H
#define SLUICE_TESTS_LIB_CLOCK_H

/* CLOCK_MONOTONIC in milliseconds: only differences between two readings mean anything. */
long long now_ms(void);

/* Sleeps ms milliseconds (0 or less: returns at once), resuming after a signal. */
void sleep_ms(long ms);

#endif
