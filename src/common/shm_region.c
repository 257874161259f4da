#include "shm_region.h"

#include "common/error.h"
#include "common/shm_arena.h"
#include "common/shm_ring.h"
#include "sluice/sluice.h"

#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

/* The control page: the reader publishes head there, and gives back the arena's blocks by
 * setting the bit of each one's first granule in release; the writer clears those bits as it
 * takes them in (shm_arena.h) and writes nothing else. */
struct shm_control {
    uint64_t magic;
    uint64_t size;
    uint8_t pad[48];
    _Atomic uint64_t head; /* its own cache line */
    uint8_t pad2[56];
    _Atomic uint64_t release[SHM_ARENA_MAX_GRANULES / 64];
};
_Static_assert(sizeof(struct shm_control) <= SHM_REGION_CONTROL, "the control page overflows");

#define CONTROL_MAGIC 0x534c554943455348ull

struct shm_region {
    _Atomic unsigned refs;
    uint8_t *map;
    size_t map_len;
    struct shm_control *ctl;
    uint8_t *ring;
    uint64_t size;
    uint8_t *arena; /* after the ring; arena_size bytes (0: none) */
    uint64_t arena_size;
    /* The writer's side. */
    uint64_t wpos, seen_head;
    uint64_t big; /* the largest block placed (shm_ring_place's big) */
    /* The arena's blocks (the writer's side), under amu: producers take them on their threads
     * and give them back from any. */
    pthread_mutex_t amu;
    struct shm_arena blocks;
    bool arena_stopped;
    /* The reader's side, under mu (releases come from any thread). */
    pthread_mutex_t mu;
    uint64_t rpos;
    struct shm_tracker held;
    /* The process that mapped it: a forked child shares the mapping, and a release there (a
     * view the child inherited, freed) must not move the head the parent's blocks depend on. */
    pid_t pid;
    int fd;      /* the creator's own descriptor of it (-1 when attached) */
    uint64_t id; /* unique in this process */
};

static _Atomic uint64_t region_ids;

/* A region of total bytes (ring and arena) mapped at map; writer: whether this side allocates
 * the arena's blocks. */
static int region_new(uint64_t total, uint8_t *map, bool writer, struct shm_region **out)
{
    struct shm_region *r = calloc(1, sizeof *r);
    if (!r)
        return SLUICE_ERR_NOMEM;
    uint64_t size, arena;
    shm_arena_split(total, &size, &arena);
    if (writer && shm_arena_init(&r->blocks, (uint32_t)(arena / SHM_ARENA_GRANULE)) != 0) {
        free(r);
        return SLUICE_ERR_NOMEM;
    }
    atomic_init(&r->refs, 1);
    r->map = map;
    r->map_len = SHM_REGION_CONTROL + total;
    r->ctl = (struct shm_control *)map;
    r->ring = map + SHM_REGION_CONTROL;
    r->size = size;
    r->arena = arena ? r->ring + size : NULL;
    r->arena_size = arena;
    pthread_mutex_init(&r->mu, NULL);
    pthread_mutex_init(&r->amu, NULL);
    shm_tracker_init(&r->held);
    r->pid = getpid();
    r->fd = -1;
    r->id = atomic_fetch_add_explicit(&region_ids, 1, memory_order_relaxed) + 1;
    *out = r;
    return 0;
}

