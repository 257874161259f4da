/* The registry of in-process servers: see inproc.h. */

#include "inproc.h"

#include "bufpool.h"
#include "error.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

struct inproc_entry {
    struct inproc_entry *next;
    char *address;
    uint64_t incarnation;
    inproc_accept_cb cb;
    void *user;
    pid_t pid; /* the process that registered it */
};

/* A queued payload block. */
struct link_block {
    struct link_block *next;
    void *block;
    size_t cap, len;
};

struct inproc_link {
    pthread_mutex_t mu;
    unsigned refs;
    struct link_block *head, *tail;
};

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static struct inproc_entry *entries;

/* Socket buffers of the pair: room for a few large replies in flight. */
#define LOCAL_SOCKET_BUFFER (4 << 20)

/* A fork while another thread holds mu would leave the child's copy locked for good: the table's
 * lock is taken around every fork. */
static pthread_once_t atfork_once = PTHREAD_ONCE_INIT;

static void fork_prepare(void)
{
    pthread_mutex_lock(&mu);
}

static void fork_done(void)
{
    pthread_mutex_unlock(&mu);
}

static void atfork_install(void)
{
    (void)pthread_atfork(fork_prepare, fork_done, fork_done);
}

int inproc_register(const char *address, uint64_t incarnation, inproc_accept_cb cb, void *user,
                    struct inproc_entry **out)
{
    pthread_once(&atfork_once, atfork_install);
    struct inproc_entry *e = calloc(1, sizeof *e);
    if (!e || !(e->address = strdup(address))) {
        free(e);
        return SLUICE_ERR_NOMEM;
    }
    e->incarnation = incarnation;
    e->pid = getpid();
    e->cb = cb;
    e->user = user;
    pthread_mutex_lock(&mu);
    e->next = entries;
    entries = e;
    pthread_mutex_unlock(&mu);
    *out = e;
    return 0;
}

void inproc_unregister(struct inproc_entry *e)
{
    if (!e)
        return;
    pthread_mutex_lock(&mu);
    for (struct inproc_entry **p = &entries; *p; p = &(*p)->next) {
        if (*p == e) {
            *p = e->next;
            break;
        }
    }
    pthread_mutex_unlock(&mu);
    free(e->address);
    free(e);
}

/* The entry of address and incarnation (0: any); mu held. A child forked from the process that
 * registered a server inherits the table but not the server's thread: the entries are the
 * parent's, and the child dials that server over TCP like any other process. */
static struct inproc_entry *find(const char *address, uint64_t incarnation)
{
    pid_t self = getpid();
    for (struct inproc_entry *e = entries; e; e = e->next) {
        if (e->pid == self && strcmp(e->address, address) == 0 &&
            (incarnation == 0 || e->incarnation == incarnation))
            return e;
    }
    return NULL;
}

bool inproc_has(const char *address, uint64_t incarnation)
{
    pthread_mutex_lock(&mu);
    bool found = find(address, incarnation) != NULL;
    pthread_mutex_unlock(&mu);
    return found;
}

/* The blocks the process keeps for payloads: enough for the replies of a few readers in flight. */
#define LOCAL_POOL_BYTES (256u << 20)
#define LOCAL_POOL_MAX_BLOCK (256u << 20)

static pthread_once_t pool_once = PTHREAD_ONCE_INIT;
static struct bufpool *pool;

static void pool_create(void)
{
    if (bufpool_new(LOCAL_POOL_BYTES, LOCAL_POOL_MAX_BLOCK, &pool) < 0)
        pool = NULL;
}

struct bufpool *inproc_pool(void)
{
    pthread_once(&pool_once, pool_create);
    return pool;
}

static struct inproc_link *link_new(void)
{
    struct inproc_link *l = calloc(1, sizeof *l);
    if (!l)
        return NULL;
    pthread_mutex_init(&l->mu, NULL);
    l->refs = 2; /* one per end */
    return l;
}

void inproc_link_unref(struct inproc_link *l)
{
    if (!l)
        return;
    pthread_mutex_lock(&l->mu);
    bool last = --l->refs == 0;
    pthread_mutex_unlock(&l->mu);
    if (!last)
        return;
    struct bufpool *p = inproc_pool();
    while (l->head) {
        struct link_block *b = l->head;
        l->head = b->next;
        if (p)
            bufpool_put(p, b->block, b->cap);
        else
            free(b->block);
        free(b);
    }
    pthread_mutex_destroy(&l->mu);
    free(l);
}

int inproc_link_push(struct inproc_link *l, void *block, size_t cap, size_t len)
{
    struct link_block *b = malloc(sizeof *b);
    if (!b)
        return SLUICE_ERR_NOMEM;
    *b = (struct link_block){NULL, block, cap, len};
    pthread_mutex_lock(&l->mu);
    if (l->tail)
        l->tail->next = b;
    else
        l->head = b;
    l->tail = b;
    pthread_mutex_unlock(&l->mu);
    return 0;
}

bool inproc_link_pop(struct inproc_link *l, void **block, size_t *cap, size_t *len)
{
    pthread_mutex_lock(&l->mu);
    struct link_block *b = l->head;
    if (b) {
        l->head = b->next;
        if (!l->head)
            l->tail = NULL;
    }
    pthread_mutex_unlock(&l->mu);
    if (!b)
        return false;
    *block = b->block;
    *cap = b->cap;
    *len = b->len;
    free(b);
    return true;
}

int inproc_dial(const char *address, uint64_t incarnation, uv_os_sock_t *fd,
                struct inproc_link **link)
{
    struct inproc_link *l = link_new();
    if (!l)
        return SLUICE_ERR_NOMEM;
    pthread_mutex_lock(&mu);
    struct inproc_entry *e = find(address, incarnation);
    if (!e) {
        pthread_mutex_unlock(&mu);
        free(l);
        return SLUICE_ERR_NOT_FOUND;
    }
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) {
        int rc = -errno;
        pthread_mutex_unlock(&mu);
        free(l);
        return rc;
    }
    int size = LOCAL_SOCKET_BUFFER;
    for (int i = 0; i < 2; i++) {
        (void)setsockopt(sv[i], SOL_SOCKET, SO_SNDBUF, &size, sizeof size);
        (void)setsockopt(sv[i], SOL_SOCKET, SO_RCVBUF, &size, sizeof size);
    }
    int rc = e->cb(e->user, sv[1], l);
    pthread_mutex_unlock(&mu);
    if (rc < 0) {
        close(sv[0]);
        close(sv[1]);
        pthread_mutex_destroy(&l->mu);
        free(l);
        return rc;
    }
    *fd = sv[0];
    *link = l;
    return 0;
}
