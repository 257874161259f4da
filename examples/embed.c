/* A whole sluice cluster in one process: a dispatcher and two workers started with
 * <sluice/server.h>, and range(10) read through the client of <sluice/sluice.h> in
 * distributed_epoch, where the dispatcher hands the splits of the source to the workers and
 * each element arrives exactly once. Exits 0 after checking that 0..9 each arrived once and
 * stopping everything.
 *
 *     cc embed.c $(pkg-config --cflags --libs sluice) -o embed && ./embed
 */
#include <sluice/server.h>
#include <sluice/sluice.h>

#include <stdio.h>
#include <string.h>

#define NWORKERS 2
#define N 10

int main(void)
{
    char err[SLUICE_ERRMSG_SIZE];
    int status = 1;
    struct sluice_dispatcher *dispatcher = NULL;
    struct sluice_worker *workers[NWORKERS] = {NULL};
    struct sluice_client *client = NULL;
    struct sluice_iterator *it = NULL;

    /* Zero-initialised options are the defaults: 127.0.0.1 and a free port. */
    struct sluice_dispatcher_options dopts = {.log_level = "warn"};
    if (sluice_dispatcher_start(&dopts, &dispatcher, err, sizeof err) < 0) {
        fprintf(stderr, "dispatcher: %s\n", err);
        return 1;
    }
    const char *target = sluice_dispatcher_target(dispatcher);
    for (int i = 0; i < NWORKERS; i++) {
        struct sluice_worker_options wopts = {.dispatcher = target, .log_level = "warn"};
        if (sluice_worker_start(&wopts, &workers[i], err, sizeof err) < 0) {
            fprintf(stderr, "worker %d: %s\n", i, err);
            goto out;
        }
    }

    struct sluice_client_options copts = {.dispatcher = target, .timeout_ms = 10000};
    if (sluice_client_open(&copts, &client, err, sizeof err) < 0) {
        fprintf(stderr, "client: %s\n", err);
        goto out;
    }
    struct sluice_read_options ropts = {.pipeline = "range(10)", .mode = SLUICE_DISTRIBUTED_EPOCH};
    if (sluice_iterator_open(client, &ropts, &it, err, sizeof err) < 0) {
        fprintf(stderr, "read: %s\n", err);
        goto out;
    }
    int seen[N] = {0};
    int count = 0;
    const struct sluice_element *elem;
    int rc;
    while ((rc = sluice_iterator_next(it, &elem, 10000, err, sizeof err)) == 1) {
        size_t nbytes;
        const void *data = sluice_element_data(elem, 0, &nbytes);
        int64_t v;
        if (sluice_element_dtype(elem, 0) != SLUICE_INT64 || nbytes != sizeof v) {
            fprintf(stderr, "read: unexpected element\n");
            goto out;
        }
        memcpy(&v, data, sizeof v);
        if (v < 0 || v >= N || seen[v]++) {
            fprintf(stderr, "read: %lld out of range or seen twice\n", (long long)v);
            goto out;
        }
        count++;
    }
    if (rc < 0) {
        fprintf(stderr, "read: %s\n", err);
        goto out;
    }
    if (count != N) {
        fprintf(stderr, "read: %d elements, expected %d\n", count, N);
        goto out;
    }
    printf("read %d elements from %d workers: 0..%d, each exactly once\n", count, NWORKERS, N - 1);
    status = 0;

out:
    sluice_iterator_close(it);
    sluice_client_close(client);
    /* A worker's stop drains it first: what it holds reaches its readers or other workers. */
    for (int i = 0; i < NWORKERS; i++) {
        if (workers[i])
            sluice_worker_stop(workers[i]);
    }
    sluice_dispatcher_stop(dispatcher);
    return status;
}
