/* The shared region's shell (common/shm_region.h), both sides in this process: a worker's writes
 * come out whole and in order on the reader's side and space comes back as blocks are released;
 * what a worker refuses to map (a descriptor not sealed against resizing, a size other than the
 * one announced); and a reader's head that moved backwards or past what was written, which the
 * worker refuses with SLUICE_ERR_PROTOCOL instead of writing over held blocks. Where a taken
 * block lies for another process: the reader's own descriptor (kept open until the last
 * reference goes; none on the worker's side), its offset in the memory file (another mapping of
 * the descriptor reads the same bytes there), a unique id, and bytes outside the mapping. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <fcntl.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "common/shm_arena.h"
#include "common/shm_region.h"
#include "common/shm_ring.h"
#include "sluice/sluice.h"

#define MIB ((uint64_t)1 << 20)

/* A reader's region and the worker's mapping of it. */
static void pair(uint64_t size, struct shm_region **reader, struct shm_region **worker)
{
    int fd;
    assert_int_equal(shm_region_create(size, reader, &fd), 0);
    char err[SLUICE_ERRMSG_SIZE];
    assert_int_equal(shm_region_attach(fd, size, worker, err, sizeof err), 0);
    close(fd);
}

static int write_fill(struct shm_region *w, size_t len, uint8_t fill)
{
    uint8_t *buf = malloc(len);
    assert_non_null(buf);
    memset(buf, fill, len);
    /* Two pieces, as a reply of several chunks comes. */
    struct iovec iov[2] = {{buf, len / 2}, {buf + len / 2, len - len / 2}};
    int rc = shm_region_write(w, iov, 2, len);
    free(buf);
    return rc;
}

static void test_write_take_release(void **state)
{
    (void)state;
    struct shm_region *r, *w;
    pair(MIB, &r, &w);
    assert_int_equal(shm_region_size(r), MIB);
    uint64_t pos[3];
    uint8_t *data;
    uint64_t len;
    /* Three blocks of 300 kB fill the ring; a fourth does not fit until one is released. */
    for (int i = 0; i < 3; i++)
        assert_int_equal(write_fill(w, 300000, (uint8_t)(i + 1)), 0);
    assert_int_equal(write_fill(w, 300000, 9), SLUICE_ERR_LIMIT);
    for (int i = 0; i < 3; i++) {
        assert_int_equal(shm_region_take(r, &data, &len, &pos[i]), 0);
        assert_int_equal(len, 300000);
        assert_int_equal(data[0], i + 1);
        assert_int_equal(data[len - 1], i + 1);
    }
    assert_true(shm_region_held(r) >= 900000);
    /* Released out of order: the space comes back once the first goes. */
    shm_region_release(r, pos[1]);
    assert_int_equal(write_fill(w, 300000, 4), SLUICE_ERR_LIMIT);
    shm_region_release(r, pos[0]);
    assert_int_equal(write_fill(w, 300000, 4), 0);
    assert_int_equal(shm_region_take(r, &data, &len, &pos[0]), 0);
    assert_int_equal(data[0], 4);
    shm_region_release(r, pos[2]);
    shm_region_release(r, pos[0]);
    assert_int_equal(shm_region_held(r), 0);
    /* Larger than the ring: never. */
    assert_int_equal(write_fill(w, MIB, 1), SLUICE_ERR_TOO_LARGE);
    shm_region_unref(w);
    shm_region_unref(r);
}

/* A block taken keeps the mapping alive after the region's own reference is gone. */
static void test_place_for_another_process(void **state)
{
    (void)state;
    struct shm_region *r, *w, *r2, *w2;
    pair(MIB, &r, &w);
    pair(MIB, &r2, &w2);
    int fd = shm_region_fd(r);
    assert_true(fd >= 0 && (fcntl(fd, F_GETFD) & FD_CLOEXEC));
    assert_int_equal(shm_region_fd(w), -1);
    assert_true(shm_region_id(r) != shm_region_id(r2) && shm_region_id(r) != 0);
    assert_int_equal(shm_region_file_len(r), SHM_REGION_CONTROL + MIB);
    assert_int_equal(write_fill(w, 5000, 7), 0);
    uint8_t *data;
    uint64_t len, pos, off;
    assert_int_equal(shm_region_take(r, &data, &len, &pos), 0);
    assert_int_equal(shm_region_offset_of(r, data, len, &off), 0);
    assert_true(off >= SHM_REGION_CONTROL && off + len <= shm_region_file_len(r));
    /* Another mapping of the descriptor (what a process it is sent to makes) has the bytes. */
    uint8_t *other = mmap(NULL, shm_region_file_len(r), PROT_READ, MAP_PRIVATE, fd, 0);
    assert_true(other != MAP_FAILED);
    assert_memory_equal(other + off, data, len);
    munmap(other, shm_region_file_len(r));
    /* Outside the mapping, or running past its end. */
    uint8_t local[16];
    assert_int_equal(shm_region_offset_of(r, local, sizeof local, &off), SLUICE_ERR_NOT_FOUND);
    assert_int_equal(shm_region_offset_of(r, data, shm_region_file_len(r), &off),
                     SLUICE_ERR_NOT_FOUND);
    shm_region_release(r, pos);
    shm_region_unref(w);
    shm_region_unref(w2);
    shm_region_unref(r2);
    /* The last reference closes the descriptor. */
    shm_region_unref(r);
    assert_int_equal(fcntl(fd, F_GETFD), -1);
}

