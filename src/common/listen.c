#include "listen.h"

#include "error.h"

#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

static int resolve(const char *host, int port, struct sockaddr_storage *ss, char *why,
                   size_t whylen)
{
    memset(ss, 0, sizeof *ss);
    if (uv_ip4_addr(host, port, (struct sockaddr_in *)ss) == 0)
        return 0;
    if (uv_ip6_addr(host, port, (struct sockaddr_in6 *)ss) == 0)
        return 0;
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM};
    struct addrinfo *res = NULL;
    int rc = getaddrinfo(host, NULL, &hints, &res);
    if (rc != 0 || res == NULL)
        return err_set(why, whylen, SLUICE_ERR_NOT_FOUND, "%s", gai_strerror(rc));
    memcpy(ss, res->ai_addr, res->ai_addrlen);
    if (ss->ss_family == AF_INET6)
        ((struct sockaddr_in6 *)ss)->sin6_port = htons((uint16_t)port);
    else
        ((struct sockaddr_in *)ss)->sin_port = htons((uint16_t)port);
    freeaddrinfo(res);
    return 0;
}

int listen_open(const char *host, int port, int *fd_out, int *port_out, char *why, size_t whylen)
{
    struct sockaddr_storage ss;
    int rc = resolve(host, port, &ss, why, whylen);
    if (rc != 0)
        return rc;
    int fd = socket(ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0)
        goto fail;
    int on = 1;
    if (setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &on, sizeof on) != 0)
        goto fail_fd;
    socklen_t len =
        ss.ss_family == AF_INET6 ? sizeof(struct sockaddr_in6) : sizeof(struct sockaddr_in);
    if (bind(fd, (const struct sockaddr *)&ss, len) != 0)
        goto fail_fd;
    if (listen(fd, SOMAXCONN) != 0)
        goto fail_fd;
    struct sockaddr_storage bound;
    socklen_t blen = sizeof bound;
    if (getsockname(fd, (struct sockaddr *)&bound, &blen) != 0)
        goto fail_fd;
    *port_out = bound.ss_family == AF_INET6 ? ntohs(((struct sockaddr_in6 *)&bound)->sin6_port)
                                            : ntohs(((struct sockaddr_in *)&bound)->sin_port);
    *fd_out = fd;
    return 0;

fail_fd:;
    int saved = errno;
    close(fd);
    errno = saved;
fail:
    return err_set(why, whylen, -errno, "%s", strerror(errno));
}

int listen_adopt(uv_loop_t *loop, uv_tcp_t *handle, int fd, uv_connection_cb cb, int *inited)
{
    *inited = 0;
    int rc = uv_tcp_init(loop, handle);
    if (rc != 0) {
        close(fd);
        return rc;
    }
    *inited = 1;
    /* The socket already listens, so these fail only on a broken descriptor; uv_listen on a
     * listening socket merely registers it with the loop. */
    rc = uv_tcp_open(handle, fd);
    if (rc != 0) {
        close(fd); /* not adopted by the handle */
        return rc;
    }
    return uv_listen((uv_stream_t *)handle, SOMAXCONN, cb);
}

bool listen_spare_refuse(struct listen_spare *spare, uv_loop_t *loop, uv_stream_t *listener,
                         void *data, uv_close_cb closed_cb)
{
    if (spare->busy || uv_tcp_init(loop, &spare->tcp) != 0) {
        spare->pending = true;
        return false;
    }
    spare->tcp.data = data;
    spare->busy = true;
    (void)uv_accept(listener, (uv_stream_t *)&spare->tcp);
    uv_close((uv_handle_t *)&spare->tcp, closed_cb);
    return true;
}

bool listen_spare_closed(struct listen_spare *spare, bool accepting)
{
    spare->busy = false;
    if (!spare->pending || !accepting)
        return false;
    spare->pending = false;
    return true;
}
