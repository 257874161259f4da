/* sluice: the public C API.
 *
 * This header holds everything a program linked with libsluice may use:
 *   - the version and the error codes;
 *   - elements: tuples of typed tensors, as produced by pipelines and read from the service;
 *   - plugins: shared objects that add named functions to the pipeline language;
 *   - the client: register pipelines with a dispatcher and read their elements from workers.
 * <sluice/server.h> adds the dispatcher and the worker as objects a program can start itself.
 *
 * Conventions: functions returning int return 0 on success and a negative error code on failure;
 * sluice_strerror() turns any code into a message. Every type is opaque. Unless a function says
 * otherwise, pointers passed in are borrowed for the duration of the call only. */
#ifndef SLUICE_SLUICE_H
#define SLUICE_SLUICE_H

#include <sluice/version.h>

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- Version ----------------------------------------------------------------------------- */

/* <sluice/version.h> gives the version compiled against: SLUICE_VERSION_STRING ("X.Y.Z") and
 * SLUICE_VERSION_MAJOR, _MINOR and _PATCH. */

/* The version of the library linked at run time, "X.Y.Z": the same text `sluice --version`,
 * `sluice-dispatcher --version` and `sluice-worker --version` print after "sluice ". */
const char *sluice_version(void);

/* ---- Errors ------------------------------------------------------------------------------ */

/* Every function of this API (and of <sluice/server.h>) that can fail returns a negative code.
 * System errors pass through as negative errno values (-ECONNREFUSED, -ENOENT, ...); sluice's
 * own codes below lie strictly between SLUICE_ERR_BASE and SLUICE_ERR_LAST, far below the errno
 * range, so the two never collide. Codes are stable: new ones are only ever added before
 * SLUICE_ERR_LAST. */
enum sluice_err {
    SLUICE_OK = 0,
    SLUICE_ERR_BASE = -20000,
    SLUICE_ERR_INVALID = -20001,     /* invalid argument or malformed input */
    SLUICE_ERR_PARSE = -20002,       /* pipeline text does not parse */
    SLUICE_ERR_NOT_FOUND = -20003,   /* unknown id, name or file */
    SLUICE_ERR_CORRUPT = -20004,     /* checksum mismatch or undecodable record */
    SLUICE_ERR_TRUNCATED = -20005,   /* input ended in the middle of a record */
    SLUICE_ERR_TOO_LARGE = -20006,   /* a length over its configured limit */
    SLUICE_ERR_NOMEM = -20007,       /* allocation failed */
    SLUICE_ERR_TYPE = -20008,        /* dtype or shape does not fit the operation */
    SLUICE_ERR_PROTOCOL = -20009,    /* peer broke the wire protocol */
    SLUICE_ERR_VERSION = -20010,     /* protocol version mismatch */
    SLUICE_ERR_EXISTS = -20011,      /* already exists with a different definition */
    SLUICE_ERR_TIMEOUT = -20012,     /* a bounded wait ran out */
    SLUICE_ERR_CLOSED = -20013,      /* the object or connection is closed */
    SLUICE_ERR_UNAVAILABLE = -20014, /* peer not reachable now; retry may succeed */
    SLUICE_ERR_PLUGIN = -20015,      /* a plugin failed to load or register */
    SLUICE_ERR_FN = -20016,          /* a pipeline function failed on an element */
    SLUICE_ERR_JOURNAL = -20017,     /* the journal failed */
    SLUICE_ERR_FULL = -20018,        /* storage is full */
    SLUICE_ERR_CANCELLED = -20019,   /* the operation was cancelled */
    SLUICE_ERR_RESTARTED = -20020,   /* peer restarted and lost the state asked about */
    SLUICE_ERR_UNSUPPORTED = -20021, /* the request is valid but not supported */
    SLUICE_ERR_TASK_FAILED = -20022, /* a worker task's pipeline failed; the message says why */
    SLUICE_ERR_SERVER = -20023,      /* a server stopped on a failure; the message says why */
    SLUICE_ERR_AUTH = -20024,        /* authentication failed (wrong or missing token, bad peer) */
    SLUICE_ERR_DENIED = -20025,      /* not permitted (a path outside the data roots, ...) */
    SLUICE_ERR_LIMIT = -20026,       /* a configured resource limit was reached */
    SLUICE_ERR_NOT_LEADER = -20027,  /* a dispatcher replica that is not the leader; retry there */
    SLUICE_ERR_LAST = -20028
};

/* A static, human-readable message for any code: 0, one of sluice's own, or a negative errno.
 * Never returns NULL. Any thread. */
const char *sluice_strerror(int code);

/* Messages. A function that can fail with more to say than its code takes a buffer for the
 * message, err and its size errlen (buf and len for the lines of sluice_client_waiting and
 * sluice_iterator_waiting): on failure it writes one line there, NUL-terminated and cut to fit
 * when longer (nothing when the size is 0). SLUICE_ERRMSG_SIZE is the size sluice gives every
 * such buffer itself, inside the library and in its programs, so a buffer of that size receives
 * a message as whole as sluice keeps it:
 *
 *     char err[SLUICE_ERRMSG_SIZE];
 *     if (sluice_client_open(&options, &client, err, sizeof err) < 0)
 *         fprintf(stderr, "client: %s\n", err);
 *
 * A message that quotes a long input (a path, a pipeline's text) is cut at that size. */
#define SLUICE_ERRMSG_SIZE 1024

/* ---- Elements ---------------------------------------------------------------------------- */

enum sluice_dtype {
    SLUICE_BOOL = 0,
    SLUICE_INT8 = 1,
    SLUICE_INT16 = 2,
    SLUICE_INT32 = 3,
    SLUICE_INT64 = 4,
    SLUICE_UINT8 = 5,
    SLUICE_UINT16 = 6,
    SLUICE_UINT32 = 7,
    SLUICE_UINT64 = 8,
    SLUICE_FLOAT32 = 9,
    SLUICE_FLOAT64 = 10,
    SLUICE_BYTES = 11
};

#define SLUICE_MAX_RANK 8

/* An element: a tuple of one or more tensors (its components). */
struct sluice_element;

/* The name of a dtype ("int64", "bytes", ...), or "unknown". */
const char *sluice_dtype_name(enum sluice_dtype dtype);

