/* The RPC client of rpc_client.h: its connections and the public calls (rpc_client_calls.c keeps
 * the calls in flight).
 *
 * Happy path: the first call finds the client idle and starts an attempt: resolve the address
 * (numeric addresses skip the resolver), connect, send our Hello, wait for the server's, and
 * when both hold a token exchange proofs (auth.h). Calls made meanwhile wait, already packed, in
 * arrival order; once the handshake completes (the server has proved it holds the token) they
 * are written, then on_connect runs. Replies are matched to calls by id through a hash table.
 *
 * Failure modes: a failed attempt (resolution, connect, handshake, or the connect timeout) is
 * retried after an exponential backoff with full jitter for as long as calls wait; with none
 * waiting the client goes idle until the next call. A lost connection fails the calls written
 * on it with SLUICE_ERR_UNAVAILABLE (the server may or may not have acted on them); waiting calls
 * stay and trigger a new attempt. A version mismatch fails every call with SLUICE_ERR_VERSION.
 * A failed authentication (a wrong or missing token on either side, or a TLS failure reported by
 * conn.h as SLUICE_ERR_AUTH) fails every call, written or waiting, with SLUICE_ERR_AUTH and the
 * reason, logs it (at most once a minute while the reason stays the same), and makes the next
 * attempt wait for a backoff even when a call is made at once, so a misconfigured peer is retried
 * slowly and never silently. A malformed frame from the server, a second Hello, or a reply to an id
 * never issued closes the connection with one warning line; a reply to a call that already timed
 * out is dropped.
 *
 * With TLS (opts.sec), every connection is a TLS client connection (conn.h) that verifies the
 * server's certificate against the host part of the address, as given (a name or an IP address);
 * a TLS failure is logged as a warning and, like any lost connection, retried.
 *
 * Replicas (a list of addresses, the replicas of a dispatcher): the client talks to one current
 * address at a time. A failed attempt or a lost connection sends the next attempt to the next
 * address of the list, round robin. A reply Error of code SLUICE_ERR_NOT_LEADER means the replica
 * did nothing with the call: the call goes back to the waiting calls (its request was kept), no
 * further call is written on that connection, and once the calls written on it are answered it
 * closes and the next attempt goes to the leader the replica named (at once), or with none named
 * to the next address of the list (after backoff_min); a call written before the answer and
 * still unanswered after the connect timeout fails as on a lost connection. A call redirected
 * more than RPC_MAX_REDIRECTS times fails with SLUICE_ERR_UNAVAILABLE; its timeout runs
 * throughout. Only calls to a dispatcher (the role in its Hello) keep their request for this.
 * A connection to a replica whose peer's TCP acknowledges nothing for RPC_REPLICA_SILENCE_MS is
 * lost (a leader cut off from the network), so the calls move on too.
 *
 * Calls fail from the TCP handle's close callback rather than when the loss is noticed, so no
 * call's callback ever runs inside rpc_call. Timeouts use one timer per client set to the
 * earliest deadline of a binary min-heap, so each tick does work only for calls that expired. */
#include "rpc_client_internal.h"

#include "auth.h"
#include "backoff.h"
#include "conn.h"
#include "error.h"
#include "inproc.h"
#include "shm_region.h"
#include "shm_sock.h"
#include "log.h"
#include "security.h"
#include "tls.h"

#include <assert.h>
#include <errno.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

#define DEFAULT_CONNECT_TIMEOUT_MS 5000
#define DEFAULT_BACKOFF_MIN_MS 50
#define DEFAULT_BACKOFF_MAX_MS 2000
#define INITIAL_BUCKETS 64
/* At most one line a minute about failed authentications. */
#define AUTH_LOG_INTERVAL_MS 60000
/* The most NOT_LEADER answers one call follows before it fails. */
#define RPC_MAX_REDIRECTS 20

static const struct conn_ops client_conn_ops;

/* snprintf for messages, where cutting a long host name short is the right outcome. */
void rpc_client_text(char *buf, size_t len, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, len, fmt, ap);
    va_end(ap);
}
static void on_backoff_timer(uv_timer_t *t);

/* Makes a the current address: its place in the list, or off the list (a leader named by a
 * replica). */
static void go_to(struct rpc_client *cl, const struct rpc_address *a)
{
    for (size_t i = 0; i < cl->naddrs; i++) {
        if (cl->addrs[i].port == a->port && strcasecmp(cl->addrs[i].host, a->host) == 0) {
            cl->index = i;
            cl->off_list = false;
            cl->current = cl->addrs[i];
            return;
        }
    }
    cl->off_list = true;
    cl->current = *a;
}

/* The next attempt goes to the address after the current one's place in the list. */
static void next_address(struct rpc_client *cl)
{
    cl->index = (cl->index + 1) % cl->naddrs;
    cl->off_list = false;
    cl->current = cl->addrs[cl->index];
}

/* ---- connection lifecycle -------------------------------------------------------------------- */

static void maybe_finish_close(struct rpc_client *cl)
{
    if (!cl->closing || cl->busy > 0)
        return;
    void (*cb)(void *) = cl->close_cb;
    void *user = cl->close_user;
    assert(cl->ncalls == 0);
    free(cl->buckets);
    free(cl->heap);
    free(cl);
    if (cb)
        cb(user);
}

