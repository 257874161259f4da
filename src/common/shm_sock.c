/* Happy path: the worker's loop polls its listening socket, accepts a dialler of its own user,
 * polls that socket until the hello and its descriptor arrive, maps the region, closes the poll
 * handle and, from its close callback, hands socket and region over. Sockets waiting for their
 * hello are on a waitlist (waitlist.h), as the rpc server's connections in their handshake are.
 * Failure modes: see the header; each ends with the socket closed and nothing mapped. */
#include "shm_sock.h"

#include "common/error.h"
#include "common/log.h"
#include "common/shm_region.h"
#include "common/shm_ring.h"
#include "common/waitlist.h"
#include "sluice/sluice.h"

#include <errno.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#define HELLO_MAGIC 0x324d48535348534cull /* "LSHSSHM2": a region with an arena */

static socklen_t sock_name(uint64_t incarnation, struct sockaddr_un *sa)
{
    memset(sa, 0, sizeof *sa);
    sa->sun_family = AF_UNIX;
    /* Abstract: the first byte of the path is 0 and the name is not terminated. */
    int n = snprintf(sa->sun_path + 1, sizeof sa->sun_path - 1, "sluice-worker-%016" PRIx64,
                     incarnation);
    return (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + (size_t)n);
}

/* Whether the process at the other end of fd runs as this process's user. */
static bool same_user(int fd)
{
    struct ucred cr;
    socklen_t len = sizeof cr;
    return getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cr, &len) == 0 && cr.uid == getuid();
}

int shm_sock_dial(uint64_t incarnation, uint64_t size, uv_os_sock_t *fd, struct shm_region **region)
{
    int rc;
    int s = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (s < 0)
        return -errno;
    struct sockaddr_un sa;
    socklen_t salen = sock_name(incarnation, &sa);
    if (connect(s, (struct sockaddr *)&sa, salen) != 0) {
        rc = -errno;
        goto fail_sock;
    }
    if (!same_user(s)) {
        rc = SLUICE_ERR_DENIED;
        goto fail_sock;
    }
    int mfd;
    struct shm_region *r;
    if ((rc = shm_region_create(size, &r, &mfd)) != 0)
        goto fail_sock;
    uint8_t hello[SHM_SOCK_HELLO_LEN];
    shm_put_u64(hello, HELLO_MAGIC);
    shm_put_u64(hello + 8, size);
    struct iovec iov = {hello, sizeof hello};
    union {
        struct cmsghdr h;
        char buf[CMSG_SPACE(sizeof(int))];
    } ctl;
    memset(&ctl, 0, sizeof ctl);
    struct msghdr msg = {
        .msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl.buf, .msg_controllen = sizeof ctl.buf};
    struct cmsghdr *cm = CMSG_FIRSTHDR(&msg);
    cm->cmsg_level = SOL_SOCKET;
    cm->cmsg_type = SCM_RIGHTS;
    cm->cmsg_len = CMSG_LEN(sizeof(int));
    memcpy(CMSG_DATA(cm), &mfd, sizeof mfd);
    /* A fresh socket's buffer is empty: the hello goes whole or not at all. */
    ssize_t n = sendmsg(s, &msg, MSG_NOSIGNAL);
    rc = n == (ssize_t)sizeof hello ? 0 : n < 0 ? -errno : SLUICE_ERR_PROTOCOL;
    close(mfd);
    if (rc != 0)
        goto fail_region;
    *fd = s;
    *region = r;
    return 0;
fail_region:
    shm_region_unref(r);
fail_sock:
    close(s);
    return rc;
}

/* ---- the listener ---------------------------------------------------------------------------- */

struct pending {
    uv_poll_t poll;
    struct shm_listener *l;
    int fd;
    struct shm_region *region; /* set once the hello was received */
    struct waitlist_item wait; /* on l->waiting until the hello came or the socket is dropped */
};

struct shm_listener {
    uv_poll_t poll;
    int fd;
    shm_sock_accept_cb cb;
    void *user;
    struct waitlist waiting; /* the sockets waiting for their hello, oldest first */
    unsigned handles;        /* open handles: the poll handles, the listener's own, the timer */
    bool closing;
    void (*done)(void *);
    void *done_user;
};