int shm_region_create(uint64_t size, struct shm_region **out, int *fd)
{
    if (shm_ring_check_size(size) != 0)
        return SLUICE_ERR_INVALID;
    int rc;
    int f = memfd_create("sluice-shm", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    if (f < 0)
        return -errno;
    if (ftruncate(f, (off_t)(SHM_REGION_CONTROL + size)) != 0 ||
        fcntl(f, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0) {
        rc = -errno;
        goto fail_fd;
    }
    uint8_t *map = mmap(NULL, SHM_REGION_CONTROL + size, PROT_READ | PROT_WRITE, MAP_SHARED, f, 0);
    if (map == MAP_FAILED) {
        rc = -errno;
        goto fail_fd;
    }
    int own = fcntl(f, F_DUPFD_CLOEXEC, 0);
    if (own < 0) {
        rc = -errno;
        goto fail_map;
    }
    if ((rc = region_new(size, map, false, out)) != 0) {
        close(own);
        goto fail_map;
    }
    (*out)->fd = own;
    struct shm_control *ctl = (*out)->ctl;
    ctl->magic = CONTROL_MAGIC;
    ctl->size = size;
    atomic_store_explicit(&ctl->head, 0, memory_order_release);
    *fd = f;
    return 0;
fail_map:
    munmap(map, SHM_REGION_CONTROL + size);
fail_fd:
    close(f);
    return rc;
}

int shm_region_attach(int fd, uint64_t size, struct shm_region **out, char *err, size_t errlen)
{
    if (shm_ring_check_size(size) != 0)
        return err_set(err, errlen, SLUICE_ERR_PROTOCOL, "shm: a ring of %llu bytes",
                       (unsigned long long)size);
    int seals = fcntl(fd, F_GET_SEALS);
    if (seals < 0 || (seals & (F_SEAL_SHRINK | F_SEAL_GROW)) != (F_SEAL_SHRINK | F_SEAL_GROW))
        return err_set(err, errlen, SLUICE_ERR_PROTOCOL,
                       "shm: the region is not sealed against resizing");
    struct stat st;
    if (fstat(fd, &st) != 0)
        return err_set(err, errlen, -errno, "shm: fstat: %s", strerror(errno));
    if ((uint64_t)st.st_size != SHM_REGION_CONTROL + size)
        return err_set(err, errlen, SLUICE_ERR_PROTOCOL,
                       "shm: the region has %lld bytes, not the %llu announced",
                       (long long)st.st_size, (unsigned long long)(SHM_REGION_CONTROL + size));
    uint8_t *map = mmap(NULL, SHM_REGION_CONTROL + size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (map == MAP_FAILED)
        return err_set(err, errlen, -errno, "shm: mmap: %s", strerror(errno));
    int rc = region_new(size, map, true, out);
    if (rc != 0) {
        munmap(map, SHM_REGION_CONTROL + size);
        return err_set(err, errlen, rc, "shm: %s", sluice_strerror(rc));
    }
    return 0;
}

void shm_region_ref(struct shm_region *r)
{
    atomic_fetch_add_explicit(&r->refs, 1, memory_order_relaxed);
}

void shm_region_unref(struct shm_region *r)
{
    if (!r || atomic_fetch_sub_explicit(&r->refs, 1, memory_order_acq_rel) != 1)
        return;
    munmap(r->map, r->map_len);
    if (r->fd >= 0)
        close(r->fd);
    pthread_mutex_destroy(&r->mu);
    pthread_mutex_destroy(&r->amu);
    shm_arena_destroy(&r->blocks);
    shm_tracker_release_all(&r->held);
    free(r);
}

int shm_region_fd(const struct shm_region *r)
{
    return r->fd;
}

uint64_t shm_region_id(const struct shm_region *r)
{
    return r->id;
}

uint64_t shm_region_file_len(const struct shm_region *r)
{
    return r->map_len;
}

int shm_region_offset_of(const struct shm_region *r, const void *p, size_t len, uint64_t *offset)
{
    uintptr_t a = (uintptr_t)p, lo = (uintptr_t)r->map;
    if (a < lo || a - lo > r->map_len || len > r->map_len - (a - lo))
        return SLUICE_ERR_NOT_FOUND;
    *offset = a - lo;
    return 0;
}

int shm_region_write(struct shm_region *r, const struct iovec *pieces, unsigned n, size_t len)
{
    uint64_t head = atomic_load_explicit(&r->ctl->head, memory_order_acquire);
    if (!shm_ring_head_ok(r->wpos, r->seen_head, head))
        return SLUICE_ERR_PROTOCOL;
    r->seen_head = head;
    struct shm_ring_place p;
    int rc = shm_ring_place(r->size, r->wpos, head, len, r->big, &p);
    if (rc != 0)
        return rc;
    if (p.pad)
        shm_ring_put_header(r->ring + r->wpos % r->size, SHM_RING_PAD, p.pad);
    shm_ring_put_header(r->ring + p.off, SHM_RING_DATA, len);
    uint8_t *dst = r->ring + p.off + SHM_RING_HDR;
    for (unsigned i = 0; i < n; i++) {
        memcpy(dst, pieces[i].iov_base, pieces[i].iov_len);
        dst += pieces[i].iov_len;
    }
    r->wpos += p.total;
    if (p.total - p.pad > r->big)
        r->big = p.total - p.pad;
    /* The envelope that announces the block is written after this. */
    atomic_thread_fence(memory_order_release);
    return 0;
}

/* Takes in the blocks the reader gave back. amu held. */
static void collect_locked(struct shm_region *r)
{
    uint32_t words = (r->blocks.n + 63) / 64;
    for (uint32_t w = 0; w < words; w++) {
        if (atomic_load_explicit(&r->ctl->release[w], memory_order_relaxed) == 0)
            continue;
        uint64_t bits = atomic_exchange_explicit(&r->ctl->release[w], 0, memory_order_acquire);
        shm_arena_collect(&r->blocks, w, bits);
    }
}

int shm_region_arena_alloc(struct shm_region *r, uint64_t bytes, uint8_t **block, uint64_t *cap)
{
    if (!r->arena || bytes == 0 || bytes > r->arena_size)
        return SLUICE_ERR_LIMIT;
    pthread_mutex_lock(&r->amu);
    int64_t g = -1;
    if (!r->arena_stopped) {
        collect_locked(r);
        g = shm_arena_alloc(&r->blocks, bytes);
    }
    uint32_t k = g >= 0 ? shm_arena_block(&r->blocks, (uint32_t)g) : 0;
    pthread_mutex_unlock(&r->amu);
    if (g < 0)
        return SLUICE_ERR_LIMIT;
    shm_region_ref(r);
    *block = r->arena + (uint64_t)g * SHM_ARENA_GRANULE;
    *cap = (uint64_t)k * SHM_ARENA_GRANULE;
    return 0;
}

void shm_region_arena_put(struct shm_region *r, const uint8_t *block)
{
    uint64_t g = (uint64_t)(block - r->arena) / SHM_ARENA_GRANULE;
    pthread_mutex_lock(&r->amu);
    shm_arena_unref(&r->blocks, (uint32_t)g);
    pthread_mutex_unlock(&r->amu);
    shm_region_unref(r);
}

bool shm_region_arena_stopped(struct shm_region *r)
{
    pthread_mutex_lock(&r->amu);
    bool stopped = r->arena_stopped;
    pthread_mutex_unlock(&r->amu);
    return stopped;
}

void shm_region_arena_stop(struct shm_region *r)
{
    pthread_mutex_lock(&r->amu);
    r->arena_stopped = true;
    pthread_mutex_unlock(&r->amu);
}

bool shm_region_in_arena(const struct shm_region *r, const void *p, size_t len)
{
    uintptr_t a = (uintptr_t)p, lo = (uintptr_t)r->arena;
    return r->arena && a >= lo && a - lo < r->arena_size && len <= r->arena_size - (a - lo);
}

int shm_region_write_extern(struct shm_region *r, const uint8_t *p, size_t len)
{
    if (len == 0 || !shm_region_in_arena(r, p, len))
        return SLUICE_ERR_NOT_FOUND;
    uint64_t at = (uint64_t)(p - r->arena);
    uint32_t g = (uint32_t)(at / SHM_ARENA_GRANULE);
    uint64_t head = atomic_load_explicit(&r->ctl->head, memory_order_acquire);
    if (!shm_ring_head_ok(r->wpos, r->seen_head, head))
        return SLUICE_ERR_PROTOCOL;
    r->seen_head = head;
    struct shm_ring_place pl;
    int rc = shm_ring_place(r->size, r->wpos, head, SHM_RING_EXTERN_LEN, r->big, &pl);
    if (rc != 0)
        return rc == SLUICE_ERR_TOO_LARGE ? SLUICE_ERR_LIMIT : rc;
    pthread_mutex_lock(&r->amu);
    bool lent = shm_arena_lend(&r->blocks, g, at, len);
    pthread_mutex_unlock(&r->amu);
    if (!lent)
        return SLUICE_ERR_NOT_FOUND;
    if (pl.pad)
        shm_ring_put_header(r->ring + r->wpos % r->size, SHM_RING_PAD, pl.pad);
    shm_ring_put_extern(r->ring + pl.off, at, len);
    r->wpos += pl.total;
    if (pl.total - pl.pad > r->big)
        r->big = pl.total - pl.pad;
    /* The payload's bytes, and then the envelope that announces the block, come after this. */
    atomic_thread_fence(memory_order_release);
    return 0;
}

uint64_t shm_region_arena_size(const struct shm_region *r)
{
    return r->arena_size;
}

int shm_region_take(struct shm_region *r, uint8_t **data, uint64_t *len, uint64_t *pos)
{
    atomic_thread_fence(memory_order_acquire);
    pthread_mutex_lock(&r->mu);
    struct shm_ring_block b;
    int rc = shm_ring_read(r->ring, r->size, r->rpos, r->held.head, &b);
    /* A payload in the arena: its place is checked here, and the block's first granule goes
     * back to the writer with the ring's block (tag: the granule + 1). */
    uint64_t tag = 0;
    if (rc == 0 && b.ext) {
        if (b.off >= r->arena_size || b.len > r->arena_size - b.off)
            rc = SLUICE_ERR_PROTOCOL;
        tag = b.off / SHM_ARENA_GRANULE + 1;
    }
    if (rc == 0)
        rc = shm_tracker_add(&r->held, b.start, b.next, tag, r->size / SHM_RING_ALIGN);
    if (rc == 0)
        r->rpos = b.next;
    pthread_mutex_unlock(&r->mu);
    if (rc != 0)
        return rc;
    shm_region_ref(r);
    *data = (b.ext ? r->arena : r->ring) + b.off;
    *len = b.len;
    *pos = b.start;
    return 0;
}

void shm_region_release(struct shm_region *r, uint64_t pos)
{
    if (getpid() != r->pid) {
        shm_region_unref(r);
        return;
    }
    pthread_mutex_lock(&r->mu);
    uint64_t tag = 0;
    int rc = shm_tracker_release(&r->held, pos, &tag);
    assert(rc == 0);
    (void)rc;
    if (tag) {
        uint64_t g = tag - 1;
        atomic_fetch_or_explicit(&r->ctl->release[g / 64], (uint64_t)1 << (g % 64),
                                 memory_order_release);
    }
    atomic_store_explicit(&r->ctl->head, r->held.head, memory_order_release);
    pthread_mutex_unlock(&r->mu);
    shm_region_unref(r);
}

uint64_t shm_region_size(const struct shm_region *r)
{
    return r->size;
}

uint64_t shm_region_held(struct shm_region *r)
{
    pthread_mutex_lock(&r->mu);
    uint64_t n = r->held.tail - r->held.head;
    pthread_mutex_unlock(&r->mu);
    return n;
}
