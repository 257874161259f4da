/* bench_caps: the dispatcher's cost of listing a shared job's tasks with each client's
 * capabilities (dispatcher/capcache.h) when many clients join a job spread over many workers.
 *
 * Every client's first heartbeat reply lists every task of its iteration with the client's
 * capability for it, cap_client_key(cap_task_key(iteration secret, task), client). The baseline,
 * taken in the same run, derives both with OpenSSL's one-shot HMAC() as a plain implementation
 * would; the measured path is capcache_client_keys (task secrets kept per iteration, one HMAC
 * context per thread). It prints both times per capability and their ratio, and checks that
 * both paths give the same bytes (exit 1 otherwise).
 *
 *   bench_caps [CLIENTS [TASKS]]      (default 500 clients, 5000 tasks) */
#include "common/cap.h"
#include "dispatcher/capcache.h"

#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* cap.h's derivation with a one-shot HMAC() per call: label || be64(id), cut to CAP_KEY_LEN. */
static void oneshot(const uint8_t secret[CAP_KEY_LEN], const char label[15], uint64_t id,
                    uint8_t out[CAP_KEY_LEN])
{
    uint8_t msg[23], mac[EVP_MAX_MD_SIZE];
    memcpy(msg, label, 15);
    for (int i = 0; i < 8; i++)
        msg[15 + i] = (uint8_t)(id >> (56 - 8 * i));
    unsigned len = 0;
    HMAC(EVP_sha256(), secret, CAP_KEY_LEN, msg, sizeof msg, mac, &len);
    memcpy(out, mac, CAP_KEY_LEN);
}

int main(int argc, char **argv)
{
    long clients = argc > 1 ? atol(argv[1]) : 500, tasks = argc > 2 ? atol(argv[2]) : 5000;
    if (clients < 1 || tasks < 1) {
        fprintf(stderr, "usage: bench_caps [CLIENTS [TASKS]]\n");
        return 2;
    }
    uint64_t *ids = malloc((size_t)tasks * sizeof *ids);
    uint8_t(*base)[CAP_KEY_LEN] = malloc((size_t)tasks * sizeof *base);
    uint8_t(*got)[CAP_KEY_LEN] = malloc((size_t)tasks * sizeof *got);
    if (!ids || !base || !got)
        return 1;
    for (long i = 0; i < tasks; i++)
        ids[i] = 1000 + (uint64_t)i;
    const uint8_t secret[CAP_KEY_LEN] = "iteration-secre";
    double t0 = now_s();
    for (long c = 1; c <= clients; c++) {
        for (long i = 0; i < tasks; i++) {
            uint8_t task_key[CAP_KEY_LEN];
            oneshot(secret, "sluice task:   ", ids[i], task_key);
            oneshot(task_key, "sluice client: ", (uint64_t)c, base[i]);
        }
    }
    double t_base = now_s() - t0;
    struct capcache cc;
    capcache_init(&cc);
    t0 = now_s();
    for (long c = 1; c <= clients; c++)
        capcache_client_keys(&cc, (uint64_t)c, 1, secret, ids, (size_t)tasks, got);
    double t_cache = now_s() - t0;
    int bad = memcmp(base, got, (size_t)tasks * sizeof *got) != 0;
    capcache_release(&cc);
    double n = (double)clients * (double)tasks;
    printf("%ld clients x %ld tasks: %.0f capabilities\n", clients, tasks, n);
    printf("  one-shot HMAC (baseline)   %8.3f s  %6.3f us each\n", t_base, t_base / n * 1e6);
    printf("  capcache_client_keys       %8.3f s  %6.3f us each\n", t_cache, t_cache / n * 1e6);
    printf("  speedup                    %8.2fx\n", t_cache > 0 ? t_base / t_cache : 0.0);
    if (bad)
        fprintf(stderr, "bench_caps: the two paths disagree\n");
    free(ids);
    free(base);
    free(got);
    return bad;
}