/* After a failure with no handle open: retry after a backoff while calls wait, else go idle. */
static void schedule_retry(struct rpc_client *cl)
{
    if (cl->closing)
        return;
    next_address(cl);
    /* After a failed authentication the backoff runs even with no call waiting, so calls made
     * meanwhile wait for it instead of hammering the server. */
    if (cl->waiting.head == NULL && !cl->auth_failed) {
        cl->state = CLIENT_IDLE;
        return;
    }
    cl->auth_failed = false;
    uint32_t delay = backoff_delay(cl->attempt, cl->backoff_min_ms, cl->backoff_max_ms,
                                   backoff_random(&cl->rng));
    if (cl->attempt < UINT32_MAX)
        cl->attempt++;
    cl->state = CLIENT_BACKOFF;
    uv_timer_start(&cl->backoff_timer, on_backoff_timer, delay, 0);
}

/* Ends the current connection or attempt. code and why describe it for the calls written on the
 * connection; the close callback fails them and schedules what comes next. */
static void lose_connection(struct rpc_client *cl, int code, const char *why)
{
    if (cl->state != CLIENT_CONNECTING && cl->state != CLIENT_HANDSHAKE &&
        cl->state != CLIENT_CONNECTED)
        return;
    rpc_client_text(cl->why, sizeof cl->why, "%s", why);
    rpc_client_text(cl->lost_msg, sizeof cl->lost_msg, "connection to %s lost: %s",
                    rpc_client_current_address(cl), why);
    cl->lost_code = code;
    /* A shared-memory connection that failed before its handshake completed (refused by the
     * worker, say): the next attempt dials TCP, so such a failure cannot keep the client off. */
    if (cl->shm_now && cl->state != CLIENT_CONNECTED)
        cl->shm_skip = true;
    uv_timer_stop(&cl->connect_timer);
    cl->state = CLIENT_CLOSING;
    conn_close(&cl->conn);
}

/* Logs a failed authentication: at once when its reason differs from the one logged last, else
 * at most once per AUTH_LOG_INTERVAL_MS. */
static void log_auth_failure(struct rpc_client *cl, const char *msg)
{
    uint64_t now = uv_now(cl->loop);
    cl->auth_unlogged++;
    if (cl->auth_ever_logged && now - cl->auth_logged_ms < AUTH_LOG_INTERVAL_MS &&
        strncmp(msg, cl->auth_logged_msg, sizeof cl->auth_logged_msg - 1) == 0)
        return;
    rpc_client_text(cl->auth_logged_msg, sizeof cl->auth_logged_msg, "%s", msg);
    /* A reader's calls fail with this very message, which its program reports; a worker's
     * dispatcher connection has nobody else to say it. */
    enum log_level level = cl->role == SLUICE__ROLE__ROLE_CLIENT ? LOG_DEBUG : LOG_WARN;
    if (cl->auth_unlogged > 1)
        log_write(level,
                  "rpc: %s: %s (%" PRIu64 " failures since the last line; at most one line a "
                  "minute)",
                  rpc_client_current_address(cl), msg, cl->auth_unlogged);
    else
        log_write(level, "rpc: %s: %s", rpc_client_current_address(cl), msg);
    cl->auth_unlogged = 0;
    cl->auth_logged_ms = now;
    cl->auth_ever_logged = true;
}

/* The server refused us outright (version, authentication), or we refused it: every call fails
 * with its reason. */
static void reject_connection(struct rpc_client *cl, int code, const char *msg)
{
    if (cl->state != CLIENT_CONNECTING && cl->state != CLIENT_HANDSHAKE &&
        cl->state != CLIENT_CONNECTED)
        return;
    if (code == SLUICE_ERR_AUTH) {
        cl->auth_failures++;
        log_auth_failure(cl, msg);
        cl->auth_failed = true;
    } else {
        log_warn("rpc: %s: %s", rpc_client_current_address(cl), msg);
    }
    lose_connection(cl, code, msg);
    /* The message goes to the caller as the server wrote it. */
    rpc_client_text(cl->lost_msg, sizeof cl->lost_msg, "%s", msg);
    cl->fail_waiting = true;
}

static void protocol_error(struct rpc_client *cl, const char *why)
{
    log_warn("rpc: %s: %s; closing the connection", rpc_client_current_address(cl), why);
    lose_connection(cl, SLUICE_ERR_UNAVAILABLE, why);
}

static void on_conn_closed(struct conn *c)
{
    struct rpc_client *cl = (struct rpc_client *)c;
    cl->busy--;
    if (cl->closing) {
        maybe_finish_close(cl);
        return;
    }
    assert(cl->state == CLIENT_CLOSING);
    char msg[sizeof cl->lost_msg];
    memcpy(msg, cl->lost_msg, sizeof msg);
    int code = cl->lost_code;
    bool all = cl->fail_waiting;
    bool following = cl->following;
    cl->fail_waiting = false;
    cl->following = false;

    /* Calls issued from these callbacks wait for the next connection. */
    rpc_client_fail_list(cl, &cl->sent, code, msg);
    if (all && !cl->closing)
        rpc_client_fail_list(cl, &cl->waiting, code, msg);
    if (cl->closing)
        return;
    cl->state = CLIENT_IDLE;
    if (following && !all) {
        /* Not a failure: the next attempt goes where the replica pointed. */
        go_to(cl, &cl->follow_to);
        if (cl->waiting.head == NULL)
            return;
        cl->state = CLIENT_BACKOFF;
        uv_timer_start(&cl->backoff_timer, on_backoff_timer, cl->follow_delay_ms, 0);
        return;
    }
    schedule_retry(cl);
}

