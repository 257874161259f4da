/* The parsed form of a pipeline expression: plain C structs, no protobuf (docs/design.md §3).
 *
 * A spec is produced by pipe_parse() or pipe_spec_from_def(), consumed by pipe_open() and the
 * split providers, and converted to a DatasetDef for the wire. A spec owns every string and array
 * it points to; pipe_spec_free() releases them all. Specs are immutable once built and may be
 * read from several threads at once. */
#ifndef SLUICE_PIPELINE_SPEC_H
#define SLUICE_PIPELINE_SPEC_H

#include "sluice/sluice.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum pipe_value_kind {
    PIPE_VAL_INT,
    PIPE_VAL_FLOAT,
    PIPE_VAL_BYTES, /* a string literal "..." */
    PIPE_VAL_BOOL,  /* true, false */
    PIPE_VAL_LIST,  /* [a, b]: a tensor of rank >= 1; items all of one kind and shape */
    PIPE_VAL_TUPLE  /* (a, b): an element of several components */
};

struct pipe_value {
    enum pipe_value_kind kind;
    int64_t i; /* INT, BOOL (0/1) */
    double f;  /* FLOAT */
    char *s;   /* BYTES: NUL-terminated copy; slen excludes the NUL (may contain NULs) */
    size_t slen;
    struct pipe_value *items; /* LIST, TUPLE */
    size_t nitems;
};

enum pipe_source_kind {
    PIPE_SRC_RANGE,
    PIPE_SRC_LIST,
    PIPE_SRC_TFRECORD,
    PIPE_SRC_LINES,
    PIPE_SRC_TAR,      /* WebDataset shards: tar("GLOB", "EXT", ...) */
    PIPE_SRC_SNAPSHOT, /* a distributed snapshot: snapshot("DIR"), one split per chunk */
    PIPE_SRC_PARQUET,  /* Parquet files: parquet("GLOB", "COLUMN", ...), one row per element */
    PIPE_SRC_JSONL,    /* JSON Lines files: jsonl("GLOB", "FIELD", ...), one line per element */
    PIPE_SRC_MEGATRON, /* a Megatron-LM indexed dataset: megatron("PREFIX"), one document per
                          element, split by runs of documents */
    /* sample_from_datasets([(P1), ...], [W1, ...], SEED[, stop_on_empty]): the elements of whole
     * input pipelines, the input of each output position drawn from (SEED, position, weights,
     * exhausted inputs) (mix.h) */
    PIPE_SRC_SAMPLE,
    /* choose_from_datasets([(P1), ...], (CHOICE)[, stop_on_empty]): the input of each output
     * position read from the int64 scalars of the choice pipeline */
    PIPE_SRC_CHOOSE
};

struct pipe_spec;

/* Bounds of mixing sources: inputs per mix, mixes nested inside inputs (a mix at top level is
 * depth 1), and pipelines in one whole spec, every input and choice pipeline counted. */
#define PIPE_MIX_MAX_INPUTS 64
#define PIPE_MIX_MAX_DEPTH 4
#define PIPE_MIX_MAX_PIPELINES 256

/* Whether a source of this kind mixes input pipelines (sample_from_datasets,
 * choose_from_datasets). */
static inline bool pipe_source_mixes(enum pipe_source_kind kind)
{
    return kind == PIPE_SRC_SAMPLE || kind == PIPE_SRC_CHOOSE;
}