static void test_block_outlives_region(void **state)
{
    (void)state;
    struct shm_region *r, *w;
    pair(MIB, &r, &w);
    /* Nothing written yet: a fresh ring holds no valid block. */
    uint8_t *data;
    uint64_t len, pos;
    assert_int_equal(shm_region_take(r, &data, &len, &pos), SLUICE_ERR_PROTOCOL);
    assert_int_equal(write_fill(w, 100000, 7), 0);
    shm_region_unref(w);
    assert_int_equal(shm_region_take(r, &data, &len, &pos), 0);
    shm_region_unref(r);
    assert_int_equal(data[99999], 7);
    shm_region_release(r, pos);
}

static void test_attach_refuses(void **state)
{
    (void)state;
    char err[SLUICE_ERRMSG_SIZE];
    struct shm_region *w;
    /* Not sealed: the reader could shrink it under the worker. */
    int fd = memfd_create("test", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    assert_true(fd >= 0);
    assert_int_equal(ftruncate(fd, SHM_REGION_CONTROL + MIB), 0);
    assert_int_equal(shm_region_attach(fd, MIB, &w, err, sizeof err), SLUICE_ERR_PROTOCOL);
    assert_string_equal(err, "shm: the region is not sealed against resizing");
    /* Sealed, but not the size announced. */
    assert_int_equal(fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW), 0);
    assert_int_equal(shm_region_attach(fd, 2 * MIB, &w, err, sizeof err), SLUICE_ERR_PROTOCOL);
    assert_string_equal(err, "shm: the region has 1052672 bytes, not the 2101248 announced");
    /* A size no ring may have. */
    assert_int_equal(shm_region_attach(fd, 1000, &w, err, sizeof err), SLUICE_ERR_PROTOCOL);
    assert_string_equal(err, "shm: a ring of 1000 bytes");
    /* The right one. */
    assert_int_equal(shm_region_attach(fd, MIB, &w, err, sizeof err), 0);
    shm_region_unref(w);
    close(fd);
    /* Not a memfd at all. */
    int p[2];
    assert_int_equal(pipe(p), 0);
    assert_int_equal(shm_region_attach(p[0], MIB, &w, err, sizeof err), SLUICE_ERR_PROTOCOL);
    close(p[0]);
    close(p[1]);
}

