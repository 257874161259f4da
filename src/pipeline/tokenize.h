/* map(tokenize, "TOKENIZER" [, OPTION...]): text to token ids with a byte-level BPE tokenizer
 * (bpe.h), on the workers.
 *
 * TOKENIZER is the path of a tiktoken rank file named after its encoding (cl100k_base.tiktoken,
 * o200k_base.tiktoken, p50k_base.tiktoken, r50k_base.tiktoken) or of a Hugging Face
 * tokenizer.json; on a server it must lie within the data roots (roots.h), as a source's files
 * must. The options are strings:
 *
 *   "special"    special tokens written in the text are their ids (otherwise they are text);
 *   "bos"        the tokenizer's BOS id(s) before the text (bpe_bos), "bos=TOKEN" a special
 *                token named instead;
 *   "eos"        the EOS id(s) after it (bpe_eos), "eos=TOKEN" likewise.
 *
 * The element's first component must be a bytes scalar; it becomes a 1-D int32 tensor of ids,
 * and the other components are kept.
 *
 * Each op loads its tokenizer once, on its pipeline thread before its first element. Loaded
 * tokenizers are shared process-wide, keyed by resolved path, size and modification time: the
 * chains a worker builds per split (distributed_epoch) find the one already loaded, and a
 * changed file is loaded afresh. A few tokenizers no op uses stay loaded for the next chain.
 * Failures (a missing file, a file outside the data roots, one that is not a tokenizer) fail
 * the op on its first element with one line: 'map(tokenize, "x.json"): x.json: not JSON: ...'. */
#ifndef SLUICE_PIPELINE_TOKENIZE_H
#define SLUICE_PIPELINE_TOKENIZE_H

#include "sluice/sluice.h"

/* Registers tokenize (its check, per-op binding and map) into reg, whose data roots confine
 * the files it opens. Returns 0 or the registration's failure. Called by
 * pipe_builtins_register(). */
int pipe_tokenize_register(struct sluice_registry *reg);

/* Frees the loaded tokenizers no op uses. For tests and leak checkers; any thread. */
void pipe_tokenize_cache_clear(void);

#endif
