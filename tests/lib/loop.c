#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "lib/loop.h"

#include <string.h>

static void on_deadline(uv_timer_t *t)
{
    ((struct deadline *)t)->expired = true;
}

static void on_deadline_closed(uv_handle_t *h)
{
    ((struct deadline *)h)->closed = true;
}

void deadline_start(uv_loop_t *loop, struct deadline *d, uint64_t ms)
{
    memset(d, 0, sizeof *d);
    uv_timer_init(loop, &d->timer);
    uv_timer_start(&d->timer, on_deadline, ms, 0);
}

void deadline_stop(uv_loop_t *loop, struct deadline *d)
{
    uv_close((uv_handle_t *)&d->timer, on_deadline_closed);
    while (!d->closed)
        uv_run(loop, UV_RUN_NOWAIT);
}

void run_for(uv_loop_t *loop, uint64_t ms)
{
    struct deadline d;
    deadline_start(loop, &d, ms);
    while (!d.expired)
        uv_run(loop, UV_RUN_ONCE);
    deadline_stop(loop, &d);
}

void loop_finish(uv_loop_t *loop)
{
    uv_run(loop, UV_RUN_NOWAIT);
    assert_false(uv_loop_alive(loop));
    assert_int_equal(uv_loop_close(loop), 0);
}

void set_flag(void *user)
{
    *(bool *)user = true;
}