/* The size in bytes of one value of a fixed-width dtype; 0 for SLUICE_BYTES. */
size_t sluice_dtype_size(enum sluice_dtype dtype);

/* Creates an empty element (no components). Returns NULL when out of memory. The caller owns it
 * and frees it with sluice_element_free(). */
struct sluice_element *sluice_element_new(void);
void sluice_element_free(struct sluice_element *elem);

/* Number of components. */
size_t sluice_element_num_components(const struct sluice_element *elem);

/* Accessors for component i (i < num_components; behaviour is undefined otherwise). */
enum sluice_dtype sluice_element_dtype(const struct sluice_element *elem, size_t i);
int sluice_element_rank(const struct sluice_element *elem, size_t i);
/* The shape: rank entries, valid until the element changes. */
const int64_t *sluice_element_shape(const struct sluice_element *elem, size_t i);
/* Number of values: the product of the shape (1 for a scalar). */
uint64_t sluice_element_num_values(const struct sluice_element *elem, size_t i);
/* For fixed-width dtypes: the values, row-major, native byte order; *nbytes receives their size.
 * For SLUICE_BYTES: the concatenation of all strings. Valid until the element changes. */
const void *sluice_element_data(const struct sluice_element *elem, size_t i, size_t *nbytes);
/* For SLUICE_BYTES components: string k (k < num_values), row-major. Returns 0, or
 * SLUICE_ERR_TYPE for a fixed-width component and SLUICE_ERR_INVALID for k out of range. */
int sluice_element_bytes_at(const struct sluice_element *elem, size_t i, uint64_t k,
                            const void **data, size_t *len);

/* Where a received element's values lie when they were not copied out of the shared-memory
 * region of a worker on this host (docs/reading.md "Local workers"): the region's descriptor in
 * this process (a memfd, open while the element or anything holding its values lives; dup it to
 * keep it longer), the values' offset in it, the region's size, and an id that no other region
 * of this process has. Another process that maps the descriptor (read-only, or privately) sees
 * the values for as long as this process holds them. */
struct sluice_shm_place {
    int fd;
    uint64_t offset;
    uint64_t region_len;
    uint64_t region_id;
};
/* Fills *out for component i and returns 0; SLUICE_ERR_NOT_FOUND when its values are not a view
 * of a region (copied, or received over TCP). */
int sluice_element_shm_place(const struct sluice_element *elem, size_t i,
                             struct sluice_shm_place *out);

/* Mutators, for plugins and programs building elements. They reuse the element's buffers, so
 * setting elements of the same shape repeatedly does not allocate. Setting a component
 * i >= num_components first grows the element to i + 1 components (as
 * sluice_element_set_num_components); i >= 64 is SLUICE_ERR_INVALID. */

/* Sets the number of components; new components are int64 scalars of value 0. Returns 0,
 * SLUICE_ERR_INVALID for n == 0 or n > 64, or SLUICE_ERR_NOMEM. */
int sluice_element_set_num_components(struct sluice_element *elem, size_t n);
/* Replaces component i by a fixed-width tensor: rank <= SLUICE_MAX_RANK dimensions, data holding
 * exactly product(shape) * sluice_dtype_size(dtype) bytes (copied). */
int sluice_element_set_tensor(struct sluice_element *elem, size_t i, enum sluice_dtype dtype,
                              int rank, const int64_t *shape, const void *data, size_t nbytes);
/* Replaces component i by a scalar bytes string (copied). */
int sluice_element_set_bytes(struct sluice_element *elem, size_t i, const void *data, size_t len);
/* Replaces component i by a bytes tensor: rank <= SLUICE_MAX_RANK dimensions, string k
 * (row-major, k < product(shape)) being values[k] of lens[k] bytes (copied). Rank 0 is a scalar,
 * as sluice_element_set_bytes. */
int sluice_element_set_bytes_tensor(struct sluice_element *elem, size_t i, int rank,
                                    const int64_t *shape, const void *const *values,
                                    const size_t *lens);
/* Replaces component i by a scalar int64 or float64. */
int sluice_element_set_int64(struct sluice_element *elem, size_t i, int64_t value);
int sluice_element_set_float64(struct sluice_element *elem, size_t i, double value);

/* ---- Plugins ----------------------------------------------------------------------------- */

/* A plugin is a shared object that exports
 *
 *     int sluice_plugin_init(struct sluice_registry *registry);
 *
 * which registers named functions and returns 0 (or a negative code to refuse loading). Loaded
 * by a worker (`sluice-worker --plugin LIB.so`, or sluice_worker_options.plugins in
 * <sluice/server.h>) and by a client (sluice_client_options.plugins below), its functions are
 * then usable in map() and filter() like the built-in ones. Functions run on pipeline threads,
 * possibly several at once: they must be thread-safe and must not keep pointers to the element or
 * arguments after returning. */
struct sluice_registry;

/* The plugin's entry point above: defined by each plugin, never by libsluice. Declared here so
 * that a plugin's definition is checked against it. */
int sluice_plugin_init(struct sluice_registry *registry);

/* The literal arguments after the function name: map(fn, 1, 2.5, "x"). */
struct sluice_fn_args;

size_t sluice_fn_args_count(const struct sluice_fn_args *args);
/* Argument k as an integer / float / string. Return 0, or SLUICE_ERR_TYPE when it is not of
 * that kind (an integer argument is also accepted as a float). Strings stay valid for the call. */
int sluice_fn_arg_int(const struct sluice_fn_args *args, size_t k, int64_t *out);
int sluice_fn_arg_float(const struct sluice_fn_args *args, size_t k, double *out);
int sluice_fn_arg_string(const struct sluice_fn_args *args, size_t k, const char **out,
                         size_t *len);
/* 1 when the pipeline running this call was cancelled (its read was collected, the worker
 * drains or stops), else 0. A function that can run long on one element (more than about a
 * tenth of a second) asks now and then and, once it is 1, returns SLUICE_ERR_CANCELLED. A
 * worker abandons the thread of a function that never returns, a few seconds after the
 * cancellation, rather than wait for it; it is then never joined. Thread-safe, cheap (no lock,
 * no system call). */
int sluice_fn_cancelled(const struct sluice_fn_args *args);

