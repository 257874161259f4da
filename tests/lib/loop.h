/* Bounded runs of a libuv loop in tests: a deadline timer, running until a condition holds (or
 * failing the test when the deadline passes first), running for a while, and closing a loop that
 * must have nothing left on it. */
#ifndef SLUICE_TESTS_LIB_LOOP_H
#define SLUICE_TESTS_LIB_LOOP_H

#include <stdbool.h>
#include <stdint.h>
#include <uv.h>

/* A timer that sets expired after its time; closed once its handle has closed. */
struct deadline {
    uv_timer_t timer;
    bool expired, closed;
};

/* Starts d on loop: d->expired becomes true ms from now (while the loop runs). */
void deadline_start(uv_loop_t *loop, struct deadline *d, uint64_t ms);

/* Closes d's timer and runs loop (without blocking) until it has closed. */
void deadline_stop(uv_loop_t *loop, struct deadline *d);

/* Runs loop until cond holds, failing the test (naming the caller's file and line and cond) if it
 * does not within ms. cond is evaluated between turns of the loop. */
#define RUN_UNTIL(loop, cond, ms)                                                                  \
    do {                                                                                           \
        struct deadline d_;                                                                        \
        deadline_start((loop), &d_, (ms));                                                         \
        while (!(cond) && !d_.expired)                                                             \
            uv_run((loop), UV_RUN_ONCE);                                                           \
        deadline_stop((loop), &d_);                                                                \
        if (!(cond))                                                                               \
            fail_msg("%s:%d: timed out waiting for %s", __FILE__, __LINE__, #cond);                \
    } while (0)

/* Runs loop for ms, whatever happens. */
void run_for(uv_loop_t *loop, uint64_t ms);

/* Runs what is left to run on loop once, then asserts that nothing is left (no handle, no
 * request) and that it closes. */
void loop_finish(uv_loop_t *loop);

/* A callback that sets *(bool *)user. */
void set_flag(void *user);

#endif
