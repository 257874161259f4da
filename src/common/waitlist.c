#include "waitlist.h"

#include <stddef.h>

static void on_timer(uv_timer_t *t)
{
    struct waitlist *wl = (struct waitlist *)((char *)t - offsetof(struct waitlist, timer));
    uint64_t now = uv_now(t->loop);
    struct waitlist_item *it = wl->head;
    while (it) {
        struct waitlist_item *following = it->next;
        if (wl->due(wl, it) <= now) {
            waitlist_remove(wl, it);
            wl->expired(wl, it);
            /* expired may have changed the list: start over from its head (what is left of the
             * items scanned so far is not due). */
            following = wl->head;
        }
        it = following;
    }
    uint64_t next = UINT64_MAX;
    for (it = wl->head; it; it = it->next) {
        uint64_t due = wl->due(wl, it);
        if (due < next)
            next = due;
    }
    if (next != UINT64_MAX)
        uv_timer_start(&wl->timer, on_timer, next > now ? next - now : 0, 0);
}

void waitlist_init(uv_loop_t *loop, struct waitlist *wl, uint32_t first_ms, waitlist_due_cb due,
                   waitlist_expired_cb expired)
{
    wl->head = wl->tail = NULL;
    wl->n = 0;
    wl->first_ms = first_ms;
    wl->due = due;
    wl->expired = expired;
    /* A timer on a live loop cannot fail to initialize. */
    uv_timer_init(loop, &wl->timer);
}

void waitlist_add(struct waitlist *wl, struct waitlist_item *it)
{
    it->listed = true;
    it->since = uv_now(wl->timer.loop);
    it->next = NULL;
    it->prev = wl->tail;
    if (wl->tail)
        wl->tail->next = it;
    else
        wl->head = it;
    wl->tail = it;
    wl->n++;
    /* it may be due as soon as first_ms from now: the timer must be due no later. */
    if (!uv_is_active((uv_handle_t *)&wl->timer) || uv_timer_get_due_in(&wl->timer) > wl->first_ms)
        uv_timer_start(&wl->timer, on_timer, wl->first_ms, 0);
}

void waitlist_remove(struct waitlist *wl, struct waitlist_item *it)
{
    if (!it->listed)
        return;
    it->listed = false;
    if (it->prev)
        it->prev->next = it->next;
    else
        wl->head = it->next;
    if (it->next)
        it->next->prev = it->prev;
    else
        wl->tail = it->prev;
    it->prev = it->next = NULL;
    wl->n--;
}
