/* parse_example: tf.train.Example records into dense tensors.
 *
 *   map(parse_example, "image:bytes", "label:int64=0", "bbox:float32[4]", "tokens:int64[-1]")
 *
 * Each argument names one feature and how to lay it out: NAME:DTYPE[SHAPE]=DEFAULT, where DTYPE
 * is one of tf.Example's three lists (bytes, int64, float32), SHAPE is optional (a scalar
 * without it) and may start with -1 for a variable first dimension, and DEFAULT is optional and
 * used when the feature is missing from a record (not for a variable shape). The record is
 * component 0 of the element (a scalar bytes, as tfrecord() yields); it is replaced by the
 * features in the order given, and the components after it are kept after them.
 *
 * The decoder reads the protobuf wire format itself (proto/example.proto is the schema) rather
 * than unpacking with protobuf-c: it visits the features the spec asks for and skips every other
 * one by its length, allocating nothing but the output tensors. bench/bench_example measures it
 * at about twice protobuf-c's speed on an ImageNet-style record (protobuf-c copies the image
 * bytes and allocates every entry) and ten times on records of thousands of features.
 *
 * It follows protobuf's rules where they matter to the result: the last map entry with a key
 * wins, the last oneof member wins, repeated occurrences of a message merge (protobuf-c keeps
 * only the last of a oneof member given twice; protobuf merges them, and so does this), and
 * repeated numbers may come packed, unpacked or both. Features the spec does not ask for are
 * skipped unchecked. Pure and thread-safe. */
#ifndef SLUICE_PIPELINE_EXAMPLE_H
#define SLUICE_PIPELINE_EXAMPLE_H

#include "element.h"
#include "sluice/sluice.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The longest feature name accepted in a spec. */
#define PIPE_FEATURE_NAME_MAX 256

/* One parsed "NAME:DTYPE[SHAPE]=DEFAULT" argument. Pointers point into the text it was parsed
 * from, which must outlive it. */
struct pipe_feature_spec {
    const char *name;
    size_t name_len;
    enum sluice_dtype dtype; /* SLUICE_BYTES, SLUICE_INT64 or SLUICE_FLOAT32 */
    int rank;
    int64_t shape[SLUICE_MAX_RANK]; /* shape[0] == -1 when variable */
    bool variable;
    uint64_t inner; /* product of every dimension but a variable first one */
    bool has_default;
    int64_t def_i;
    float def_f;
    const char *def_s;
    size_t def_len;
};

/* Parses one spec from text[0, len). Returns 0, or SLUICE_ERR_INVALID with the reason in err
 * (e.g. "'label:int32': unknown dtype 'int32' (bytes, int64 or float32)"). */
int pipe_feature_spec_parse(const char *text, size_t len, struct pipe_feature_spec *out, char *err,
                            size_t errlen);

/* Decodes the serialized Example rec[0, len) into out[0, n), one tensor per spec (out must not
 * alias rec). Returns 0, or a negative code with a one-line reason in err:
 *   SLUICE_ERR_NOT_FOUND  "feature 'label': missing"
 *   SLUICE_ERR_TYPE       "feature 'label': holds float32 values, expected int64", or a count
 *                         that does not fit the shape ("feature 'bbox': has 3 values, expected 4")
 *   SLUICE_ERR_CORRUPT    a malformed record ("malformed Example: ..." or, inside a feature the
 *                         spec asks for, "feature 'bbox': malformed: ...")
 *   SLUICE_ERR_NOMEM
 * On failure the tensors of out hold nothing meaningful. */
int pipe_example_decode(const uint8_t *rec, size_t len, const struct pipe_feature_spec *specs,
                        size_t n, struct pipe_tensor *out, char *err, size_t errlen);

/* The map function and its argument check, registered by pipe_builtins_register(). */
int pipe_fn_parse_example(struct sluice_element *e, const struct sluice_fn_args *args, void *user,
                          char *err, size_t errlen);
int pipe_check_parse_example(const struct sluice_fn_args *args, char *err, size_t errlen);

#endif