/* A map function transforms the element in place. A filter function sets *keep to 1 to keep the
 * element and 0 to drop it. Either returns 0, or a negative code with a one-line reason written
 * to err (errlen bytes, NUL-terminated) when the element cannot be processed; the pipeline then
 * stops with that reason. */
typedef int (*sluice_map_cb)(struct sluice_element *elem, const struct sluice_fn_args *args,
                             void *user, char *err, size_t errlen);
typedef int (*sluice_filter_cb)(const struct sluice_element *elem,
                                const struct sluice_fn_args *args, void *user, int *keep, char *err,
                                size_t errlen);

/* Registers a function usable with min_args..max_args arguments (checked when the pipeline is
 * parsed, before anything runs). user is passed back on every call and must outlive the
 * registry. Returns 0, SLUICE_ERR_EXISTS if the name is taken, SLUICE_ERR_INVALID for an empty
 * or over-long (> 63 bytes) name, or SLUICE_ERR_NOMEM. */
int sluice_register_map(struct sluice_registry *registry, const char *name, int min_args,
                        int max_args, sluice_map_cb fn, void *user);
int sluice_register_filter(struct sluice_registry *registry, const char *name, int min_args,
                           int max_args, sluice_filter_cb fn, void *user);

/* ---- Client ------------------------------------------------------------------------------ */

/* A client talks to one dispatcher. It runs a background thread with its own event loop for all
 * network traffic (heartbeats, requests to workers, prefetching); the calls below hand work to
 * that thread and wait for it. That thread blocks every asynchronous signal, so the program's
 * signals reach its own threads and a worker that vanishes mid-write never costs it a SIGPIPE. A
 * client and its iterators may be used from any one thread at a time (calls on one client are
 * serialized internally, so several threads may share a client, but an iterator must not be used by
 * two threads at once). */
struct sluice_client;
struct sluice_iterator;

/* Security settings, the same for every client and server (docs/operations.md, "Security"). A
 * zero-initialised struct means: no authentication, no TLS. Strings are paths, read when the
 * client or server starts.
 *
 * auth_token_file: a file holding the cluster's shared secret (16 to 4096 bytes; a trailing
 *   newline is ignored). NULL: the environment variable SLUICE_AUTH_TOKEN_FILE when set, else no
 *   authentication. With a token, every connection opens with a challenge-response that proves
 *   both sides know it, without sending it. A peer that cannot prove it (or that wants a token
 *   this side lacks) is refused: calls fail with SLUICE_ERR_AUTH and a message such as
 *   "authentication failed: wrong token", and the failure is final for those calls.
 * tls_cert, tls_key: this side's certificate chain and private key (PEM). Required on a server
 *   for TLS; optional on a client (presented when a server asks).
 * tls_ca: the CA certificate (PEM) peers' certificates are verified against. On a client it turns
 *   TLS on; a server with tls_ca also requires and verifies its clients' certificates.
 *   A client checks the server's certificate against this CA only and against the host name or
 *   IP address it dialled. Half a configuration fails the start rather than falling back to
 *   plain TCP: tls_cert without tls_key or the reverse; on a client (a worker is one too),
 *   tls_cert without tls_ca; on a server, tls_ca without tls_cert and tls_key.
 * insecure: a server only; lets it listen on an address other than loopback without a token.
 * tls_worker_name: a reader only (a client that is not a server): verify every worker's
 *   certificate against this DNS name instead of the host of the address the worker advertises.
 *   One certificate naming it then serves every worker, also where their addresses are not known
 *   in advance (pods, whose IPs are assigned at start). The dispatcher is still verified against
 *   the host it is dialled by. Needs tls_ca; a server (a worker too) refuses it. */
struct sluice_security_options {
    const char *auth_token_file;
    const char *tls_cert;
    const char *tls_key;
    const char *tls_ca;
    bool insecure;
    const char *tls_worker_name;
};

struct sluice_client_options {
    /* "HOST:PORT" or "sluice://HOST:PORT"; or the replicas of a dispatcher group as a
     * comma-separated list, "H1:P,H2:P,H3:P" (at most 16, each once; "sluice://" at most once,
     * before the list). The client talks to the leader: it tries the replicas in turn, follows a
     * replica that names the leader, and re-sends a call a replica declined, so a failover is not
     * an error. Required. */
    const char *dispatcher;
    /* How long a call may wait for an unreachable dispatcher before failing with
     * SLUICE_ERR_TIMEOUT. 0 waits forever (a dispatcher may be restarting). A read's waits for
     * elements are bounded by the timeout given to sluice_iterator_next(). */
    uint32_t timeout_ms;
    /* Paths of plugin shared objects (see Plugins) to load into the client's function registry
     * when it opens, so that pipelines and local tails calling their functions pass the local
     * check. Workers running such pipelines need the same plugins. NULL when nplugins is 0. */
    const char *const *plugins;
    size_t nplugins;
    /* Authentication and TLS towards the dispatcher and the workers. */
    struct sluice_security_options security;
};

/* Creates a client and starts its thread. Does not wait for the dispatcher to be reachable.
 * Returns 0 and *out (owned by the caller; free with sluice_client_close), or a negative code
 * with a one-line message in err (errlen bytes). */
int sluice_client_open(const struct sluice_client_options *options, struct sluice_client **out,
                       char *err, size_t errlen);

/* Why the client is waiting, for a program that wants to tell its user while a call blocks
 * (sluice_register, sluice_status, sluice_iterator_open): writes one line to buf (len bytes,
 * NUL-terminated, truncated) and returns 1, or writes "" and returns 0 when no call to the
 * dispatcher is under way and it is reachable; SLUICE_ERR_INVALID for NULL arguments or len 0.
 * The lines: "waiting for dispatcher H:P: WHY" (WHY the connection's failure, e.g. "connection
 * refused", or the last failed call's message) and "waiting for dispatcher H:P to answer". The
 * facts are those the client's thread has at the time of the call; it does not wait for the
 * network. Any thread, also while another thread is blocked in a call on the same client. */
int sluice_client_waiting(struct sluice_client *client, char *buf, size_t len);

/* Stops the thread, releases the client's jobs on the dispatcher (best effort) and frees it.
 * Every iterator of the client must be closed first. NULL is allowed. A client belongs to the
 * process that opened it: in a child forked from that process, this and sluice_iterator_close()
 * return at once and free nothing (the child's exit releases its copy), and calls to the
 * dispatcher fail with SLUICE_ERR_INVALID; an iterator opened before the fork is not to be read
 * in the child. */