struct pipe_source {
    enum pipe_source_kind kind;
    int64_t start, stop, step; /* RANGE; step != 0 */
    struct pipe_value *values; /* LIST: one value per element */
    size_t nvalues;
    char **globs; /* TFRECORD, LINES, TAR, PARQUET, JSONL: at least one; SNAPSHOT: exactly one,
                     the directory (a path, not a pattern); MEGATRON: exactly one, the prefix of
                     PREFIX.idx and PREFIX.bin (not a pattern) */
    size_t nglobs;
    char **exts; /* TAR: the member extensions that make an element, in component order; 1 to
                    PIPE_MAX_COMPONENTS of them, distinct, each passing pipe_wds_ext_problem() */
    size_t nexts;
    char **columns; /* PARQUET: the columns of an element, in component order, each "NAME" or
                       "NAME=DEFAULT" passing pipe_parquet_column_problem(); none: every
                       top-level column of the file. JSONL: the fields, 1 to
                       PIPE_MAX_COMPONENTS distinct ones passing pipe_jsonl_field_problem() */
    size_t ncolumns;
    /* SAMPLE, CHOOSE: the input pipelines, 1 to PIPE_MIX_MAX_INPUTS of them, each owned */
    struct pipe_spec **inputs;
    size_t ninputs;
    double *weights; /* SAMPLE: one per input, finite, >= 0, not all 0 */
    size_t nweights;
    int64_t seed;             /* SAMPLE */
    struct pipe_spec *choice; /* CHOOSE: the pipeline of input indices, owned */
    bool stop_on_empty;       /* SAMPLE (default false), CHOOSE (default true), as tf.data */
    int column;               /* 1-based column in the text it was parsed from, 0 if unknown */
};

/* Whether a source of this kind reads files, one split per file (tfrecord, lines and tar: the
 * files its globs match; snapshot: the chunk files its snapshot.json counts): their element
 * counts are unknown until the files are read. */
/* Number of elements of range(start, stop, step); step != 0. */
uint64_t pipe_range_len(int64_t start, int64_t stop, int64_t step);

static inline bool pipe_source_reads_files(enum pipe_source_kind kind)
{
    return kind == PIPE_SRC_TFRECORD || kind == PIPE_SRC_LINES || kind == PIPE_SRC_TAR ||
           kind == PIPE_SRC_SNAPSHOT || kind == PIPE_SRC_PARQUET || kind == PIPE_SRC_JSONL ||
           kind == PIPE_SRC_MEGATRON;
}

/* Whether a source of this kind names its files by glob patterns (tfrecord, lines, tar, parquet
 * and jsonl), so that a list of files can stand in for them (static file sharding). */
static inline bool pipe_source_globs(enum pipe_source_kind kind)
{
    return kind == PIPE_SRC_TFRECORD || kind == PIPE_SRC_LINES || kind == PIPE_SRC_TAR ||
           kind == PIPE_SRC_PARQUET || kind == PIPE_SRC_JSONL;
}

/* What is wrong with a parquet() column argument ("NAME" or "NAME=DEFAULT": a name of 1 to 255
 * bytes without control characters), as text that completes "expected ...", or NULL when it is
 * fine. The default is checked against the column's type when a file is read. */
const char *pipe_parquet_column_problem(const char *arg);
/* The length of the NAME part of a column argument. */
size_t pipe_parquet_column_name_len(const char *arg);
/* The same for a jsonl() field: 1 to 255 bytes without control characters. */
const char *pipe_jsonl_field_problem(const char *field);
/* What is wrong with args[i], the i-th argument after the patterns of a tar (a member extension),
 * parquet (a column) or jsonl (a field) source, the ones before it taken as accepted: its own
 * problem, or that it repeats an earlier one (a parquet column by its name); NULL when fine. */
const char *pipe_source_arg_problem(enum pipe_source_kind kind, char *const *args, size_t i);

enum pipe_op_kind {
    PIPE_OP_MAP,
    PIPE_OP_FILTER,
    PIPE_OP_SHUFFLE,
    PIPE_OP_BATCH,
    PIPE_OP_TAKE,
    PIPE_OP_SKIP,
    PIPE_OP_REPEAT,
    PIPE_OP_SHARD,
    PIPE_OP_PREFETCH,
    /* global_shuffle(SEED): a seeded shuffle of the whole source, the same at any worker count
     * (common/perm.h, dist.h). Only ever the first op; the source applies it. */
    PIPE_OP_GLOBAL_SHUFFLE,
    /* pack(SEQ_LEN[, "best_fit" | "first_fit"[, WINDOW]]): documents of tokens into sequences
     * (pack.h); n is SEQ_LEN, window the open sequences, first_fit the policy. */
    PIPE_OP_PACK
};