static void maybe_free(struct shm_listener *l)
{
    if (l->handles > 0)
        return;
    void (*done)(void *) = l->done;
    void *user = l->done_user;
    free(l);
    if (done)
        done(user);
}

static void on_pending_closed(uv_handle_t *h)
{
    struct pending *p = h->data;
    struct shm_listener *l = p->l;
    if (p->region && !l->closing) {
        l->cb(l->user, p->fd, p->region);
    } else {
        close(p->fd);
        shm_region_unref(p->region);
    }
    free(p);
    l->handles--;
    maybe_free(l);
}

static struct pending *waiting_pending(const struct waitlist_item *w)
{
    return (struct pending *)((char *)w - offsetof(struct pending, wait));
}

static void pending_end(struct pending *p)
{
    waitlist_remove(&p->l->waiting, &p->wait);
    uv_close((uv_handle_t *)&p->poll, on_pending_closed);
}

/* A socket's hello is due this long after its accept: a reader sends it with its connect. */
static uint64_t hello_deadline(struct waitlist *wl, const struct waitlist_item *w)
{
    return w->since + wl->first_ms;
}

static void hello_expired(struct waitlist *wl, struct waitlist_item *w)
{
    log_debug("shm: no hello within %" PRIu32 " ms; closing the connection", wl->first_ms);
    pending_end(waiting_pending(w));
}

/* Whether p's socket holds nothing to read (its hello has not come). */
static bool silent(const struct pending *p)
{
    int unread = 0;
    return ioctl(p->fd, FIONREAD, &unread) == 0 && unread == 0;
}

/* Receives the hello and the descriptor; returns 0 with p->region set, SLUICE_ERR_UNAVAILABLE
 * when nothing has arrived yet, or another negative code (logged). */
static int receive_hello(struct pending *p)
{
    uint8_t hello[SHM_SOCK_HELLO_LEN];
    struct iovec iov = {hello, sizeof hello};
    union {
        struct cmsghdr h;
        char buf[CMSG_SPACE(4 * sizeof(int))];
    } ctl;
    struct msghdr msg = {
        .msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl.buf, .msg_controllen = sizeof ctl.buf};
    ssize_t n = recvmsg(p->fd, &msg, MSG_CMSG_CLOEXEC | MSG_DONTWAIT);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
        return SLUICE_ERR_UNAVAILABLE;
    int rc = n < 0 ? -errno : 0;
    /* Every descriptor received is closed below, however many came. */
    int mfd = -1;
    for (struct cmsghdr *cm = CMSG_FIRSTHDR(&msg); n >= 0 && cm; cm = CMSG_NXTHDR(&msg, cm)) {
        if (cm->cmsg_level != SOL_SOCKET || cm->cmsg_type != SCM_RIGHTS)
            continue;
        size_t k = (cm->cmsg_len - CMSG_LEN(0)) / sizeof(int);
        for (size_t i = 0; i < k; i++) {
            int f;
            memcpy(&f, CMSG_DATA(cm) + i * sizeof(int), sizeof f);
            if (mfd < 0)
                mfd = f;
            else {
                close(f);
                rc = rc ? rc : SLUICE_ERR_PROTOCOL;
            }
        }
    }
    char why[SLUICE_ERRMSG_SIZE] = "";
    if (rc == 0 && (n != (ssize_t)sizeof hello || (msg.msg_flags & MSG_CTRUNC) ||
                    shm_get_u64(hello) != HELLO_MAGIC || mfd < 0))
        rc = err_set(why, sizeof why, SLUICE_ERR_PROTOCOL, "shm: not a hello with a region");
    if (rc == 0)
        rc = shm_region_attach(mfd, shm_get_u64(hello + 8), &p->region, why, sizeof why);
    if (mfd >= 0)
        close(mfd);
    if (rc != 0)
        log_debug("shm: connection refused: %s", why[0] ? why : sluice_strerror(rc));
    return rc;
}