void sluice_client_close(struct sluice_client *client);

enum sluice_compression { SLUICE_COMPRESSION_AUTO = 0, SLUICE_COMPRESSION_NONE = 1 };

struct sluice_register_options {
    /* Register under this id; NULL or "" lets the dispatcher choose. Registering the same
     * pipeline under the same id again returns that id; another pipeline is refused. */
    const char *dataset_id;
    enum sluice_compression compression;
    /* Elements per split for distributed_epoch on range/list sources; 0 picks a default. */
    uint64_t split_size;
    /* distributed_epoch reads of the dataset are deterministic by default
     * (sluice_read_options.deterministic). Part of the dataset's identity: the same pipeline
     * registered with and without it is two datasets. */
    bool deterministic;
};

/* Registers a pipeline (its text in the pipeline language, e.g. "range(10) | map(square)"; the
 * docs/pipelines.md describes the language) with the dispatcher. The pipeline is
 * parsed and checked locally first (a malformed one fails with SLUICE_ERR_PARSE and the column
 * in err). On success writes the dataset id (NUL-terminated, at most idlen bytes) to id_out.
 * options may be NULL for defaults. Blocks until the dispatcher answers or the client's
 * timeout. */
int sluice_register(struct sluice_client *client, const char *pipeline,
                    const struct sluice_register_options *options, char *id_out, size_t idlen,
                    char *err, size_t errlen);

enum sluice_mode {
    SLUICE_PARALLEL_EPOCHS = 0,
    SLUICE_DISTRIBUTED_EPOCH = 1,
    SLUICE_SHARD_FILE = 2,
    SLUICE_SHARD_DATA = 3,
    SLUICE_SHARD_FILE_OR_DATA = 4,
    SLUICE_SHARD_HINT = 5
};

/* Which workers a read reads from (docs/reading.md "Local workers"). A host is one kernel and one
 * network namespace (a trainer and the workers in its pod or on its machine), or what the
 * environment variable SLUICE_HOST_ID names, in the reader's and the workers' processes alike. */
enum sluice_target_workers {
    /* Every worker of the job. */
    SLUICE_TARGET_WORKERS_ANY = 0,
    /* Only workers on the reader's host; a worker running in the reader's own process
     * (sluice_worker_start) is read in memory, without the network. The job's tasks are created
     * only on the hosts of its readers, so a shared distributed_epoch job hands each split to a
     * task some reader reads. A read from a host with no worker is SLUICE_ERR_NOT_FOUND,
     * "no local worker: ...". Refused with num_consumers and the static sharding modes
     * (SLUICE_ERR_UNSUPPORTED). */
    SLUICE_TARGET_WORKERS_LOCAL = 1,
    /* Every worker, those on the reader's host first. Refused with num_consumers. */
    SLUICE_TARGET_WORKERS_AUTO = 2
};

/* "any", "local" or "auto"; NULL for another value. */
const char *sluice_target_workers_name(enum sluice_target_workers t);
/* Parses "any", "local" or "auto" into *out. Returns 0 or SLUICE_ERR_INVALID. */
int sluice_target_workers_parse(const char *name, enum sluice_target_workers *out);