struct pipe_op {
    enum pipe_op_kind kind;
    char *fn;                /* MAP, FILTER: function name */
    struct pipe_value *args; /* MAP, FILTER: literal arguments */
    size_t nargs;
    int64_t n;     /* SHUFFLE buffer, BATCH size, TAKE, SKIP, REPEAT count, SHARD count, PREFETCH */
    bool has_n;    /* REPEAT: false for repeat() (forever) */
    int64_t seed;  /* SHUFFLE (when has_seed), GLOBAL_SHUFFLE */
    bool has_seed; /* SHUFFLE */
    bool drop_remainder;           /* BATCH */
    int64_t index;                 /* SHARD */
    bool n_is_hint, index_is_hint; /* SHARD(SHARD_HINT, SHARD_HINT) */
    bool first_fit;                /* PACK */
    int64_t window;                /* PACK */
    int column;
};

struct pipe_spec {
    struct pipe_source source;
    struct pipe_op *ops;
    size_t nops;
    /* Registered deterministic (DatasetDef.deterministic): distributed_epoch reads are in the
     * canonical order by default. Not part of the pipeline text; the parser leaves it false. */
    bool deterministic;
};

void pipe_spec_free(struct pipe_spec *spec);   /* frees contents and the struct; NULL is fine */
void pipe_value_release(struct pipe_value *v); /* frees what v points to, not v */
/* What is wrong with a mixing source's own shape (1 to PIPE_MIX_MAX_INPUTS inputs; for
 * sample_from_datasets one weight per input, each finite and >= 0, not all 0; for
 * choose_from_datasets a choice pipeline), as text that completes "expected ...", or NULL when it
 * is fine. Nesting bounds are the parser's and the decoder's to count. */
const char *pipe_mix_problem(const struct pipe_source *src);
/* The dtypes of the components of spec's elements when the text alone tells them (range:
 * int64; lines, tfrecord: bytes; list of scalars or tuples of them, or of lists: their kinds),
 * through operations that keep the structure (filter, shuffle, take, skip, shard, repeat,
 * prefetch, global_shuffle): *n components into d (PIPE_MAX_COMPONENTS room), true. false when
 * unknown (a map, a batch, a file source of records of several fields, a mix). */
bool pipe_spec_known_dtypes(const struct pipe_spec *spec, enum sluice_dtype *d, size_t *n);
/* Deep copy. Returns 0 or SLUICE_ERR_NOMEM (then *out is NULL). */
int pipe_spec_clone(const struct pipe_spec *spec, struct pipe_spec **out);
/* Structural equality of the pipelines, ignoring columns and the deterministic flag (which the
 * pipeline text does not carry; the definition bytes do). */
bool pipe_spec_equal(const struct pipe_spec *a, const struct pipe_spec *b);
/* Whether the pipeline never ends: some repeat() without a count (or with a negative one, as in
 * tf.data) is followed by no take(N). What comes after it otherwise keeps it endless (a filter
 * may drop elements, but none is counted as ending it). Sources are all finite. */
bool pipe_spec_endless(const struct pipe_spec *spec);
/* The first repeat of spec that re-reads its upstream (any but repeat(1), which changes
 * nothing), or NULL. A local tail with one reads the service's stream again for every pass. */
const struct pipe_op *pipe_spec_first_repeat(const struct pipe_spec *spec);
/* Whether spec starts with global_shuffle(SEED); *seed receives its seed (seed may be NULL). */
static inline bool pipe_spec_global_shuffle(const struct pipe_spec *spec, int64_t *seed)
{
    if (spec->nops == 0 || spec->ops[0].kind != PIPE_OP_GLOBAL_SHUFFLE)
        return false;
    if (seed)
        *seed = spec->ops[0].seed;
    return true;
}
/* Writes the canonical text of spec into buf (always NUL-terminated when len > 0). Parsing the
 * canonical text gives an equal spec. Returns the length the full text needs (excluding NUL),
 * like snprintf, or a negative code. */
int pipe_spec_format(const struct pipe_spec *spec, char *buf, size_t len);
/* The canonical text of ops [from, to) alone ("map(add, 1) | batch(2)"), as a tail that
 * pipe_parse_tail() reads back; same return contract as pipe_spec_format(). */
int pipe_spec_format_ops(const struct pipe_spec *spec, size_t from, size_t to, char *buf,
                         size_t len);

/* An operation's name in the pipeline text ("map", "global_shuffle", ...). */
const char *pipe_op_name(enum pipe_op_kind kind);

#endif
