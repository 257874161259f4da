/* The RPC client's calls in flight (rpc_client_internal.h): a hash table by id, a binary min-heap
 * by deadline served by one timer per client, and the waiting, sent and withdrawn lists; the
 * timer fails the calls whose deadline passed. */
#include "rpc_client_internal.h"

#include "error.h"

#include <inttypes.h>
#include <stdlib.h>

static size_t bucket_of(const struct rpc_client *cl, uint64_t id)
{
    /* Ids are sequential, so a multiplicative hash spreads them over all the buckets. */
    return (size_t)((id * 0x9e3779b97f4a7c15ull) >> 32) & (cl->nbuckets - 1);
}

int rpc_client_hash_insert(struct rpc_client *cl, struct call *call)
{
    if (cl->ncalls >= cl->nbuckets) {
        size_t n = cl->nbuckets * 2;
        struct call **b = calloc(n, sizeof *b);
        if (b == NULL)
            return SLUICE_ERR_NOMEM;
        struct call **old = cl->buckets;
        size_t oldn = cl->nbuckets;
        cl->buckets = b;
        cl->nbuckets = n;
        for (size_t i = 0; i < oldn; i++) {
            while (old[i]) {
                struct call *c = old[i];
                old[i] = c->hash_next;
                size_t k = bucket_of(cl, c->id);
                c->hash_next = b[k];
                b[k] = c;
            }
        }
        free(old);
    }
    size_t k = bucket_of(cl, call->id);
    call->hash_next = cl->buckets[k];
    cl->buckets[k] = call;
    cl->ncalls++;
    return 0;
}

struct call *rpc_client_hash_find(const struct rpc_client *cl, uint64_t id)
{
    struct call *c = cl->buckets[bucket_of(cl, id)];
    while (c && c->id != id)
        c = c->hash_next;
    return c;
}

void rpc_client_hash_remove(struct rpc_client *cl, struct call *call)
{
    struct call **p = &cl->buckets[bucket_of(cl, call->id)];
    while (*p != call)
        p = &(*p)->hash_next;
    *p = call->hash_next;
    cl->ncalls--;
}

static bool heap_less(const struct rpc_client *cl, size_t a, size_t b)
{
    return cl->heap[a]->deadline < cl->heap[b]->deadline;
}

static void heap_swap(struct rpc_client *cl, size_t a, size_t b)
{
    struct call *t = cl->heap[a];
    cl->heap[a] = cl->heap[b];
    cl->heap[b] = t;
    cl->heap[a]->heap_index = a;
    cl->heap[b]->heap_index = b;
}

static void heap_up(struct rpc_client *cl, size_t i)
{
    while (i > 0 && heap_less(cl, i, (i - 1) / 2)) {
        heap_swap(cl, i, (i - 1) / 2);
        i = (i - 1) / 2;
    }
}

static void heap_down(struct rpc_client *cl, size_t i)
{
    for (;;) {
        size_t l = 2 * i + 1, r = l + 1, m = i;
        if (l < cl->heap_len && heap_less(cl, l, m))
            m = l;
        if (r < cl->heap_len && heap_less(cl, r, m))
            m = r;
        if (m == i)
            return;
        heap_swap(cl, i, m);
        i = m;
    }
}

int rpc_client_heap_push(struct rpc_client *cl, struct call *call)
{
    if (cl->heap_len == cl->heap_cap) {
        size_t n = cl->heap_cap ? cl->heap_cap * 2 : 64;
        struct call **h = realloc(cl->heap, n * sizeof *h);
        if (h == NULL)
            return SLUICE_ERR_NOMEM;
        cl->heap = h;
        cl->heap_cap = n;
    }
    call->heap_index = cl->heap_len;
    cl->heap[cl->heap_len++] = call;
    heap_up(cl, call->heap_index);
    return 0;
}

void rpc_client_heap_remove(struct rpc_client *cl, struct call *call)
{
    size_t i = call->heap_index;
    if (i == NOT_IN_HEAP)
        return;
    call->heap_index = NOT_IN_HEAP;
    size_t last = --cl->heap_len;
    if (i == last)
        return;
    cl->heap[i] = cl->heap[last];
    cl->heap[i]->heap_index = i;
    heap_up(cl, i);
    heap_down(cl, cl->heap[i]->heap_index);
}