/* Closes a connection that follows a leader once no call written on it waits for its reply. */
void rpc_client_follow_done(struct rpc_client *cl)
{
    if (cl->closing || !cl->following || cl->sent.head != NULL)
        return;
    if (cl->state == CLIENT_CONNECTED || cl->state == CLIENT_HANDSHAKE)
        lose_connection(cl, SLUICE_ERR_UNAVAILABLE, cl->follow_why);
}

static void on_follow_timeout(uv_timer_t *t)
{
    struct rpc_client *cl = t->data;
    /* A call written before the NOT_LEADER answer is still unanswered: it may or may not have
     * been acted on, so it fails as on any lost connection. */
    lose_connection(cl, SLUICE_ERR_UNAVAILABLE, cl->follow_why);
}

/* The replica at the current address is not the leader (reason says so, "ADDRESS: message"):
 * stop writing calls on this connection and decide where the next attempt goes. leader is the
 * leader it named, or NULL or "". redirects is how many times the call that got this answer has
 * been redirected (0 for a complaint about the connection): past the length of the list, a named
 * leader is tried after backoff_min too, so two replicas that name each other are not dialled in
 * a tight loop. */
static void follow_leader(struct rpc_client *cl, const char *leader, const char *reason,
                          unsigned redirects)
{
    if (!cl->following) {
        struct rpc_address to;
        char why[SLUICE_ERRMSG_SIZE];
        bool named =
            leader && *leader &&
            rpc_parse_address(leader, to.host, sizeof to.host, &to.port, why, sizeof why) == 0 &&
            !(to.port == cl->current.port && strcasecmp(to.host, cl->current.host) == 0);
        cl->following = true;
        if (named) {
            rpc_format_address(to.text, sizeof to.text, to.host, to.port);
            cl->follow_to = to;
            cl->follow_delay_ms = redirects > cl->naddrs ? cl->backoff_min_ms : 0;
            rpc_client_text(cl->follow_why, sizeof cl->follow_why, "%s; following %s", reason,
                            to.text);
        } else {
            if (leader && *leader)
                log_debug("rpc: %s: ignoring the leader it names, '%s'",
                          rpc_client_current_address(cl), leader);
            cl->follow_to = cl->addrs[(cl->index + 1) % cl->naddrs];
            cl->follow_delay_ms = cl->backoff_min_ms;
            rpc_client_text(cl->follow_why, sizeof cl->follow_why, "%s", reason);
        }
        log_debug("rpc: %s; next: %s", reason, cl->follow_to.text);
        /* Calls written before the answer get connect_timeout_ms to be answered. */
        if (cl->state == CLIENT_CONNECTED)
            uv_timer_start(&cl->connect_timer, on_follow_timeout, cl->connect_timeout_ms, 0);
    }
    rpc_client_follow_done(cl);
}

/* Writes one waiting call. Returns false when the connection broke. */
static bool send_call(struct rpc_client *cl, struct call *call)
{
    rpc_client_list_remove(&cl->waiting, call);
    call->sent = true;
    rpc_client_list_append(&cl->sent, call);
    struct conn_frame *f = call->frame;
    call->frame = NULL;
    /* Kept until the reply, for a dispatcher replica that answers NOT_LEADER (no other server
     * does, and the calls to workers are the many); without room the call is not re-sent. */
    if (call->copy == NULL && cl->hs.peer_role == SLUICE__ROLE__ROLE_DISPATCHER &&
        conn_frame_copy(f, &call->copy) != 0)
        call->copy = NULL;
    int rc = conn_write(&cl->conn, f);
    if (rc == 0)
        return true;
    char why[SLUICE_ERRMSG_SIZE];
    rpc_client_text(why, sizeof why, "write: %s", sluice_strerror(rc));
    lose_connection(cl, SLUICE_ERR_UNAVAILABLE, why);
    return false;
}

static void handshake_done(struct rpc_client *cl)
{
    uv_timer_stop(&cl->connect_timer);
    cl->shm_skip = false;
    cl->state = CLIENT_CONNECTED;
    cl->attempt = 0;
    cl->why[0] = '\0';
    cl->peer_incarnation = cl->hs.peer_incarnation;
    conn_set_max_frame(&cl->conn, 0);
    log_debug("rpc: connected to %s (incarnation %016" PRIx64 ")", rpc_client_current_address(cl),
              cl->peer_incarnation);
    /* Waiting calls go out in the order they were made. Calls made by on_connect follow. */
    while (cl->state == CLIENT_CONNECTED && cl->waiting.head) {
        if (!send_call(cl, cl->waiting.head))
            return;
    }
    if (cl->on_connect)
        cl->on_connect(cl, cl->peer_incarnation, cl->user);
}

static int error_status(const Sluice__Error *error)
{
    /* A server that sends no code, or a positive one, still reports a failure. */
    return error && error->code < 0 ? error->code : SLUICE_ERR_PROTOCOL;
}

/* A call's reply says the replica is not the leader: the call goes back to the waiting calls,
 * in the order they were made, to be written again where the client goes next; or, past
 * RPC_MAX_REDIRECTS (or without its request kept), fails with SLUICE_ERR_UNAVAILABLE. */
