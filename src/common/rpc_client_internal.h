/* What the RPC client's files share (rpc_client.c: connections and the public calls;
 * rpc_client_calls.c: the calls in flight, by id, by deadline and by state): the client's
 * struct, its calls, and the steps on them. Loop thread only, like rpc_client.h. */
#ifndef SLUICE_COMMON_RPC_CLIENT_INTERNAL_H
#define SLUICE_COMMON_RPC_CLIENT_INTERNAL_H

#include "rpc_client.h"

#include "auth.h"
#include "conn.h"
#include "common/error.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#define NOT_IN_HEAP SIZE_MAX

enum client_state {
    CLIENT_IDLE,       /* no connection, no attempt under way */
    CLIENT_BACKOFF,    /* backoff_timer runs until the next attempt */
    CLIENT_RESOLVING,  /* uv_getaddrinfo under way */
    CLIENT_CONNECTING, /* uv_tcp_connect under way */
    CLIENT_HANDSHAKE,  /* connected and our Hello sent; the server's is awaited */
    CLIENT_CONNECTED,
    CLIENT_CLOSING, /* the TCP handle is closing; its close callback decides what is next */
};

struct call {
    uint64_t id;
    uint64_t deadline; /* loop time in ms, or 0 without a timeout */
    uint32_t timeout_ms;
    size_t heap_index;        /* position in the heap, or NOT_IN_HEAP */
    struct call *hash_next;   /* chain in the hash bucket */
    struct call *prev, *next; /* in the waiting or the sent list */
    bool sent;
    bool withdrawn;           /* rpc_client_withdraw: never to be written, failing soon */
    struct conn_frame *frame; /* the packed request until it is written */
    /* A copy of the request while it is written and unanswered, so a replica that is not the
     * leader (SLUICE_ERR_NOT_LEADER) has it re-sent elsewhere unchanged. */
    struct conn_frame *copy;
    unsigned redirects; /* NOT_LEADER answers it had */
    rpc_reply_cb cb;
    void *user;
};

struct call_list {
    struct call *head, *tail;
};

struct rpc_client {
    struct conn conn; /* valid from CONNECTING through CLOSING */
    uv_loop_t *loop;
    char address[RPC_ADDRESS_LIST_MAX]; /* as given */
    /* The addresses of the list, "HOST:PORT,..." of them for messages, and the one attempts go
     * to: addrs[index], or a leader named by a replica (which need not be in the list). */
    struct rpc_address addrs[RPC_MAX_ADDRESSES];
    size_t naddrs, index;
    bool off_list; /* current is a leader named by a replica, not addrs[index] */
    char list_text[RPC_ADDRESS_LIST_MAX];
    struct rpc_address current;
    char tls_name[256]; /* "": verify against current.host */
    Sluice__Role role;
    uint64_t incarnation;
    uint32_t max_frame, connect_timeout_ms, backoff_min_ms, backoff_max_ms;
    rpc_connect_cb on_connect;
    void *user;
    struct bufpool *pool;
    const struct security_ctx *sec;
    struct auth_hs hs; /* the handshake of the current connection */

    enum client_state state;
    uv_getaddrinfo_t gai;
    bool gai_busy; /* gai is in flight, possibly abandoned by a timeout */
    uv_connect_t connect_req;
    uv_timer_t connect_timer, backoff_timer, call_timer;
    uint32_t attempt; /* failed attempts since the last handshake */
    uint64_t rng;
    uint64_t peer_incarnation;
    /* opts.local: dial the in-process server first (inproc.h); local_now: this connection is
     * one. */
    bool local, local_now;
    uint64_t local_incarnation;
    /* opts.shm_bytes; shm_now: this connection is a shared-memory one; shm_skip: the last
     * shared-memory attempt failed before its handshake, so the next dials TCP (cleared by any
     * completed handshake). */
    uint64_t shm_bytes;
    bool shm_now, shm_skip;

    /* Why the last attempt or connection failed; calls waiting for a connection quote it. */
    char why[SLUICE_ERRMSG_SIZE];
    /* What the close callback fails calls with: lost_code for the calls written on the
     * connection, and every waiting call too when fail_waiting is set (version mismatch). */
    int lost_code;
    char lost_msg[SLUICE_ERRMSG_SIZE];
    bool fail_waiting;
    /* The last attempt failed authentication: the next one waits for a backoff. */
    bool auth_failed;
    uint64_t auth_logged_ms, auth_unlogged, auth_failures;
    bool auth_ever_logged;
    char auth_logged_msg[SLUICE_ERRMSG_SIZE]; /* the reason last logged */

    /* A replica answered NOT_LEADER: no call is written on this connection any more, and once
     * the calls written on it are answered it closes and the next attempt goes to follow_to
     * after follow_delay_ms. */
    bool following;
    struct rpc_address follow_to;
    uint32_t follow_delay_ms;
    char follow_why[SLUICE_ERRMSG_SIZE]; /* "ADDRESS: message[; following LEADER]" */

    uint64_t next_id;
    struct call **buckets;
    size_t nbuckets, ncalls;
    struct call **heap;
    size_t heap_len, heap_cap;
    struct call_list waiting, sent, withdrawn;

    unsigned busy; /* handles not yet closed and requests not yet called back */
    bool closing;
    void (*close_cb)(void *user);
    void *close_user;
};

/* snprintf for messages, where cutting a long host name short is the right outcome. */
void rpc_client_text(char *buf, size_t len, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* The calls by id (a hash table): insert returns 0 or SLUICE_ERR_NOMEM; find returns NULL for an
 * id not in flight. */
int rpc_client_hash_insert(struct rpc_client *cl, struct call *call);
struct call *rpc_client_hash_find(const struct rpc_client *cl, uint64_t id);
void rpc_client_hash_remove(struct rpc_client *cl, struct call *call);
/* The calls with a deadline (a binary min-heap): push returns 0 or SLUICE_ERR_NOMEM; remove
 * leaves a call not in the heap alone. */
int rpc_client_heap_push(struct rpc_client *cl, struct call *call);
void rpc_client_heap_remove(struct rpc_client *cl, struct call *call);
/* The waiting, sent and withdrawn lists. */
void rpc_client_list_append(struct call_list *l, struct call *c);
void rpc_client_list_remove(struct call_list *l, struct call *c);
/* Points the call timer at the earliest deadline. */
void rpc_client_rearm_call_timer(struct rpc_client *cl);
/* Takes a call out of every structure and frees its unsent frame; the caller then runs its
 * callback (rpc_client_call_finish) and frees it. */
void rpc_client_call_detach(struct rpc_client *cl, struct call *call);
/* Runs the call's callback and frees it. */
void rpc_client_call_finish(struct call *call, int status, const char *msg,
                            const Sluice__Envelope *reply);
/* Closes a connection that follows a leader once no call written on it waits for its reply. */
void rpc_client_follow_done(struct rpc_client *cl);
/* Fails every call of list with status and msg, then rearms the call timer. */
void rpc_client_fail_list(struct rpc_client *cl, struct call_list *list, int status,
                          const char *msg);

#endif