struct sluice_read_options {
    /* Exactly one of dataset_id and pipeline: an existing dataset, or a pipeline to register
     * first (with default register options). */
    const char *dataset_id;
    const char *pipeline;
    enum sluice_mode mode;
    /* Readers of one dataset with the same job name share one job, splitting its elements
     * first come, first served (a job is identified by its dataset and name: the same name on
     * another dataset is another job). NULL or "": a job of this iterator's own. */
    const char *job_name;
    /* Coordinated reads: num_consumers > 0 with consumer_index < num_consumers, a job name, and
     * a pipeline that never ends (repeat() with no count, and no take() after it). The
     * consumers read in rounds: in round r each gets one element, all from the same worker
     * task, consumer c the c-th of the round; the dispatcher decides which task serves which
     * round, also while workers join, drain, die or restart. */
    uint32_t consumer_index;
    uint32_t num_consumers;
    /* Requests in flight to workers at once; bounds memory to about this many replies.
     * 0 picks a default. */
    uint32_t max_outstanding_requests;
    /* A pipeline tail ("map(add, 1) | batch(2)") applied to elements after they arrive. A
     * repeat in it ("repeat(3)", "repeat() | batch(4)") reads the whole stream again for every
     * pass: each repetition is a new read of the dataset with these options (a new job, which
     * the workers produce again), one at a time; repeat() ends after a repetition that yields
     * nothing. Such a read cannot be shared (job_name, num_consumers: SLUICE_ERR_UNSUPPORTED
     * with the reason) nor restored from a checkpoint; a deterministic one gives each
     * repetition in the canonical order; sluice_iterator_progress counts the elements of every
     * repetition and no splits. */
    const char *local;
    /* With pipeline: the split size it is registered with (sluice_register_options). */
    uint64_t split_size;
    /* distributed_epoch only (other modes, and coordinated reads, are SLUICE_ERR_UNSUPPORTED):
     * deterministic reads. The elements come in the canonical order, splits by increasing
     * sequence number and each split's elements by increasing position, so the sequence is a
     * function of the dataset alone (its pipeline, seeds and split size): the same with 1 or 50
     * workers, with workers dying, draining or joining, and across restarts of a fault-tolerant
     * dispatcher. Operations the dataset leaves to the reader and a local tail run over this
     * order. A dataset registered deterministic (sluice_register_options) reads so by default.
     * The reader keeps elements that arrive ahead of their turn, up to reorder_bytes of
     * received replies; past that it takes only the elements of the lowest split it lacks, and
     * asks the dispatcher to have the splits it had to drop produced again. Guaranteed for a job
     * read by one reader; readers sharing a job each get their share in the canonical order. */
    bool deterministic;
    /* Deterministic reads: the bytes of replies held for reordering (on top of the
     * max_outstanding_requests replies under way); 0 picks 256 MiB. A split larger than this is
     * still read, at the pace of the one worker thread producing it. */
    uint64_t reorder_bytes;
    /* Continue from a position sluice_iterator_save returned (restore_len bytes; copied; NULL:
     * from the start). distributed_epoch only. dataset_id and pipeline may both be left out: the
     * checkpoint names its dataset; a dataset_id given must be that one, and a pipeline given
     * must register to the same definition. job_name defaults to the checkpoint's; another one
     * continues the position in that job (see sluice_checkpoint_merge).
     *
     * A read of its own (no job_name): a new job continues the epoch, whether or not the old one
     * still exists (collected, dispatcher restarted): the splits the reader had whole are never
     * processed again, the ones it had in part are processed again from their start and the
     * positions it had are dropped, so the elements handed out before the checkpoint and every
     * element after the restore are the epoch exactly once. Resuming costs re-processing at most
     * the splits that were in flight, whatever the position.
     *
     * A shared job (job_name): a checkpoint records this consumer's position only. Restored
     * while the job still runs, the consumer joins it again and never gets an element it had
     * before the checkpoint; the job treats its earlier self as any consumer that left: what
     * that one had reported received counts as delivered (elements it held unread are gone),
     * the rest is handed out again. Once the job was collected, a new job of that name starts
     * from this consumer's position alone, so splits other consumers had are read again. For
     * exactly once across consumers, merge all their positions (sluice_checkpoint_merge) and
     * restore the merged one in every consumer of a new job.
     *
     * A checkpoint that does not decode, of another dataset, definition or split plan, is
     * SLUICE_ERR_INVALID (or SLUICE_ERR_CORRUPT for a damaged one) with the reason; a read never
     * silently starts over. */
    const uint8_t *restore;
    size_t restore_len;
    /* A cross-trainer cache (docs/reading.md "Cross-trainer cache"): several trainers reading one
     * job share the one stream each of its tasks produces, instead of splitting it. Each worker
     * task keeps what it produced in a cache of cross_trainer_cache_bytes (0:
     * SLUICE_CROSS_TRAINER_CACHE_BYTES) and serves every trainer from its own cursor: a trainer
     * id seen for the first time starts at the oldest element the cache still holds, a known
     * one continues where that id left off (two readers with one id split its stream and never
     * get the same element), and a trainer that falls further behind than the cache holds skips
     * ahead to the oldest element held, never holding the others back. Production follows the
     * fastest trainer. Needs a job_name, a non-empty trainer_id (at most 127 bytes; otherwise
     * SLUICE_ERR_INVALID) and a pipeline that never ends (repeat() with no count); refused with
     * mode distributed_epoch, num_consumers and deterministic (SLUICE_ERR_UNSUPPORTED). The
     * cache and its bound are part of the job's identity: joining a job with another value is
     * SLUICE_ERR_EXISTS. trainer_id and cross_trainer_cache_bytes are ignored without
     * cross_trainer_cache. */
    bool cross_trainer_cache;
    const char *trainer_id;
    uint64_t cross_trainer_cache_bytes;
    /* Which workers to read from (see enum sluice_target_workers); 0 is any. Part of a named
     * job's identity: joining a job with another value is SLUICE_ERR_EXISTS. */
    enum sluice_target_workers target_workers;
    /* A worker process on the reader's host (the same host id) is read over shared memory: a
     * Unix socket carries the requests and a memory region this reader creates and shares with
     * that worker alone carries the element payloads, written once by the worker and read where
     * they lie (docs/reading.md "Local workers"). no_shm turns that off (TCP, as for any worker;
     * --no-shm). shm_bytes bounds each such region (--shm-bytes; a multiple of 64 from 1 MiB to
     * 1 TiB, else SLUICE_ERR_INVALID; 0: 1 GiB): a worker never writes past what the reader has
     * released, and sends a payload that does not fit now over the socket instead. */
    bool no_shm;
    uint64_t shm_bytes;
    /* parallel_epochs and the static sharding modes: every copy read whole, or the read fails.
     * By default a read survives the loss of workers, as tf.data service's does: a worker
     * killed, evicted or restarted in the middle of its copy leaves the part this reader got
     * (the copy is cut short and counted, sluice_read_progress.copies_cut), a restarted worker's
     * new task is read from its start, and a read whose every worker is gone waits for one to
     * register. With whole_copies such a loss fails the read, naming the task
     * (SLUICE_ERR_TRUNCATED, "task 3 on worker HOST:PORT: the worker was lost after 5120
     * elements: its copy is incomplete"). Either way a copy's end is counted: a live worker's
     * copy that reached this reader short fails the read. Refused with distributed_epoch (which
     * is exactly once through any loss) and coordinated reads (which skip rounds by design):
     * SLUICE_ERR_UNSUPPORTED. */
    bool whole_copies;
    /* Which workers run the job's tasks (docs/operations.md "Pools and selectors"): a label
     * selector over the labels workers registered with (`sluice-worker --label KEY=VALUE`):
     * comma-separated requirements that all hold, each "key=value", "key!=value",
     * "key in (a,b)", "key notin (a,b)", "key" (the label is there) or "!key" (it is not); NULL
     * or "": every worker. A malformed one is SLUICE_ERR_INVALID ("worker selector: expected ','
     * at byte 7"). A job whose selector matches no registered worker waits for one to register
     * (sluice_iterator_waiting: "job N: waiting for a worker matching pool=bigmem (none of 3
     * workers match)"). Part of a named job's identity, as are the three fields below. */
    const char *worker_selector;
    /* The job's weight against other jobs (0: 1; otherwise above 0, finite and at most 1e6,
     * else SLUICE_ERR_INVALID "weight must be a number above 0 and at most 1000000, not -1"),
     * and the bounds on the number of workers that run its tasks (0: none): at most max_workers
     * of the matching workers get a task; min_workers is recorded and shown by status (without
     * max_workers every matching worker gets a task). min_workers above max_workers is
     * SLUICE_ERR_INVALID ("min_workers 3 is above max_workers 2"). */
    double weight;
    uint32_t min_workers, max_workers;
    /* distributed_epoch: hedged splits against stragglers (docs/design.md "Hedged splits"). A
     * split leased longer than hedge_factor times the job's median split time is leased again,
     * as a copy, to a worker with room for more splits; the first production this reader
     * receives whole finishes the split, and its ledger drops what the other production sends,
     * so every element still arrives exactly once. 0: off (the default). Above 0 and at most
     * 1000, else SLUICE_ERR_INVALID ("hedge_factor must be 0 (off) or above 0 and at most 1000,
     * not -1"); SLUICE_HEDGE_FACTOR_DEFAULT is the usual choice. Only a read of its own
     * hedges (no job_name: both productions must reach this reader's ledger), and not a
     * deterministic one; elsewhere the field is accepted and does nothing. The copies are
     * counted in sluice_hedged_splits_total and in the status document's job "splits"
     * ("hedged"). */
    double hedge_factor;
    /* Deterministic reads only (deterministic here or registered so): a shard of the canonical
     * order. With shard_count above 0 the reader hands out only the elements at places i of the
     * canonical order with i % shard_count == shard_index, counting from the read's start (or
     * from the position it was restored from). shard_count readers with indexes 0 to
     * shard_count - 1 together get the canonical order, each element once, and reading them
     * in turn (one element from each, by index) gives it back in order, whatever the number of
     * workers: the global order a trainer of shard_count ranks with a constant global batch
     * needs (docs/reading.md "Sharded deterministic reads"). Each such reader reads a job of
     * its own, the whole epoch: the service produces it once per reader. A position
     * (sluice_iterator_save) covers what the reader passed, its own elements and the others';
     * the merge of all readers' positions taken after the same number of elements each is the
     * canonical order up to the last element handed out, and restoring it into any number of
     * sharded readers continues the order from there (one reader's position alone is no such
     * cut: restore the merge). shard_index must be below shard_count
     * (SLUICE_ERR_INVALID); with shard_count 0 it must be 0. Refused with another mode, a job
     * name, num_consumers, a cross-trainer cache, operations run in the reader or a read that
     * is not deterministic (SLUICE_ERR_UNSUPPORTED, with the reason). */
    uint32_t shard_index, shard_count;
};