static void not_leader_reply(struct rpc_client *cl, struct call *call, const Sluice__Error *error)
{
    char reason[SLUICE_ERRMSG_SIZE], msg[SLUICE_ERRMSG_SIZE];
    rpc_client_text(reason, sizeof reason, "%s: %s", rpc_client_current_address(cl),
                    error->message ? error->message : "");
    call->redirects++;
    if (call->redirects > RPC_MAX_REDIRECTS || call->copy == NULL) {
        rpc_client_call_detach(cl, call);
        rpc_client_rearm_call_timer(cl);
        follow_leader(cl, error->leader, reason, call->redirects);
        rpc_client_text(msg, sizeof msg, "no dispatcher leader among %s: %s", cl->list_text,
                        reason);
        rpc_client_call_finish(call, SLUICE_ERR_UNAVAILABLE, msg, NULL);
        return;
    }
    rpc_client_list_remove(&cl->sent, call);
    call->sent = false;
    call->frame = call->copy;
    call->copy = NULL;
    struct call *after = cl->waiting.tail;
    while (after && after->id > call->id)
        after = after->prev;
    if (after == NULL) {
        call->prev = NULL;
        call->next = cl->waiting.head;
        if (cl->waiting.head)
            cl->waiting.head->prev = call;
        else
            cl->waiting.tail = call;
        cl->waiting.head = call;
    } else {
        call->prev = after;
        call->next = after->next;
        if (after->next)
            after->next->prev = call;
        else
            cl->waiting.tail = call;
        after->next = call;
    }
    follow_leader(cl, error->leader, reason, call->redirects);
}

static void on_conn_envelope(struct conn *c, const Sluice__Envelope *env)
{
    struct rpc_client *cl = (struct rpc_client *)c;
    char msg[SLUICE_ERRMSG_SIZE];

    if (cl->state == CLIENT_HANDSHAKE) {
        if (env->body_case == SLUICE__ENVELOPE__BODY_ERROR && env->error && env->id == 0) {
            const char *text = env->error->message ? env->error->message : "";
            if (env->error->code == SLUICE_ERR_NOT_LEADER) {
                rpc_client_text(msg, sizeof msg, "%s: %s", rpc_client_current_address(cl), text);
                follow_leader(cl, env->error->leader, msg, 0);
                return;
            }
            reject_connection(cl, error_status(env->error), text);
            return;
        }
        uint8_t mac[AUTH_MAC_LEN];
        int step = auth_hs_step(&cl->hs, env, mac, msg, sizeof msg, NULL);
        if (step == AUTH_HS_OPEN) {
            handshake_done(cl);
        } else if (step == AUTH_HS_SEND) {
            int rc = conn_send_proof(&cl->conn, mac);
            if (rc != 0) {
                rpc_client_text(msg, sizeof msg, "write: %s", sluice_strerror(rc));
                lose_connection(cl, SLUICE_ERR_UNAVAILABLE, msg);
            }
        } else if (step == SLUICE_ERR_PROTOCOL) {
            protocol_error(cl, msg);
        } else {
            reject_connection(cl, step, msg);
        }
        return;
    }
    if (cl->state != CLIENT_CONNECTED)
        return;

    if (env->body_case == SLUICE__ENVELOPE__BODY_HELLO) {
        protocol_error(cl, "second Hello");
        return;
    }
    if (env->body_case == SLUICE__ENVELOPE__BODY_AUTH_PROOF) {
        protocol_error(cl, "AuthProof after the handshake");
        return;
    }
    if (env->id == 0) {
        if (env->body_case == SLUICE__ENVELOPE__BODY_ERROR && env->error) {
            /* A complaint about the connection itself. */
            const char *text = env->error->message ? env->error->message : "";
            if (error_status(env->error) == SLUICE_ERR_AUTH) {
                reject_connection(cl, SLUICE_ERR_AUTH, text);
                return;
            }
            if (env->error->code == SLUICE_ERR_NOT_LEADER) {
                rpc_client_text(msg, sizeof msg, "%s: %s", rpc_client_current_address(cl), text);
                follow_leader(cl, env->error->leader, msg, 0);
                return;
            }
            log_warn("rpc: %s: %s", rpc_client_current_address(cl), text);
            lose_connection(cl, error_status(env->error), text);
            return;
        }
        protocol_error(cl, "reply without an id");
        return;
    }
    struct call *call = rpc_client_hash_find(cl, env->id);
    if (call == NULL || !call->sent) {
        if (env->id < cl->next_id && call == NULL) {
            /* Its call timed out (or was cancelled): a late reply, not a broken server. */
            log_debug("rpc: %s: dropping late reply %" PRIu64, rpc_client_current_address(cl),
                      env->id);
            return;
        }
        rpc_client_text(msg, sizeof msg, "reply id %" PRIu64 " matches no call", env->id);
        protocol_error(cl, msg);
        return;
    }
    if (env->body_case == SLUICE__ENVELOPE__BODY_ERROR && env->error &&
        env->error->code == SLUICE_ERR_NOT_LEADER) {
        not_leader_reply(cl, call, env->error);
        return;
    }
    rpc_client_call_detach(cl, call);
    rpc_client_rearm_call_timer(cl);
    if (env->body_case == SLUICE__ENVELOPE__BODY_ERROR) {
        const char *text = env->error && env->error->message ? env->error->message : "";
        rpc_client_call_finish(call, error_status(env->error), text, env);
    } else {
        rpc_client_call_finish(call, 0, "", env);
    }
    /* The reply a connection that follows a leader waited for. */
    rpc_client_follow_done(cl);
}

static void on_conn_error(struct conn *c, int code, const char *why)
{
    struct rpc_client *cl = (struct rpc_client *)c;
    /* A TLS failure (conn.h reports it as SLUICE_ERR_AUTH) is as final as a wrong token. */
    if (code == SLUICE_ERR_AUTH) {
        reject_connection(cl, SLUICE_ERR_AUTH, why);
        return;
    }
    if (code == SLUICE_ERR_PROTOCOL || code == SLUICE_ERR_TOO_LARGE)
        log_warn("rpc: %s: %s; closing the connection", rpc_client_current_address(cl), why);
    else
        log_debug("rpc: %s: %s", rpc_client_current_address(cl), why);
    lose_connection(cl, SLUICE_ERR_UNAVAILABLE, why);
}

