/* `sluice job set-weights` and sluice_set_weights: the refusals made before any dispatcher is
 * asked (the options, the weights' text and values), each with its exact message and exit
 * status, and --help; then the call itself against a fake dispatcher (an RPC server on a thread of
 * this test that records each SetMixWeights request and answers it): what reaches the wire, the
 * line the command prints, and a refusal of the dispatcher passed on as it came. The refusals use
 * an address nothing listens on: one that reached for the network would show as a connection
 * failure (exit 1) rather than the expected usage error. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "common/error.h"
#include "common/rpc_server.h"
#include "lib/loop.h"
#include "lib/proc.h"
#include "sluice/sluice.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <uv.h>

#define NOWHERE "127.0.0.1:1"

struct job_case {
    const char *args[10]; /* after `sluice job`, NULL-terminated */
    int status;
    const char *err;
};

static void check(const struct job_case *c)
{
    char *argv[13] = {(char *)bin_path("sluice"), "job"};
    int n = 2;
    for (int i = 0; c->args[i]; i++)
        argv[n++] = (char *)c->args[i];
    argv[n] = NULL;
    char *out = NULL, *err = NULL;
    int rc = run_cmd(argv, 30000, &out, &err);
    if (rc != c->status || strcmp(err, c->err) != 0 || out[0]) {
        fprintf(stderr, "sluice job");
        for (int i = 2; i < n; i++)
            fprintf(stderr, " %s", argv[i]);
        fprintf(stderr, "\nstatus %d\nstdout:\n%s\nstderr:\n%s\n", rc, out, err);
    }
    assert_int_equal(rc, c->status);
    assert_string_equal(err, c->err);
    assert_string_equal(out, "");
    free(out);
    free(err);
}

