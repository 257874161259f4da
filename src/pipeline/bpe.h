/* Byte-level BPE tokenizers (GPT-2 style: GPT-2, Llama 3, tiktoken's cl100k_base and
 * o200k_base), the core behind map(tokenize, ...) (tokenize.h).
 *
 * A tokenizer is loaded from the bytes of one file, in one of two forms:
 *
 *  - a tiktoken rank file, lines "BASE64TOKEN RANK" (a token's id is its rank). The file carries
 *    no pre-tokenization pattern nor special tokens, so its base name must name a published
 *    encoding, which supplies both: cl100k_base.tiktoken, o200k_base.tiktoken, p50k_base.tiktoken
 *    or r50k_base.tiktoken (a name ending in ".tiktoken" marks a rank file);
 *  - a Hugging Face tokenizer.json (any other name) whose model is "BPE" over bytes: the
 *    pre-tokenizer is ByteLevel (add_prefix_space only when it is the sole step), or a
 *    Sequence of Split steps (a regex or a string, behavior "Isolated") ending in a ByteLevel
 *    (Llama 3). The vocab, the merges (as "a b" strings or [a, b] arrays), the added tokens,
 *    ignore_merges and the post-processor's BOS/EOS are read;
 *    truncation, padding and the decoder are ignored. Other models (WordPiece, Unigram,
 *    WordLevel), normalizers other than none, and settings that are not byte-level
 *    (byte_fallback, a continuing-subword prefix, dropout, single_word added tokens) are refused,
 *    naming what was found.
 *
 * Encoding follows the reference implementations exactly (tiktoken's CoreBPE, Hugging Face
 * tokenizers' BPE model): the text is cut at added/special tokens (leftmost, then longest), each
 * stretch between them is split by the pre-tokenization regexes (PCRE2, JIT-compiled once, in UTF
 * and Unicode-property mode, \s and \w read as the reference engines read them), and each piece
 * becomes the token that spells it whole (tiktoken; Hugging Face with ignore_merges) or the result
 * of merging adjacent parts lowest rank first, leftmost first among equals. Input need not be
 * valid UTF-8: no regex match spans an invalid sequence, and what lies between matches is encoded
 * byte-level as pieces of its own. Tokens never cover less than one byte of text, so a text of n
 * bytes gives at most n ids (n + 1 per stretch for a ByteLevel that adds a prefix space).
 *
 * Special tokens (tiktoken's, and added tokens marked special) are recognized in the text only
 * when the call allows them (BPE_ALLOW_SPECIAL); otherwise they are encoded as ordinary text.
 * Added tokens not marked special are always recognized, as Hugging Face does.
 *
 * Everything here is pure (no files, clocks or locks): the caller reads the file. A struct bpe is
 * immutable once loaded and may be shared by any number of threads; a struct bpe_state (scratch
 * space, regex match data) belongs to one thread at a time. */
#ifndef SLUICE_PIPELINE_BPE_H
#define SLUICE_PIPELINE_BPE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct bpe;
struct bpe_state;

/* The largest token id a tokenizer may use, and the largest tokenizer file accepted. */
#define BPE_MAX_ID ((int32_t)((1 << 26) - 1))
#define BPE_MAX_FILE_BYTES ((size_t)1 << 30)

/* Loads a tokenizer from the contents of a file: data[0, len), which the call only reads. name is
 * the file's path as the user gave it: its base name chooses the form (a rank file ends in
 * ".tiktoken") and, for a rank file, the encoding; messages begin with it. Returns 0 and *out,
 * which the caller frees with bpe_free(), or a negative code with a one-line reason in err:
 * SLUICE_ERR_INVALID for a file that is not a tokenizer this module can load ("NAME: not JSON:
 * line 3 column 7: ...", "NAME: line 12: bad base64 token", "NAME: model type WordPiece is not
 * supported (byte-level BPE only)", "NAME: a rank file needs a known encoding name: ...", ...),
 * SLUICE_ERR_TOO_LARGE, SLUICE_ERR_NOMEM. Any thread. */
int bpe_load(const char *name, const uint8_t *data, size_t len, struct bpe **out, char *err,
             size_t errlen);
void bpe_free(struct bpe *b);

/* The encoding's name ("cl100k_base", ...) for a rank file, "tokenizer.json" otherwise. */
const char *bpe_kind(const struct bpe *b);

/* The ids that "bos" prepends and "eos" appends: those of the tokenizer.json's post-processor
 * (TemplateProcessing's special tokens before and after the text, RobertaProcessing's or
 * BertProcessing's cls and sep), else the first special token of a well-known name
 * (BOS: <|begin_of_text|>, <s>, <|startoftext|>, <bos>; EOS: <|end_of_text|>, <|endoftext|>,
 * </s>, <eos>). Sets *ids (owned by b) and returns how many there are: 0 when the tokenizer has
 * none (cl100k_base and o200k_base have no BOS). */
size_t bpe_bos(const struct bpe *b, const int32_t **ids);
size_t bpe_eos(const struct bpe *b, const int32_t **ids);

/* The id of the special or added token spelled text[0, len), or -1 when there is none. */
int32_t bpe_special_id(const struct bpe *b, const char *text, size_t len);

/* Scratch space for encoding with b, which must outlive it. Returns 0 and *out (freed with
 * bpe_state_free), or SLUICE_ERR_NOMEM. */
int bpe_state_new(const struct bpe *b, struct bpe_state **out);
void bpe_state_free(struct bpe_state *st);

/* A growable array of token ids; the owner frees v. */
struct bpe_ids {
    int32_t *v;
    size_t n, cap;
};

/* Flags of bpe_encode. */
enum {
    BPE_ALLOW_SPECIAL = 1, /* special tokens in the text are recognized as such */
};

/* Appends the ids of text[0, len) to out (grown as needed; out->n is not reset). st must have
 * been made for b. Returns 0, or a negative code with a one-line reason in err: SLUICE_ERR_NOMEM,
 * or SLUICE_ERR_INVALID when the regex engine gives up on the text (its JIT stack limit, reached
 * only by pathological inputs). Allocates only when out or st's scratch must grow. */
int bpe_encode(const struct bpe *b, struct bpe_state *st, const uint8_t *text, size_t len,
               unsigned flags, struct bpe_ids *out, char *err, size_t errlen);

/* Appends n ids to out. Returns 0 or SLUICE_ERR_NOMEM. */
int bpe_ids_append(struct bpe_ids *out, const int32_t *ids, size_t n);

#endif