/* The usual hedge factor (sluice_read_options.hedge_factor; `sluice read --hedge`). */
#define SLUICE_HEDGE_FACTOR_DEFAULT 3.0

/* The bound of a task's cross-trainer cache when sluice_read_options.cross_trainer_cache_bytes
 * is 0: 256 MiB. */
#define SLUICE_CROSS_TRAINER_CACHE_BYTES (256ull << 20)

/* Opens an iterator over the elements of a dataset as served by the workers. A pipeline or local
 * tail that does not parse or names an unknown function fails with SLUICE_ERR_PARSE before the
 * dispatcher is contacted. Blocks until the dispatcher has created or joined the job (or the
 * client's timeout), then prefetches in the background. Returns 0 and *out (owned by the
 * caller; free with sluice_iterator_close), or a negative code with err. */
int sluice_iterator_open(struct sluice_client *client, const struct sluice_read_options *options,
                         struct sluice_iterator **out, char *err, size_t errlen);

/* Waits for the next element. Returns 1 and sets *elem (owned by the iterator, valid until the
 * next call on this iterator; read over shared memory from a worker on this host, its large
 * values may lie in the shared region, not copied, for that long), 0 at the end of the data, or a
 * negative code with a one-line
 * message in err. timeout_ms 0 waits without limit; when it runs out the result is
 * SLUICE_ERR_TIMEOUT with "no element within N ms: REASON" (REASON as sluice_iterator_waiting
 * gives it, e.g. when the dispatcher died and does not come back) and the iterator stays usable
 * (operations applied here, a local tail or those a distributed_epoch pipeline leaves to the
 * reader, run on a thread of their own and carry on). After 0 or an error every later call returns
 * the same. Failures include the worker's message when a task's pipeline failed, and
 * SLUICE_ERR_RESTARTED when the dispatcher restarted without fault tolerance (`sluice-dispatcher
 * --fault-tolerant`, sluice_dispatcher_options.fault_tolerant) and the job is gone. A read ends
 * (0) only once the dispatcher said every element of it was delivered: when the dispatcher is
 * away, a read that cannot go on without it waits for it (in distributed_epoch also when every
 * task it knew ended: a draining worker ends its task and hands its splits back), and with the
 * client's timeout_ms fails with SLUICE_ERR_UNAVAILABLE, "dispatcher H:P unreachable for N ms:
 * WHY", once the dispatcher has been unreachable that long. */
int sluice_iterator_next(struct sluice_iterator *it, const struct sluice_element **elem,
                         uint32_t timeout_ms, char *err, size_t errlen);

/* Why the read is waiting for its next element, as one line in buf (len bytes, NUL-terminated,
 * truncated): returns 1 when something stands in the way, 2 when the wait is the ordinary kind
 * (marked "ordinary" below), or SLUICE_ERR_INVALID for NULL arguments or len 0. Made on the
 * client's thread from the facts it has, without waiting for the network; the first that
 * applies:
 *   the read failed:                 its error message
 *   the dispatcher is away:          "waiting for dispatcher H:P: WHY" (e.g. connection refused)
 *   no task list from it yet:        "job N: waiting for the dispatcher's task list" (ordinary)
 *   the job has no task:             "job N: no worker registered yet", or "job N: waiting for
 *                                    a worker matching SEL (none of K workers match)" when its
 *                                    worker selector is why
 *   a worker cannot be reached:      "waiting for worker H:P: WHY"
 *   every task ended:                "job N: waiting for the dispatcher to end the read"
 *                                    (ordinary)
 *   otherwise:                       "job N: waiting for elements from K workers" (ordinary)
 * A program calling sluice_iterator_next() with a short timeout in a loop can print it when a
 * wait grows long (`sluice read` does after 2 s, then every 10 s, when the result is 1). Call it
 * from the thread that calls sluice_iterator_next(). */
int sluice_iterator_waiting(struct sluice_iterator *it, char *buf, size_t len);

/* Like sluice_iterator_next(), but moves the element into elem (from sluice_element_new()),
 * whose previous buffers the iterator keeps for reuse: the caller owns the element's buffers
 * from then on, e.g. to hand them to another library without a copy. An element read over
 * shared memory from a worker on this host may leave a component of 4 KiB or more (a
 * fixed-width one aligned to its dtype, or the strings of a bytes one) in the shared region
 * instead of copying it (docs/reading.md "Local workers"): its values stay valid, and that part
 * of the region taken, until the element is freed, changes that component or is passed to this
 * call again (what elem held in the region goes back when the call begins), also after the
 * iterator and the client are closed. */