void rpc_client_list_append(struct call_list *l, struct call *c)
{
    c->next = NULL;
    c->prev = l->tail;
    if (l->tail)
        l->tail->next = c;
    else
        l->head = c;
    l->tail = c;
}

void rpc_client_list_remove(struct call_list *l, struct call *c)
{
    if (c->prev)
        c->prev->next = c->next;
    else
        l->head = c->next;
    if (c->next)
        c->next->prev = c->prev;
    else
        l->tail = c->prev;
    c->prev = c->next = NULL;
}

static void on_call_timer(uv_timer_t *t);

/* Makes the call timer fire no later than the earliest deadline. A timer already due by then is
 * left as it is: it may fire early, find nothing due and point itself at the next deadline. So a
 * call and its reply cost no timer operation in the usual case, where each new call's deadline
 * comes after those before it (a loop with thousands of clients and timers paid two heap updates
 * of the loop's timers a request). With no call left the timer stays but no longer keeps the loop
 * running (uv_unref). */
void rpc_client_rearm_call_timer(struct rpc_client *cl)
{
    if (cl->closing)
        return;
    if (cl->heap_len == 0) {
        uv_unref((uv_handle_t *)&cl->call_timer);
        return;
    }
    uv_ref((uv_handle_t *)&cl->call_timer);
    uint64_t now = uv_now(cl->loop), deadline = cl->heap[0]->deadline;
    if (deadline < now)
        deadline = now;
    if (uv_is_active((uv_handle_t *)&cl->call_timer) &&
        now + uv_timer_get_due_in(&cl->call_timer) <= deadline)
        return;
    uv_timer_start(&cl->call_timer, on_call_timer, deadline - now, 0);
}

/* Takes a call out of every structure and frees its unsent frame; the caller then runs its
 * callback and frees it. */
void rpc_client_call_detach(struct rpc_client *cl, struct call *call)
{
    rpc_client_hash_remove(cl, call);
    rpc_client_heap_remove(cl, call);
    rpc_client_list_remove(call->sent        ? &cl->sent
                           : call->withdrawn ? &cl->withdrawn
                                             : &cl->waiting,
                           call);
    conn_frame_free(call->frame);
    call->frame = NULL;
    conn_frame_free(call->copy);
    call->copy = NULL;
}

void rpc_client_call_finish(struct call *call, int status, const char *msg,
                            const Sluice__Envelope *reply)
{
    call->cb(status, msg, reply, call->user);
    free(call);
}

/* Fails every call of list with status and msg. The list is taken over first, so callbacks that
 * issue new calls do not extend this loop. */
void rpc_client_fail_list(struct rpc_client *cl, struct call_list *list, int status,
                          const char *msg)
{
    struct call *c = list->head;
    list->head = list->tail = NULL;
    while (c) {
        struct call *next = c->next;
        rpc_client_hash_remove(cl, c);
        rpc_client_heap_remove(cl, c);
        conn_frame_free(c->frame);
        c->frame = NULL;
        conn_frame_free(c->copy);
        c->copy = NULL;
        rpc_client_call_finish(c, status, msg, NULL);
        c = next;
    }
    rpc_client_rearm_call_timer(cl);
}

static void on_call_timer(uv_timer_t *t)
{
    struct rpc_client *cl = t->data;
    uint64_t now = uv_now(cl->loop);
    while (!cl->closing && cl->heap_len > 0 && cl->heap[0]->deadline <= now) {
        struct call *call = cl->heap[0];
        char msg[SLUICE_ERRMSG_SIZE];
        int status = SLUICE_ERR_TIMEOUT;
        if (call->withdrawn) {
            status = SLUICE_ERR_CANCELLED;
            rpc_client_text(msg, sizeof msg, "withdrawn before it was sent to %s", cl->address);
        } else if (call->sent)
            rpc_client_text(msg, sizeof msg, "no reply from %s within %" PRIu32 " ms",
                            rpc_client_current_address(cl), call->timeout_ms);
        else
            rpc_client_text(msg, sizeof msg, "no connection to %s within %" PRIu32 " ms%s%s",
                            cl->address, call->timeout_ms, cl->why[0] ? ": " : "", cl->why);
        rpc_client_call_detach(cl, call);
        rpc_client_call_finish(call, status, msg, NULL);
    }
    rpc_client_rearm_call_timer(cl);
    if (!cl->closing)
        rpc_client_follow_done(cl);
}
