/* The registry of in-process servers: see local.h. */

#include "local.h"

#include "error.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

struct local_entry {
    struct local_entry *next;
    char *address;
    uint64_t incarnation;
    local_accept_cb cb;
    void *user;
};

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static struct local_entry *entries;

/* Socket buffers of the pair: room for a few large replies in flight. */
#define LOCAL_SOCKET_BUFFER (4 << 20)

int local_register(const char *address, uint64_t incarnation, local_accept_cb cb, void *user,
                   struct local_entry **out)
{
    struct local_entry *e = calloc(1, sizeof *e);
    if (!e || !(e->address = strdup(address))) {
        free(e);
        return SLUICE_ERR_NOMEM;
    }
    e->incarnation = incarnation;
    e->cb = cb;
    e->user = user;
    pthread_mutex_lock(&mu);
    e->next = entries;
    entries = e;
    pthread_mutex_unlock(&mu);
    *out = e;
    return 0;
}

void local_unregister(struct local_entry *e)
{
    if (!e)
        return;
    pthread_mutex_lock(&mu);
    for (struct local_entry **p = &entries; *p; p = &(*p)->next) {
        if (*p == e) {
            *p = e->next;
            break;
        }
    }
    pthread_mutex_unlock(&mu);
    free(e->address);
    free(e);
}

/* The entry of address and incarnation (0: any); mu held. */
static struct local_entry *find(const char *address, uint64_t incarnation)
{
    for (struct local_entry *e = entries; e; e = e->next) {
        if (strcmp(e->address, address) == 0 && (incarnation == 0 || e->incarnation == incarnation))
            return e;
    }
    return NULL;
}

bool local_has(const char *address, uint64_t incarnation)
{
    pthread_mutex_lock(&mu);
    bool found = find(address, incarnation) != NULL;
    pthread_mutex_unlock(&mu);
    return found;
}

int local_dial(const char *address, uint64_t incarnation, uv_os_sock_t *fd)
{
    pthread_mutex_lock(&mu);
    struct local_entry *e = find(address, incarnation);
    if (!e) {
        pthread_mutex_unlock(&mu);
        return SLUICE_ERR_NOT_FOUND;
    }
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) {
        int rc = -errno;
        pthread_mutex_unlock(&mu);
        return rc;
    }
    int size = LOCAL_SOCKET_BUFFER;
    for (int i = 0; i < 2; i++) {
        (void)setsockopt(sv[i], SOL_SOCKET, SO_SNDBUF, &size, sizeof size);
        (void)setsockopt(sv[i], SOL_SOCKET, SO_RCVBUF, &size, sizeof size);
    }
    int rc = e->cb(e->user, sv[1]);
    pthread_mutex_unlock(&mu);
    if (rc < 0) {
        close(sv[0]);
        close(sv[1]);
        return rc;
    }
    *fd = sv[0];
    return 0;
}
