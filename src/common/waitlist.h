/* Connections waiting for their handshake, in the order they arrived, watched by one timer: the
 * rpc server's (rpc_server.c) and the shared-memory listener's (shm_sock.c). Each owner decides
 * when an item is due (its deadline) and what closing an expired one means; the list only keeps
 * them in order and fires.
 *
 * The owner embeds struct waitlist and one struct waitlist_item per connection. The timer is due
 * no later than the earliest deadline; when it fires, every item past its deadline is taken off
 * the list and handed to expired, in arrival order. Loop thread only. */
#ifndef SLUICE_COMMON_WAITLIST_H
#define SLUICE_COMMON_WAITLIST_H

#include <stdbool.h>
#include <stdint.h>
#include <uv.h>

struct waitlist;

struct waitlist_item {
    struct waitlist_item *prev, *next;
    uint64_t since; /* loop time (ms) it was added */
    bool listed;
};

/* The loop time (ms) at which it is due; never sooner than its since plus the list's first_ms. */
typedef uint64_t (*waitlist_due_cb)(struct waitlist *wl, const struct waitlist_item *it);
/* it is past its deadline and already off the list; the owner closes what it stands for. The
 * callback may remove or add other items. */
typedef void (*waitlist_expired_cb)(struct waitlist *wl, struct waitlist_item *it);

struct waitlist {
    uv_timer_t timer; /* its data is the owner's (for its close callback) */
    struct waitlist_item *head, *tail;
    unsigned n;
    uint32_t first_ms; /* the shortest time an item may wait */
    waitlist_due_cb due;
    waitlist_expired_cb expired;
};

/* Sets up an empty list and its timer on loop. The owner closes wl->timer (uv_close) when done. */
void waitlist_init(uv_loop_t *loop, struct waitlist *wl, uint32_t first_ms, waitlist_due_cb due,
                   waitlist_expired_cb expired);
/* Appends it, stamped with the loop's time, and makes sure the timer is due by its deadline. */
void waitlist_add(struct waitlist *wl, struct waitlist_item *it);
/* Takes it off the list; nothing when it is not on it. */
void waitlist_remove(struct waitlist *wl, struct waitlist_item *it);

#endif