static const struct conn_ops client_conn_ops = {
    .on_envelope = on_conn_envelope,
    .on_error = on_conn_error,
    .on_closed = on_conn_closed,
};

static void connected(struct rpc_client *cl, int status);

static void on_connected(uv_connect_t *req, int status)
{
    struct rpc_client *cl = req->data;
    /* A close while connecting cancels the request; the close callback takes it from there. */
    if (status == UV_ECANCELED || cl->state != CLIENT_CONNECTING)
        return;
    connected(cl, status);
}

/* A connection to a replica is lost once its peer's TCP acknowledges nothing for
 * RPC_REPLICA_SILENCE_MS (rpc_client.h). Without it a leader cut off from the network holds
 * every call sent to it: TCP retransmits what was written for many minutes, and a call written
 * before the cut waits for a reply on a connection with nothing left to send, which TCP never
 * questions; each call's timeout fails only that call, and its retry goes out on the same
 * connection, while the other replicas elected a new leader within seconds. TCP_USER_TIMEOUT
 * bounds the first case, and keepalive probes after a second without traffic turn the second
 * into the first (with the user timeout set, the kernel drops a connection whose probes go
 * unanswered for that long). A single address keeps TCP's own bounds: there is nowhere else to
 * go. Best effort: a socket that refuses an option keeps TCP's bound for that case. */
static void limit_silence(struct rpc_client *cl)
{
#if defined(TCP_USER_TIMEOUT) && defined(TCP_KEEPIDLE) && defined(TCP_KEEPINTVL)
    static const struct {
        int level, name, value;
        const char *text;
    } opts[] = {
        {IPPROTO_TCP, TCP_USER_TIMEOUT, RPC_REPLICA_SILENCE_MS, "TCP_USER_TIMEOUT"},
        {SOL_SOCKET, SO_KEEPALIVE, 1, "SO_KEEPALIVE"},
        {IPPROTO_TCP, TCP_KEEPIDLE, 1, "TCP_KEEPIDLE"},
        {IPPROTO_TCP, TCP_KEEPINTVL, 1, "TCP_KEEPINTVL"},
    };
    uv_os_fd_t fd;
    if (cl->local_now || cl->shm_now || (cl->naddrs < 2 && !cl->off_list) ||
        uv_fileno((const uv_handle_t *)&cl->conn.tcp, &fd) != 0)
        return;
    for (size_t i = 0; i < sizeof opts / sizeof opts[0]; i++)
        if (setsockopt(fd, opts[i].level, opts[i].name, &opts[i].value, sizeof opts[i].value) != 0)
            log_debug("rpc: %s: %s: %s", cl->current.text, opts[i].text, strerror(errno));
#else
    (void)cl;
#endif
}

/* The connection is made (status 0) or failed: start the handshake. */
static void connected(struct rpc_client *cl, int status)
{
    char why[SLUICE_ERRMSG_SIZE];
    if (status < 0) {
        rpc_client_text(why, sizeof why, "connect: %s", uv_strerror(status));
        lose_connection(cl, SLUICE_ERR_UNAVAILABLE, why);
        return;
    }
    limit_silence(cl);
    /* Without a token the nonce is never sent, and OpenSSL's generator need not be woken. */
    uint8_t nonce[AUTH_NONCE_LEN] = {0};
    int rc = security_has_token(cl->sec) ? auth_nonce(nonce) : 0;
    if (rc == 0) {
        const struct security_ctx *sec = cl->sec;
        auth_hs_init(&cl->hs, AUTH_CLIENT, (uint32_t)cl->role, sec ? sec->token : NULL,
                     sec ? sec->token_len : 0, nonce);
        rc = conn_start(&cl->conn);
    }
    if (rc == 0)
        rc = conn_send_hello(&cl->conn, cl->role, cl->incarnation, &cl->hs);
    if (rc != 0) {
        rpc_client_text(why, sizeof why, "connect: %s", sluice_strerror(rc));
        lose_connection(cl, SLUICE_ERR_UNAVAILABLE, why);
        return;
    }
    cl->state = CLIENT_HANDSHAKE;
}

/* Connects to addr, or with addr NULL opens local_fd, one end of an in-process socket pair
 * (inproc.h), which the handle owns from then on. */