int sluice_iterator_next_into(struct sluice_iterator *it, struct sluice_element *elem,
                              uint32_t timeout_ms, char *err, size_t errlen);

/* Coordinated reads without a local tail: the round and the task of the element the last
 * sluice_iterator_next() returned. Every consumer of the job that gets an element of round r
 * gets it from the same task. Rounds no task served (a worker died before serving them) are
 * skipped by every consumer alike, so the rounds of consecutive elements may leap. Returns 0, or
 * SLUICE_ERR_INVALID when the read is not coordinated, has a local tail, or has returned no
 * element yet. Call it from the thread that calls sluice_iterator_next(). */
int sluice_iterator_round(const struct sluice_iterator *it, uint64_t *round, uint64_t *task_id);

/* Reads without a local tail: the task (one per worker of the job) that produced the element the
 * last sluice_iterator_next() returned. With a cross-trainer cache, the elements a trainer gets
 * from one task are that task's stream in order (with gaps where the trainer fell behind the
 * cache), so comparing trainers is done per task. Returns 0, or SLUICE_ERR_INVALID when the read
 * has a local tail or has returned no element yet. Call it from the thread that calls
 * sluice_iterator_next(). */
int sluice_iterator_task(const struct sluice_iterator *it, uint64_t *task_id);

/* The position of the read after the last element sluice_iterator_next() returned, as an opaque,
 * versioned, self-checking byte string (*bytes malloc'd, the caller frees it with free(); *len
 * its length) to pass as sluice_read_options.restore, in this process or another. Its size grows
 * with the splits in flight (typically tens of bytes), not with the position. Works for
 * distributed_epoch reads whose operations all run on the workers; a read in another mode, a
 * coordinated one, or one with a local tail or operations run in the reader (see
 * sluice_iterator_next) is SLUICE_ERR_UNSUPPORTED with the reason. Call it from the thread that
 * calls sluice_iterator_next(); it does not wait. Also valid after the end of the data or a
 * failure (the position of the last element handed out). */
int sluice_iterator_save(struct sluice_iterator *it, uint8_t **bytes, size_t *len, char *err,
                         size_t errlen);

/* Tells the dispatcher now what this distributed_epoch read has received, and waits until it
 * has heard (at most 5 s): call it right before sluice_iterator_save when a consumer of a shared
 * job checkpoints while the job's other consumers go on. Splits this reader held that go to
 * other consumers afterwards (it stopped, or died) then leave out every element it had, so the
 * merge of the consumers' positions (sluice_checkpoint_merge) holds each element once. Returns
 * 0 (also for other modes and for a read that ended or failed), or SLUICE_ERR_TIMEOUT when the
 * dispatcher did not answer in time (the position is valid all the same; the report then goes
 * with the next heartbeats). Call it from the thread that calls sluice_iterator_next(). */
int sluice_iterator_report(struct sluice_iterator *it);

/* Merges the positions of several consumers of one shared job (n checkpoints from
 * sluice_iterator_save, each ckpts[i] of lens[i] bytes) into one: the elements any of them had.
 * Every consumer of a shared job gets elements no other one gets, so the merged position is
 * exactly what they had together; restoring it in every consumer of a new job (all with the same
 * new job_name) continues the epoch exactly once across them. This is how a data loader whose
 * worker processes share one job checkpoints. The checkpoints must be of the same dataset and
 * split plan (else SLUICE_ERR_INVALID naming the difference). *out is malloc'd (free()). */
int sluice_checkpoint_merge(const uint8_t *const *ckpts, const size_t *lens, size_t n,
                            uint8_t **out, size_t *out_len, char *err, size_t errlen);

/* Keeps a position of this read (len bytes from sluice_iterator_save, taken after
 * sluice_iterator_report) with the dispatcher as the reader's position at checkpoint step `step`,
 * so that the job's position can be taken from the dispatcher (sluice_job_checkpoint) once, for
 * all its consumers, even after they died. step: the trainer's own step number, the same in every
 * consumer that checkpoints at that step (1 to 2^62); 0 takes the step after the one this reader
 * kept last (1 first), which agrees across consumers that checkpoint together. A named
 * distributed_epoch job only (SLUICE_ERR_UNSUPPORTED otherwise). The dispatcher keeps each
 * consumer's last 4 steps, journaled; a later iteration of the job (a restore) starts afresh.
 * Returns 0 once it is durable, or a negative code with err (the position itself stays valid).
 * Call it from the thread that calls sluice_iterator_next(). */
int sluice_iterator_keep(struct sluice_iterator *it, uint64_t step, const uint8_t *bytes,
                         size_t len, char *err, size_t errlen);

/* The position of the named job job_name at a checkpoint step: the merge of the positions its
 * consumers kept (sluice_iterator_keep), each consumer's of the latest step at or below `step`;
 * step 0 takes the latest step every consumer has reached. Restored in any number of readers of
 * a new job (sluice_read_options.restore, all with one job_name; the first creates the job, the
 * others join it), the epoch continues exactly once: every element no consumer had before the
 * cut, each once. step SLUICE_JOB_STEP_LATEST takes each consumer's latest position, for
 * consumers that do not checkpoint in step (separate `sluice read` processes, each whose output
 * up to its own last checkpoint is kept). *out is malloc'd (free()); *cut (may be NULL) is the
 * step taken.
 * SLUICE_ERR_NOT_FOUND when nothing is kept for the job or a consumer kept no step at or below
 * `step` (err names the steps kept). */
#define SLUICE_JOB_STEP_LATEST (UINT64_C(1) << 62)
int sluice_job_checkpoint(struct sluice_client *client, const char *job_name, uint64_t step,
                          uint8_t **out, size_t *out_len, uint64_t *cut, char *err, size_t errlen);

/* How far a read has come, for progress displays. */
struct sluice_read_progress {
    uint64_t elements;     /* handed out so far (since the start of the epoch when restored) */
    uint64_t splits_done;  /* distributed_epoch: splits handed out whole */
    uint64_t splits_total; /* distributed_epoch: splits in the epoch; 0 when not known or endless */
    /* parallel_epochs and the static sharding modes: copies cut short so far, each a task whose
     * worker was lost after it sent this reader part of its copy (see
     * sluice_read_options.whole_copies); 0 in other modes. */
    uint64_t copies_cut;
};