static void on_pending_readable(uv_poll_t *h, int status, int events)
{
    (void)events;
    struct pending *p = h->data;
    int rc = status < 0 ? status : receive_hello(p);
    if (rc == SLUICE_ERR_UNAVAILABLE)
        return;
    uv_poll_stop(&p->poll);
    pending_end(p);
}

static void accept_one(struct shm_listener *l, int s)
{
    if (!same_user(s)) {
        log_debug("shm: connection of another user refused");
        close(s);
        return;
    }
    if (l->waiting.n >= SHM_SOCK_PENDING) {
        /* As the rpc server does with connections in their handshake: the oldest socket that
         * has sent nothing makes room, so silent ones cannot lock a reader out. */
        struct waitlist_item *w = l->waiting.head;
        while (w && !silent(waiting_pending(w)))
            w = w->next;
        if (!w) {
            log_debug("shm: %u connections wait for their hello; one more refused", l->waiting.n);
            close(s);
            return;
        }
        log_debug("shm: a silent connection closed to make room for a newer one");
        pending_end(waiting_pending(w));
    }
    struct pending *p = calloc(1, sizeof *p);
    if (!p || uv_poll_init(l->poll.loop, &p->poll, s) != 0) {
        free(p);
        close(s);
        return;
    }
    p->poll.data = p;
    p->l = l;
    p->fd = s;
    waitlist_add(&l->waiting, &p->wait);
    l->handles++;
    if (uv_poll_start(&p->poll, UV_READABLE, on_pending_readable) != 0)
        pending_end(p);
}

static void on_listen_readable(uv_poll_t *h, int status, int events)
{
    (void)events;
    struct shm_listener *l = h->data;
    if (status < 0)
        return;
    for (;;) {
        int s = accept4(l->fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (s < 0)
            return; /* EAGAIN, or a connection that went before it was accepted */
        accept_one(l, s);
    }
}

int shm_sock_listen(uv_loop_t *loop, uint64_t incarnation, uint32_t timeout_ms,
                    shm_sock_accept_cb cb, void *user, struct shm_listener **out, char *err,
                    size_t errlen)
{
    int rc;
    struct shm_listener *l = calloc(1, sizeof *l);
    if (!l)
        return err_set(err, errlen, SLUICE_ERR_NOMEM, "shm: out of memory");
    l->fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (l->fd < 0) {
        rc = err_set(err, errlen, -errno, "shm: socket: %s", strerror(errno));
        goto fail;
    }
    struct sockaddr_un sa;
    socklen_t salen = sock_name(incarnation, &sa);
    if (bind(l->fd, (struct sockaddr *)&sa, salen) != 0 || listen(l->fd, 64) != 0) {
        rc = err_set(err, errlen, -errno, "shm: listen on @%s: %s", sa.sun_path + 1,
                     strerror(errno));
        goto fail_fd;
    }
    if ((rc = uv_poll_init(loop, &l->poll, l->fd)) != 0) {
        err_set(err, errlen, rc, "shm: poll: %s", uv_strerror(rc));
        goto fail_fd;
    }
    l->poll.data = l;
    l->cb = cb;
    l->user = user;
    waitlist_init(loop, &l->waiting, timeout_ms, hello_deadline, hello_expired);
    l->waiting.timer.data = l;
    l->handles = 2;
    uv_poll_start(&l->poll, UV_READABLE, on_listen_readable);
    *out = l;
    return 0;
fail_fd:
    close(l->fd);
fail:
    free(l);
    return rc;
}

static void on_listen_closed(uv_handle_t *h)
{
    struct shm_listener *l = h->data;
    if (h == (uv_handle_t *)&l->poll)
        close(l->fd);
    l->handles--;
    maybe_free(l);
}

void shm_sock_close(struct shm_listener *l, void (*done)(void *user), void *user)
{
    l->closing = true;
    l->done = done;
    l->done_user = user;
    while (l->waiting.head)
        pending_end(waiting_pending(l->waiting.head));
    uv_close((uv_handle_t *)&l->poll, on_listen_closed);
    uv_close((uv_handle_t *)&l->waiting.timer, on_listen_closed);
}