static void connect_to(struct rpc_client *cl, const struct sockaddr *addr, uv_os_sock_t local_fd,
                       struct inproc_link *link, struct shm_region *shm)
{
    int rc = conn_init(&cl->conn, cl->loop, &client_conn_ops, cl->max_frame, 0);
    if (rc != 0 && !addr) {
        close(local_fd);
        inproc_link_unref(link);
        shm_region_unref(shm);
    }
    cl->conn.pool = cl->pool;
    /* The server's Hello and proof are small; nothing bigger is read before it proved itself. */
    if (rc == 0)
        conn_set_max_frame(&cl->conn, RPC_HANDSHAKE_MAX_FRAME);
    if (rc != 0) {
        /* No handle was created, so there is no close callback to wait for. */
        uv_timer_stop(&cl->connect_timer);
        rpc_client_text(cl->why, sizeof cl->why, "connect: %s", uv_strerror(rc));
        cl->state = CLIENT_IDLE;
        schedule_retry(cl);
        return;
    }
    cl->busy++;
    cl->state = CLIENT_CONNECTING;
    cl->local_now = addr == NULL && shm == NULL;
    cl->shm_now = shm != NULL;
    int opened = 0;
    if (!addr) {
        /* From here the conn owns the link or region, and the handle the descriptor (when it
         * opens). */
        cl->conn.local = true;
        cl->conn.link = link;
        cl->conn.shm = shm;
        snprintf(cl->conn.peer, sizeof cl->conn.peer, "%s", shm ? "shared memory" : "in-process");
        opened = uv_tcp_open(&cl->conn.tcp, local_fd);
        if (opened != 0)
            close(local_fd);
    }
    if (security_has_tls(cl->sec)) {
        /* The server's certificate must name the host as it was dialled. */
        char why[SLUICE_ERRMSG_SIZE];
        rc = conn_use_tls(&cl->conn, cl->sec->tls,
                          cl->tls_name[0] ? cl->tls_name : cl->current.host, why, sizeof why);
        if (rc != 0) {
            lose_connection(cl, SLUICE_ERR_UNAVAILABLE, why);
            return;
        }
    }
    if (!addr) {
        connected(cl, opened);
        return;
    }
    cl->connect_req.data = cl;
    rc = uv_tcp_connect(&cl->connect_req, &cl->conn.tcp, addr, on_connected);
    if (rc != 0) {
        char why[SLUICE_ERRMSG_SIZE];
        rpc_client_text(why, sizeof why, "connect: %s", uv_strerror(rc));
        lose_connection(cl, SLUICE_ERR_UNAVAILABLE, why);
    }
}

/* A failed attempt that has no handle to close. */
static void attempt_failed(struct rpc_client *cl, const char *why)
{
    uv_timer_stop(&cl->connect_timer);
    rpc_client_text(cl->why, sizeof cl->why, "%s", why);
    log_debug("rpc: %s: %s", rpc_client_current_address(cl), why);
    cl->state = CLIENT_IDLE;
    schedule_retry(cl);
}

static void on_resolved(uv_getaddrinfo_t *req, int status, struct addrinfo *res)
{
    struct rpc_client *cl = req->data;
    cl->gai_busy = false;
    cl->busy--;
    if (cl->closing || cl->state != CLIENT_RESOLVING) {
        /* Closed, or abandoned by the connect timeout. */
        uv_freeaddrinfo(res);
        maybe_finish_close(cl);
        return;
    }
    char why[SLUICE_ERRMSG_SIZE];
    if (status < 0 || res == NULL) {
        rpc_client_text(why, sizeof why, "resolve %s: %s", cl->current.host, uv_strerror(status));
        uv_freeaddrinfo(res);
        attempt_failed(cl, why);
        return;
    }
    /* Successive attempts try successive addresses, so one dead address of several does not
     * block the client forever. */
    size_t n = 0;
    for (struct addrinfo *ai = res; ai; ai = ai->ai_next)
        n++;
    struct addrinfo *ai = res;
    for (size_t i = cl->attempt % n; i > 0; i--)
        ai = ai->ai_next;
    struct sockaddr_storage ss;
    memcpy(&ss, ai->ai_addr, ai->ai_addrlen);
    uv_freeaddrinfo(res);
    connect_to(cl, (const struct sockaddr *)&ss, -1, NULL, NULL);
}

static void on_connect_timeout(uv_timer_t *t)
{
    struct rpc_client *cl = t->data;
    char why[SLUICE_ERRMSG_SIZE];
    rpc_client_text(why, sizeof why, "connect timed out after %" PRIu32 " ms",
                    cl->connect_timeout_ms);
    if (cl->state == CLIENT_RESOLVING) {
        /* The request cannot be reused until its callback runs; backoff waits for that. */
        uv_cancel((uv_req_t *)&cl->gai);
        attempt_failed(cl, why);
        return;
    }
    lose_connection(cl, SLUICE_ERR_UNAVAILABLE, why);
}

static void start_attempt(struct rpc_client *cl)
{
    uv_timer_start(&cl->connect_timer, on_connect_timeout, cl->connect_timeout_ms, 0);
    /* A server in this process is reached without the network; one that has gone (or never
     * ran here) is dialled as usual. */
    uv_os_sock_t fd;
    struct inproc_link *link;
    if (cl->local &&
        inproc_dial(rpc_client_current_address(cl), cl->local_incarnation, &fd, &link) == 0) {
        connect_to(cl, NULL, fd, link, NULL);
        return;
    }
    /* A worker process on this host is reached over its Unix socket with a shared region
     * (shm_sock.h); one that does not answer there is dialled over TCP. */
    struct shm_region *region;
    if (cl->local && cl->local_incarnation && cl->shm_bytes && !cl->shm_skip &&
        !security_has_tls(cl->sec)) {
        int rc = shm_sock_dial(cl->local_incarnation, cl->shm_bytes, &fd, &region);
        if (rc == 0) {
            connect_to(cl, NULL, fd, NULL, region);
            return;
        }
        log_debug("rpc: %s: shared memory: %s; dialling TCP", rpc_client_current_address(cl),
                  sluice_strerror(rc));
    }
    struct sockaddr_storage ss;
    memset(&ss, 0, sizeof ss);
    const char *host = cl->current.host;
    int port = cl->current.port;
    if (uv_ip4_addr(host, port, (struct sockaddr_in *)&ss) == 0 ||
        uv_ip6_addr(host, port, (struct sockaddr_in6 *)&ss) == 0) {
        connect_to(cl, (const struct sockaddr *)&ss, -1, NULL, NULL);
        return;
    }
    char service[8];
    rpc_client_text(service, sizeof service, "%d", port);
    struct addrinfo hints;
    memset(&hints, 0, sizeof hints);
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    cl->gai.data = cl;
    cl->state = CLIENT_RESOLVING;
    int rc = uv_getaddrinfo(cl->loop, &cl->gai, on_resolved, host, service, &hints);
    if (rc != 0) {
        char why[SLUICE_ERRMSG_SIZE];
        rpc_client_text(why, sizeof why, "resolve %s: %s", host, uv_strerror(rc));
        attempt_failed(cl, why);
        return;
    }
    cl->gai_busy = true;
    cl->busy++;
}