/* A hostile reader writes an impossible head into the control page: the worker refuses. */
static void test_bad_head_refused(void **state)
{
    (void)state;
    int fd;
    struct shm_region *r, *w;
    assert_int_equal(shm_region_create(MIB, &r, &fd), 0);
    char err[SLUICE_ERRMSG_SIZE];
    assert_int_equal(shm_region_attach(fd, MIB, &w, err, sizeof err), 0);
    /* The reader's own view of the control page, as a hostile reader would write it. */
    uint8_t *ctl = mmap(NULL, SHM_REGION_CONTROL, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    assert_true(ctl != MAP_FAILED);
    close(fd);
    _Atomic uint64_t *head = (_Atomic uint64_t *)(ctl + 64);
    assert_int_equal(write_fill(w, 100000, 1), 0);
    /* Past what was written. */
    atomic_store(head, 1u << 30);
    assert_int_equal(write_fill(w, 100000, 1), SLUICE_ERR_PROTOCOL);
    /* Backwards, after a real release moved it. */
    uint8_t *data;
    uint64_t len, pos;
    atomic_store(head, 0);
    assert_int_equal(shm_region_take(r, &data, &len, &pos), 0);
    shm_region_release(r, pos);
    assert_true(atomic_load(head) > 0);
    assert_int_equal(write_fill(w, 100000, 2), 0);
    atomic_store(head, 0);
    assert_int_equal(write_fill(w, 100000, 3), SLUICE_ERR_PROTOCOL);
    munmap(ctl, SHM_REGION_CONTROL);
    shm_region_unref(w);
    shm_region_unref(r);
}

/* The arena: a value the worker builds there is announced in place, the reader sees it where it
 * lies (in its own mapping, at the same offset), the block stays out of the worker's hands until
 * the reader releases it, and it is then the first one handed out again. */
static void test_arena_in_place(void **state)
{
    (void)state;
    struct shm_region *r, *w;
    pair(64 * MIB, &r, &w);
    assert_int_equal(shm_region_size(r), 32 * MIB);
    assert_int_equal(shm_region_arena_size(r), 32 * MIB);
    assert_int_equal(shm_region_arena_size(w), 32 * MIB);
    uint8_t *b0, *b1, *b2;
    uint64_t cap;
    assert_int_equal(shm_region_arena_alloc(w, 64 * MIB, &b0, &cap), SLUICE_ERR_LIMIT);
    assert_int_equal(shm_region_arena_alloc(w, MIB + 1, &b0, &cap), 0);
    assert_int_equal(cap, MIB + SHM_ARENA_GRANULE);
    for (size_t i = 0; i < 300000; i++)
        b0[4096 + i] = (uint8_t)(i * 7);
    /* Not a block's first granule, not in the arena: refused, nothing written. */
    assert_int_equal(shm_region_write_extern(w, b0 + SHM_ARENA_GRANULE, 10), SLUICE_ERR_NOT_FOUND);
    uint8_t outside[16];
    assert_int_equal(shm_region_write_extern(w, outside, 16), SLUICE_ERR_NOT_FOUND);
    assert_int_equal(shm_region_write_extern(w, b0 + 4096, 300000), 0);
    /* Lent: the same block cannot go out twice. */
    assert_int_equal(shm_region_write_extern(w, b0 + 4096, 10), SLUICE_ERR_NOT_FOUND);
    uint8_t *data;
    uint64_t len, pos;
    assert_int_equal(shm_region_take(r, &data, &len, &pos), 0);
    assert_int_equal(len, 300000);
    for (size_t i = 0; i < 300000; i++)
        if (data[i] != (uint8_t)(i * 7))
            fail_msg("byte %zu differs", i);
    /* It lies in the reader's mapping where another process finds it. */
    uint64_t off;
    assert_int_equal(shm_region_offset_of(r, data, len, &off), 0);
    assert_int_equal(off, SHM_REGION_CONTROL + 32 * MIB + 4096);
    /* The worker lets go; the reader still holds it: the next block is another. */
    shm_region_arena_put(w, b0);
    assert_int_equal(shm_region_arena_alloc(w, 100, &b1, &cap), 0);
    assert_true(b1 == b0 + MIB + SHM_ARENA_GRANULE);
    shm_region_arena_put(w, b1);
    /* Released by the reader: the first block handed out again. */
    shm_region_release(r, pos);
    assert_int_equal(shm_region_arena_alloc(w, 100, &b2, &cap), 0);
    assert_true(b2 == b0);
    /* A connection that ended hands out no more. */
    shm_region_arena_stop(w);
    assert_int_equal(shm_region_arena_alloc(w, 100, &b1, &cap), SLUICE_ERR_LIMIT);
    shm_region_arena_put(w, b2);
    shm_region_unref(w);
    shm_region_unref(r);
    /* A region below SHM_ARENA_REGION_MIN has none. */
    pair(MIB, &r, &w);
    assert_int_equal(shm_region_arena_size(r), 0);
    assert_int_equal(shm_region_arena_alloc(w, 100, &b1, &cap), SLUICE_ERR_LIMIT);
    shm_region_unref(w);
    shm_region_unref(r);
}

/* A hostile worker announces a payload outside the arena: the reader refuses it. */
static void test_extern_outside_refused(void **state)
{
    (void)state;
    int fd;
    struct shm_region *r;
    assert_int_equal(shm_region_create(64 * MIB, &r, &fd), 0);
    uint8_t *map =
        mmap(NULL, SHM_REGION_CONTROL + 32 * MIB, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    assert_true(map != MAP_FAILED);
    close(fd);
    uint8_t *ring = map + SHM_REGION_CONTROL;
    uint8_t *data;
    uint64_t len, pos;
    shm_ring_put_extern(ring, 32 * MIB - 10, 11);
    assert_int_equal(shm_region_take(r, &data, &len, &pos), SLUICE_ERR_PROTOCOL);
    shm_ring_put_extern(ring, 32 * MIB, 1);
    assert_int_equal(shm_region_take(r, &data, &len, &pos), SLUICE_ERR_PROTOCOL);
    shm_ring_put_extern(ring, UINT64_MAX - 5, 10);
    assert_int_equal(shm_region_take(r, &data, &len, &pos), SLUICE_ERR_PROTOCOL);
    /* At the very end of the arena: accepted. */
    shm_ring_put_extern(ring, 32 * MIB - 10, 10);
    assert_int_equal(shm_region_take(r, &data, &len, &pos), 0);
    assert_int_equal(len, 10);
    shm_region_release(r, pos);
    munmap(map, SHM_REGION_CONTROL + 32 * MIB);
    shm_region_unref(r);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_write_take_release),
        cmocka_unit_test(test_place_for_another_process),
        cmocka_unit_test(test_block_outlives_region),
        cmocka_unit_test(test_attach_refuses),
        cmocka_unit_test(test_bad_head_refused),
        cmocka_unit_test(test_arena_in_place),
        cmocka_unit_test(test_extern_outside_refused),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