static void test_refusals(void **state)
{
    (void)state;
    const struct job_case cases[] = {
        {{"set-weights", "--dispatcher", NOWHERE, "0.5,0.5", NULL},
         2,
         "sluice: usage: --dispatcher H:P, --job NAME and the weights W1,W2,... are required (try "
         "'sluice job --help')\n"},
        {{"set-weights", "--dispatcher", NOWHERE, "--job", "train", NULL},
         2,
         "sluice: usage: --dispatcher H:P, --job NAME and the weights W1,W2,... are required (try "
         "'sluice job --help')\n"},
        {{"set-weights", "--dispatcher", NOWHERE, "--job", "train", "0.5,abc", NULL},
         2,
         "sluice: usage: weights: 'abc' is not a number\n"},
        {{"set-weights", "--dispatcher", NOWHERE, "--job", "train", "1,2 ", NULL},
         2,
         "sluice: usage: weights: '2 ' is not a number\n"},
        {{"set-weights", "--dispatcher", NOWHERE, "--job", "train", "1,,2", NULL},
         2,
         "sluice: usage: weights: entry 1 of '1,,2' is empty\n"},
        {{"set-weights", "--dispatcher", NOWHERE, "--job", "train", "0.5,0.25,-1", NULL},
         2,
         "sluice: usage: weight 2 is -1, expected a number >= 0\n"},
        {{"set-weights", "--dispatcher", NOWHERE, "--job", "train", "1,inf", NULL},
         2,
         "sluice: usage: weight 1 is inf, expected a finite number >= 0\n"},
        {{"set-weights", "--dispatcher", NOWHERE, "--job", "train", "0,0,0", NULL},
         2,
         "sluice: usage: weights: every weight is 0, expected at least one above 0\n"},
        {{"set-weights", "--dispatcher", NOWHERE, "--job", "train", "--at", "0", "1,2", NULL},
         2,
         "sluice: usage: --at takes an output position >= 1, not '0'\n"},
        {{"set-weights", "--dispatcher", NOWHERE, "--job", "train", "--bogus", "1,2", NULL},
         2,
         "sluice: usage: unknown or incomplete option '--bogus' (try 'sluice job --help')\n"},
        {{"set-weights", "--dispatcher", NOWHERE, "--job", "train", "1", "2", NULL},
         2,
         "sluice: usage: one W1,W2,... expected; unexpected '2' (try 'sluice job --help')\n"},
        {{"--dispatcher", NOWHERE, "reweigh", NULL},
         2,
         "sluice: usage: unknown job command 'reweigh' (try 'sluice job --help')\n"},
        {{NULL}, 2, "sluice: usage: sluice job set-weights|checkpoint (try 'sluice job --help')\n"},
        {{"checkpoint", "--dispatcher", NOWHERE, "--job", "train", NULL},
         2,
         "sluice: usage: --dispatcher H:P, --job NAME and --output FILE are required (try "
         "'sluice job --help')\n"},
        {{"checkpoint", "--dispatcher", NOWHERE, "--job", "train", "--step", "0", "--output", "x",
          NULL},
         2,
         "sluice: usage: --step takes a step from 1 to 2^62 or 'latest', not '0'\n"},
        {{"checkpoint", "--dispatcher", NOWHERE, "--job", "train", "--step", "4611686018427387905",
          "--output", "x", NULL},
         2,
         "sluice: usage: --step takes a step from 1 to 2^62 or 'latest', not "
         "'4611686018427387905'\n"},
        {{"checkpoint", "--dispatcher", NOWHERE, "--job", "train", "--at", "3", "--output", "x",
          NULL},
         2,
         "sluice: usage: unknown or incomplete option '--at' (try 'sluice job --help')\n"},
        {{"checkpoint", "--dispatcher", NOWHERE, "--job", "tr\001in", "--output", "x", NULL},
         2,
         "sluice: usage: job name: control character at byte 2\n"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
        check(&cases[i]);
}

/* 65 weights: more than a mix has inputs, refused here. */
static void test_too_many(void **state)
{
    (void)state;
    char weights[65 * 2];
    for (int i = 0; i < 65; i++) {
        weights[2 * i] = '1';
        weights[2 * i + 1] = ',';
    }
    weights[sizeof weights - 1] = '\0';
    const struct job_case c = {
        {"set-weights", "--dispatcher", NOWHERE, "--job", "train", weights, NULL},
        2,
        "sluice: usage: weights: expected 1 to 64 (one per input of the mix), found 65\n"};
    check(&c);
}

static void test_help(void **state)
{
    (void)state;
    char *const argv[] = {(char *)bin_path("sluice"), "job", "set-weights", "--help", NULL};
    char *out = NULL, *err = NULL;
    assert_int_equal(run_cmd(argv, 30000, &out, &err), 0);
    assert_string_equal(err, "");
    const char *usage = "usage: sluice job set-weights --dispatcher H:P --job NAME "
                        "[--dataset-id ID] [--at N]\n";
    assert_int_equal(strncmp(out, usage, strlen(usage)), 0);
    free(out);
    free(err);
}

/* ---- a fake dispatcher ------------------------------------------------------------------- */

/* What the fake answers when a request names no position and no dataset. */
#define FAKE_FROM 4096
#define FAKE_DATASET "mix-a"
/* The job the fake knows no mix of. */
#define FAKE_UNKNOWN_JOB "nosuch"

struct fake {
    uv_loop_t loop;
    uv_async_t stop;
    uv_thread_t thread;
    struct rpc_server *srv;
    bool closed;
    char addr[64];
    uv_mutex_t mu; /* guards the fields below, written on the fake's thread */
    int requests;
    char job_name[256], dataset_id[256];
    double weights[80];
    size_t nweights;
    uint64_t at;
};

static void fake_on_request(struct rpc_server *srv, struct rpc_conn *conn,
                            const Sluice__Envelope *req, void *user)
{
    (void)srv;
    struct fake *f = user;
    if (req->body_case != SLUICE__ENVELOPE__BODY_SET_MIX_WEIGHTS || !req->set_mix_weights) {
        rpc_conn_reply_error(conn, req->id, SLUICE_ERR_UNSUPPORTED, "unexpected body %d",
                             (int)req->body_case);
        return;
    }
    const Sluice__SetMixWeightsRequest *r = req->set_mix_weights;
    uv_mutex_lock(&f->mu);
    f->requests++;
    snprintf(f->job_name, sizeof f->job_name, "%s", r->job_name ? r->job_name : "");
    snprintf(f->dataset_id, sizeof f->dataset_id, "%s", r->dataset_id ? r->dataset_id : "");
    f->nweights = r->n_weights < 80 ? r->n_weights : 80;
    for (size_t i = 0; i < f->nweights; i++)
        f->weights[i] = r->weights[i];
    f->at = r->at;
    uv_mutex_unlock(&f->mu);
    if (strcmp(r->job_name, FAKE_UNKNOWN_JOB) == 0) {
        rpc_conn_reply_error(conn, req->id, SLUICE_ERR_NOT_FOUND, "no mix is read as job '%s'",
                             r->job_name);
        return;
    }
    Sluice__SetMixWeightsReply body = SLUICE__SET_MIX_WEIGHTS_REPLY__INIT;
    body.from = r->at ? r->at : FAKE_FROM;
    body.dataset_id = r->dataset_id && r->dataset_id[0] ? r->dataset_id : FAKE_DATASET;
    Sluice__Envelope env = SLUICE__ENVELOPE__INIT;
    env.body_case = SLUICE__ENVELOPE__BODY_SET_MIX_WEIGHTS_REPLY;
    env.set_mix_weights_reply = &body;
    rpc_conn_reply(conn, req->id, &env);
}

static void fake_on_stop(uv_async_t *a)
{
    struct fake *f = a->data;
    rpc_server_close(f->srv, set_flag, &f->closed);
    uv_close((uv_handle_t *)&f->stop, NULL);
}

static void fake_run(void *arg)
{
    struct fake *f = arg;
    uv_run(&f->loop, UV_RUN_DEFAULT);
}

static void fake_start(struct fake *f)
{
    memset(f, 0, sizeof *f);
    assert_int_equal(uv_loop_init(&f->loop), 0);
    assert_int_equal(uv_mutex_init(&f->mu), 0);
    struct rpc_server_opts opts = {
        .host = "127.0.0.1",
        .role = SLUICE__ROLE__ROLE_DISPATCHER,
        .incarnation = 1,
        .on_request = fake_on_request,
        .user = f,
    };
    char err[SLUICE_ERRMSG_SIZE] = "";
    if (rpc_server_start(&f->loop, &opts, &f->srv, err, sizeof err) != 0)
        fail_msg("rpc_server_start: %s", err);
    snprintf(f->addr, sizeof f->addr, "127.0.0.1:%d", rpc_server_port(f->srv));
    assert_int_equal(uv_async_init(&f->loop, &f->stop, fake_on_stop), 0);
    f->stop.data = f;
    assert_int_equal(uv_thread_create(&f->thread, fake_run, f), 0);
}

static void fake_stop(struct fake *f)
{
    uv_async_send(&f->stop);
    assert_int_equal(uv_thread_join(&f->thread), 0);
    assert_true(f->closed);
    loop_finish(&f->loop);
    uv_mutex_destroy(&f->mu);
}

/* Runs `sluice job set-weights --dispatcher FAKE ARGS...` and checks its status and output. */
static void run_job(struct fake *f, int want_rc, const char *want_out, const char *want_err,
                    const char *const *args)
{
    char *argv[16] = {(char *)bin_path("sluice"),
                      "job",
                      "set-weights",
                      "--dispatcher",
                      f->addr,
                      "--timeout-ms",
                      "20000"};
    int n = 7;
    for (int i = 0; args[i]; i++)
        argv[n++] = (char *)args[i];
    argv[n] = NULL;
    char *out = NULL, *err = NULL;
    int rc = run_cmd(argv, 30000, &out, &err);
    if (rc != want_rc || strcmp(out, want_out) != 0 || strcmp(err, want_err) != 0)
        fprintf(stderr, "status %d\nstdout:\n%s\nstderr:\n%s\n", rc, out, err);
    assert_int_equal(rc, want_rc);
    assert_string_equal(out, want_out);
    assert_string_equal(err, want_err);
    free(out);
    free(err);
}

static void test_cli_against_a_dispatcher(void **state)
{
    (void)state;
    struct fake f;
    fake_start(&f);

    const char *const all[] = {"--job", "train", "--dataset-id", "mix",
                               "--at",  "500",   "0.5,0.3,0.2",  NULL};
    run_job(&f, 0, "job train: weights 0.5, 0.3, 0.2 from position 500 (dataset mix)\n", "", all);
    uv_mutex_lock(&f.mu);
    assert_int_equal(f.requests, 1);
    assert_string_equal(f.job_name, "train");
    assert_string_equal(f.dataset_id, "mix");
    assert_int_equal(f.at, 500);
    assert_int_equal(f.nweights, 3);
    assert_true(f.weights[0] == 0.5 && f.weights[1] == 0.3 && f.weights[2] == 0.2);
    uv_mutex_unlock(&f.mu);

    /* No position, no dataset: the dispatcher's; -0 goes out (and is printed) as 0. */
    const char *const plain[] = {"--job", "train", "1,-0,2e-1", NULL};
    run_job(&f, 0, "job train: weights 1, 0, 0.2 from position 4096 (dataset mix-a)\n", "", plain);
    uv_mutex_lock(&f.mu);
    assert_int_equal(f.requests, 2);
    assert_string_equal(f.dataset_id, "");
    assert_int_equal(f.at, 0);
    assert_int_equal(f.nweights, 3);
    assert_true(f.weights[1] == 0 && !signbit(f.weights[1]));
    uv_mutex_unlock(&f.mu);

    /* The dispatcher's refusal, as it came, exit 1. */
    const char *const unknown[] = {"--job", FAKE_UNKNOWN_JOB, "1,1", NULL};
    run_job(&f, 1, "", "sluice: job set-weights: no mix is read as job 'nosuch'\n", unknown);

    /* A local refusal never reaches it. */
    const char *const negative[] = {"--job", "train", "1,-1", NULL};
    run_job(&f, 2, "", "sluice: usage: weight 1 is -1, expected a number >= 0\n", negative);
    uv_mutex_lock(&f.mu);
    assert_int_equal(f.requests, 3);
    uv_mutex_unlock(&f.mu);
    fake_stop(&f);
}

static void test_api_against_a_dispatcher(void **state)
{
    (void)state;
    struct fake f;
    fake_start(&f);
    struct sluice_client_options o = {.dispatcher = f.addr, .timeout_ms = 20000};
    struct sluice_client *c = NULL;
    char err[SLUICE_ERRMSG_SIZE] = "";
    assert_int_equal(sluice_client_open(&o, &c, err, sizeof err), 0);
    const double w[] = {0.9, 0.09, 0.01};
    uint64_t from = 0;
    assert_int_equal(sluice_set_weights(c, "train", NULL, w, 3, 0, &from, err, sizeof err), 0);
    assert_int_equal(from, FAKE_FROM);
    assert_int_equal(sluice_set_weights(c, "train", "mix", w, 2, 77, &from, err, sizeof err), 0);
    assert_int_equal(from, 77);
    assert_int_equal(sluice_set_weights(c, "train", "", w, 1, 0, NULL, err, sizeof err), 0);
    uv_mutex_lock(&f.mu);
    assert_int_equal(f.requests, 3);
    assert_int_equal(f.nweights, 1);
    assert_true(f.weights[0] == 0.9);
    uv_mutex_unlock(&f.mu);
    from = 5;
    assert_int_equal(sluice_set_weights(c, FAKE_UNKNOWN_JOB, NULL, w, 3, 0, &from, err, sizeof err),
                     SLUICE_ERR_NOT_FOUND);
    assert_string_equal(err, "no mix is read as job 'nosuch'");
    assert_int_equal(from, 0);
    sluice_client_close(c);
    fake_stop(&f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_refusals),
        cmocka_unit_test(test_too_many),
        cmocka_unit_test(test_help),
        cmocka_unit_test(test_cli_against_a_dispatcher),
        cmocka_unit_test(test_api_against_a_dispatcher),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