static void on_backoff_timer(uv_timer_t *t)
{
    struct rpc_client *cl = t->data;
    assert(cl->state == CLIENT_BACKOFF);
    if (cl->waiting.head == NULL) {
        cl->state = CLIENT_IDLE;
        return;
    }
    if (cl->gai_busy) {
        /* An abandoned resolution still holds the request; look again shortly. */
        uv_timer_start(&cl->backoff_timer, on_backoff_timer, cl->backoff_min_ms, 0);
        return;
    }
    start_attempt(cl);
}

/* ---- public API ------------------------------------------------------------------------------ */

int rpc_client_new(uv_loop_t *loop, const struct rpc_client_opts *opts, struct rpc_client **out,
                   char *err, size_t errlen)
{
    if (opts->address == NULL)
        return err_set(err, errlen, SLUICE_ERR_INVALID, "bad address: none given");
    if (security_has_tls(opts->sec) && !tls_ctx_dials(opts->sec->tls))
        return err_set(err, errlen, SLUICE_ERR_INVALID, "%s: TLS needs --tls-ca to dial servers",
                       opts->address);
    if (strlen(opts->address) >= sizeof((struct rpc_client *)0)->address)
        return err_set(err, errlen, SLUICE_ERR_INVALID, "bad address: too long");
    if (opts->tls_name && strlen(opts->tls_name) >= sizeof((struct rpc_client *)0)->tls_name)
        return err_set(err, errlen, SLUICE_ERR_INVALID, "tls name: too long");

    struct rpc_client *cl = calloc(1, sizeof *cl);
    if (cl == NULL)
        goto fail;
    int rc = rpc_parse_address_list(opts->address, cl->addrs, RPC_MAX_ADDRESSES, &cl->naddrs, err,
                                    errlen);
    if (rc != 0) {
        free(cl);
        return rc;
    }
    cl->buckets = calloc(INITIAL_BUCKETS, sizeof *cl->buckets);
    if (cl->buckets == NULL)
        goto fail_client;
    cl->nbuckets = INITIAL_BUCKETS;
    cl->loop = loop;
    strcpy(cl->address, opts->address);
    rpc_format_address_list(cl->list_text, sizeof cl->list_text, cl->addrs, cl->naddrs);
    cl->current = cl->addrs[0];
    if (opts->tls_name)
        strcpy(cl->tls_name, opts->tls_name);
    cl->role = opts->role;
    cl->incarnation = opts->incarnation;
    cl->max_frame = opts->max_frame ? opts->max_frame : RPC_DEFAULT_MAX_FRAME;
    cl->connect_timeout_ms =
        opts->connect_timeout_ms ? opts->connect_timeout_ms : DEFAULT_CONNECT_TIMEOUT_MS;
    cl->backoff_min_ms = opts->backoff_min_ms ? opts->backoff_min_ms : DEFAULT_BACKOFF_MIN_MS;
    cl->backoff_max_ms = opts->backoff_max_ms ? opts->backoff_max_ms : DEFAULT_BACKOFF_MAX_MS;
    if (cl->backoff_max_ms < cl->backoff_min_ms)
        cl->backoff_max_ms = cl->backoff_min_ms;
    cl->on_connect = opts->on_connect;
    cl->user = opts->user;
    cl->pool = opts->pool;
    cl->sec = opts->sec;
    cl->local = opts->local;
    cl->local_incarnation = opts->local_incarnation;
    cl->shm_bytes = opts->shm_bytes;
    cl->rng = rpc_new_incarnation() ^ opts->incarnation;
    cl->next_id = 1;
    cl->state = CLIENT_IDLE;

    /* Timers on a live loop cannot fail to initialize. */
    uv_timer_init(loop, &cl->connect_timer);
    uv_timer_init(loop, &cl->backoff_timer);
    uv_timer_init(loop, &cl->call_timer);
    cl->connect_timer.data = cl->backoff_timer.data = cl->call_timer.data = cl;
    cl->busy = 3;
    *out = cl;
    return 0;

fail_client:
    free(cl);
fail:
    return err_set(err, errlen, SLUICE_ERR_NOMEM, "out of memory");
}

int rpc_call(struct rpc_client *cl, Sluice__Envelope *req, uint32_t timeout_ms, rpc_reply_cb cb,
             void *user)
{
    assert(cb != NULL);
    if (cl->closing)
        return SLUICE_ERR_CLOSED;
    struct call *call = calloc(1, sizeof *call);
    if (call == NULL)
        return SLUICE_ERR_NOMEM;
    req->id = cl->next_id;
    int rc = conn_frame_pack(req, cl->max_frame, &call->frame);
    if (rc != 0)
        goto fail_call;
    call->id = cl->next_id;
    call->cb = cb;
    call->user = user;
    call->timeout_ms = timeout_ms;
    call->heap_index = NOT_IN_HEAP;
    rc = rpc_client_hash_insert(cl, call);
    if (rc != 0)
        goto fail_frame;
    if (timeout_ms > 0) {
        call->deadline = uv_now(cl->loop) + timeout_ms;
        rc = rpc_client_heap_push(cl, call);
        if (rc != 0)
            goto fail_hash;
        rpc_client_rearm_call_timer(cl);
    }
    cl->next_id++;
    rpc_client_list_append(&cl->waiting, call);

    if (cl->state == CLIENT_CONNECTED && !cl->following)
        send_call(cl, call);
    else if (cl->state == CLIENT_IDLE)
        start_attempt(cl);
    return 0;

fail_hash:
    rpc_client_hash_remove(cl, call);
fail_frame:
    conn_frame_free(call->frame);
fail_call:
    free(call);
    return rc;
}

