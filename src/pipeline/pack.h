/* pack(SEQ_LEN [, "best_fit" | "first_fit" [, WINDOW]]): packs documents of tokens into
 * sequences of SEQ_LEN tokens for language-model training (docs/pipelines.md).
 *
 * Each upstream element is one document: a single 1-D integer tensor (int8 to int64, uint8 to
 * uint32) whose values fit in int32. Each output element is the tuple (tokens, segment_ids,
 * positions), three int32 tensors of shape [SEQ_LEN]: the documents of a sequence laid end to
 * end, segment ids 1..k in the order they were placed (0 for the padding at the end), positions
 * counting from 0 within each document (0 for padding), padding tokens 0.
 *
 * Up to WINDOW sequences are open at once. A document goes into an open sequence with room for
 * it: with best_fit (the default) the one with the least room left that still fits it, with
 * first_fit the one opened first. When none has room, a new sequence opens; when WINDOW are
 * already open, one is emitted first to make room (best_fit: the fullest; first_fit: the oldest;
 * ties go to the one opened first). A sequence that becomes full is emitted at once. A document
 * longer than SEQ_LEN is cut into consecutive chunks of SEQ_LEN, each emitted as a sequence of
 * its own, and the rest is placed as a document; nothing is dropped. An empty document yields
 * nothing. At the end of the stream the open sequences are emitted in the order they were
 * opened. Everything is a function of the input sequence: no randomness, no clock.
 *
 * In distributed_epoch pack runs per split on the workers, as filter does: each split's
 * documents are packed on their own, and its open sequences are emitted at the split's end. */
#ifndef SLUICE_PIPELINE_PACK_H
#define SLUICE_PIPELINE_PACK_H

#include "iter.h"

#include <stdbool.h>
#include <stdint.h>

/* The default and largest WINDOW, the largest SEQ_LEN, and the most tokens the open sequences
 * of one pack may hold together (WINDOW * SEQ_LEN): bounded memory whatever the pipeline says
 * (12 bytes per token: tokens, segment ids, positions). */
#define PIPE_PACK_WINDOW_DEFAULT 16
#define PIPE_PACK_WINDOW_MAX 4096
#define PIPE_PACK_SEQ_LEN_MAX ((int64_t)1 << 24)
#define PIPE_PACK_OPEN_TOKENS_MAX ((int64_t)1 << 26)

/* What is wrong with pack(seq_len, first_fit, window), or NULL when it is valid. */
const char *pipe_pack_problem(int64_t seq_len, int64_t window);

/* Arguments as checked by pipe_pack_problem. Takes ownership of upstream, also on failure (then
 * it is destroyed). Returns 0 or SLUICE_ERR_NOMEM. */
int pipe_pack_open(int64_t seq_len, bool first_fit, int64_t window, struct pipe_iter *upstream,
                   struct pipe_ctx *ctx, struct pipe_iter **out);

#endif