/* Fills out for the read so far. Returns 0, or SLUICE_ERR_INVALID for NULL arguments. Call it
 * from the thread that calls sluice_iterator_next(). */
int sluice_iterator_progress(const struct sluice_iterator *it, struct sluice_read_progress *out);

/* Releases the iterator's client on the dispatcher (best effort, waiting at most 2 s) and frees
 * it. NULL is allowed. */
void sluice_iterator_close(struct sluice_iterator *it);

/* Fetches the dispatcher's status document (the JSON `sluice status --json` prints) into a new
 * malloc'd string (*json, caller frees). */
int sluice_status(struct sluice_client *client, char **json, char *err, size_t errlen);
/* The document carries each pipeline's text only up to its first 256 bytes (with its length and
 * SHA-256); this fetches one dataset's entry with the whole text, {"datasets": [{...}]}, or fails
 * with SLUICE_ERR_NOT_FOUND ("dataset 'x' not found"). */
int sluice_status_dataset(struct sluice_client *client, const char *dataset_id, char **json,
                          char *err, size_t errlen);

/* ---- mixing (docs/pipelines.md "Mixing datasets") ---- */

/* Changes the weights of the sample_from_datasets read as the named job job_name in
 * distributed_epoch: every reader of the job draws with weights (n of them, one per input, each
 * finite and >= 0, not all 0) from output position *from on. at > 0 asks for that position (refused
 * when a reader may already have passed it); at 0 takes the first position no reader may have
 * passed. dataset_id is the mix's dataset, NULL or "" when job_name names one mix read so far.
 * The change is journaled: a resumed read replays it, and every reader switches at the same
 * position. Refusals (err says which): SLUICE_ERR_NOT_FOUND (no mix read as job_name),
 * SLUICE_ERR_INVALID (bad weights, their count, at already passed, a name naming several mixes),
 * SLUICE_ERR_LIMIT (too many changes). Blocks; not on a callback of the client. from may be NULL.
 */
int sluice_set_weights(struct sluice_client *client, const char *job_name, const char *dataset_id,
                       const double *weights, size_t n, uint64_t at, uint64_t *from, char *err,
                       size_t errlen);

/* ---- snapshots (docs/snapshots.md) ---- */

/* Where a save of a dataset into a snapshot directory stands. */
struct sluice_snapshot_status {
    char state[16];            /* "running", "finished" or "failed" */
    uint64_t save_id;          /* the dispatcher's id of the save */
    char dataset_id[128];      /* the dataset saved (sluice_client_snapshot_status only) */
    uint64_t chunks;           /* chunk files of the complete snapshot (the dataset's splits) */
    uint64_t chunks_committed; /* written and recorded so far (sluice_client_snapshot_status) */
    char error[512];           /* why it failed; empty otherwise */
};

/* Starts saving dataset dataset_id (registered) into the snapshot directory path: the workers
 * write its elements once, in chunk files under path, with a manifest and checksums. path must be
 * absolute and reach the same directory on the dispatcher, every worker and every reader (a
 * shared file system). The same dataset and path again is the same save (its state is returned,
 * nothing restarts), unless that save failed: it is then started again, as a new save that writes
 * every chunk anew. Returns once the save is recorded and path/snapshot.json written, with its
 * state in *out (out may be NULL). Refusals, with err saying which: SLUICE_ERR_NOT_FOUND for an
 * unknown dataset; SLUICE_ERR_INVALID for a relative path; SLUICE_ERR_EXISTS for a path already
 * saved to from another dataset, or a directory holding another snapshot; SLUICE_ERR_UNSUPPORTED
 * for a pipeline that never ends, or whose last operations run in the reader in distributed_epoch
 * (a batch after a filter, say). Blocks; not on a callback of the client. */
int sluice_client_save_snapshot(struct sluice_client *client, const char *dataset_id,
                                const char *path, struct sluice_snapshot_status *out, char *err,
                                size_t errlen);

/* The state of the save into path. SLUICE_ERR_NOT_FOUND when the dispatcher knows no save there. */
int sluice_client_snapshot_status(struct sluice_client *client, const char *path,
                                  struct sluice_snapshot_status *out, char *err, size_t errlen);

/* Waits until the save into path is over, asking every poll_ms milliseconds (0: 200), for at most
 * timeout_ms (0: no limit; then SLUICE_ERR_TIMEOUT, "snapshot PATH: still running after N ms
 * (C of T chunks committed)"). Returns 0 when it finished, SLUICE_ERR_TASK_FAILED with the
 * save's error in err when it failed (a task's pipeline failed, a chunk is missing or damaged),
 * or the code of a request that failed. *out (may be NULL) receives the last state seen. A
 * dispatcher that is restarting is waited for like any request (the client's timeout per request).
 */
int sluice_client_snapshot_wait(struct sluice_client *client, const char *path, uint64_t poll_ms,
                                uint64_t timeout_ms, struct sluice_snapshot_status *out, char *err,
                                size_t errlen);

/* ---- Local runs ------------------------------------------------------------------------ */

/* A pipeline run in the calling process, without a service: what `sluice run` does. */
struct sluice_local;

/* Parses pipeline, loads the given plugins (paths of shared objects, see Plugins) into a
 * registry of the run's own, and opens it. A pipeline that does not parse or names an unknown
 * function is SLUICE_ERR_PARSE with the column in err; a missing file SLUICE_ERR_NOT_FOUND.
 * Returns 0 and *out (free with sluice_local_close), or a negative code with err. */
int sluice_local_open(const char *pipeline, const char *const *plugins, size_t nplugins,
                      struct sluice_local **out, char *err, size_t errlen);

/* Fills elem (from sluice_element_new(); its buffers are reused) with the next element: returns
 * 1, 0 at the end, or a negative code with err (and the same on every later call). */
int sluice_local_next(struct sluice_local *run, struct sluice_element *elem, char *err,
                      size_t errlen);

/* Frees the run; NULL is allowed. Any thread, but not while another is in sluice_local_next. */
void sluice_local_close(struct sluice_local *run);

#ifdef __cplusplus
}
#endif

#endif