void *rpc_client_take_reply(struct rpc_client *cl, size_t *cap)
{
    *cap = 0;
    /* The conn exists from CONNECTING through CLOSING; a reply arrives only while CONNECTED. */
    if (cl->state != CLIENT_CONNECTED)
        return NULL;
    return conn_take_frame(&cl->conn, cap);
}

bool rpc_client_withdraw(struct rpc_client *cl, rpc_reply_cb cb, void *user)
{
    if (cl->closing)
        return false;
    struct call *call = cl->waiting.head;
    while (call && !(call->cb == cb && call->user == user))
        call = call->next;
    if (!call)
        return false;
    /* Fail it from the call timer, due now: never inside this function. */
    rpc_client_heap_remove(cl, call);
    call->deadline = uv_now(cl->loop);
    if (rpc_client_heap_push(cl, call) != 0) {
        /* Without room in the heap it stays waiting: its own timeout fails it later. */
        if (call->timeout_ms > 0) {
            call->deadline = uv_now(cl->loop) + call->timeout_ms;
            (void)rpc_client_heap_push(cl, call); /* it was in the heap before, so there is room */
        }
        return false;
    }
    rpc_client_list_remove(&cl->waiting, call);
    rpc_client_list_append(&cl->withdrawn, call);
    call->withdrawn = true;
    conn_frame_free(call->frame);
    call->frame = NULL;
    rpc_client_rearm_call_timer(cl);
    return true;
}

struct shm_region *rpc_client_take_shm(struct rpc_client *cl, uint64_t *pos)
{
    if (cl->state != CLIENT_CONNECTED)
        return NULL;
    return conn_take_shm(&cl->conn, pos);
}

bool rpc_client_shm(const struct rpc_client *cl)
{
    return cl->state == CLIENT_CONNECTED && cl->shm_now;
}

bool rpc_client_shm_usage(struct rpc_client *cl, uint64_t *size, uint64_t *held)
{
    if (cl->state != CLIENT_CONNECTED) {
        /* Not connected yet: the next attempt dials shared memory first (start_attempt), into
         * an empty region of shm_bytes. */
        if (!cl->local || !cl->local_incarnation || !cl->shm_bytes || cl->shm_skip ||
            security_has_tls(cl->sec))
            return false;
        *size = cl->shm_bytes;
        *held = 0;
        return true;
    }
    if (!cl->shm_now || cl->conn.shm == NULL)
        return false;
    *size = shm_region_size(cl->conn.shm);
    *held = shm_region_held(cl->conn.shm);
    return true;
}

bool rpc_client_local(const struct rpc_client *cl)
{
    return cl->state == CLIENT_CONNECTED && cl->local_now;
}

bool rpc_client_connected(const struct rpc_client *cl)
{
    return cl->state == CLIENT_CONNECTED && !cl->following;
}

const char *rpc_client_why(const struct rpc_client *cl)
{
    if (cl->state == CLIENT_CONNECTED)
        return cl->following ? cl->follow_why : "";
    return cl->why;
}

uint64_t rpc_client_peer_incarnation(const struct rpc_client *cl)
{
    return cl->peer_incarnation;
}

uint64_t rpc_client_auth_failures(const struct rpc_client *cl)
{
    return cl->auth_failures;
}

const char *rpc_client_address(const struct rpc_client *cl)
{
    return cl->address;
}

const char *rpc_client_current_address(const struct rpc_client *cl)
{
    /* A single address reads as it was given, as it always has. */
    if (cl->naddrs == 1 && !cl->off_list)
        return cl->address;
    return cl->current.text;
}

static void on_timer_closed(uv_handle_t *h)
{
    struct rpc_client *cl = h->data;
    cl->busy--;
    maybe_finish_close(cl);
}

void rpc_client_close(struct rpc_client *cl, void (*cb)(void *user), void *user)
{
    assert(!cl->closing);
    cl->closing = true;
    cl->close_cb = cb;
    cl->close_user = user;
    rpc_client_fail_list(cl, &cl->sent, SLUICE_ERR_CANCELLED, "client closed");
    rpc_client_fail_list(cl, &cl->waiting, SLUICE_ERR_CANCELLED, "client closed");
    rpc_client_fail_list(cl, &cl->withdrawn, SLUICE_ERR_CANCELLED, "client closed");
    uv_close((uv_handle_t *)&cl->connect_timer, on_timer_closed);
    uv_close((uv_handle_t *)&cl->backoff_timer, on_timer_closed);
    uv_close((uv_handle_t *)&cl->call_timer, on_timer_closed);
    if (cl->state == CLIENT_CONNECTING || cl->state == CLIENT_HANDSHAKE ||
        cl->state == CLIENT_CONNECTED)
        conn_close(&cl->conn);
    if (cl->gai_busy)
        uv_cancel((uv_req_t *)&cl->gai);
    cl->state = CLIENT_IDLE;
}
