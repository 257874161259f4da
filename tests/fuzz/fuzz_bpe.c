/* Feeds arbitrary bytes to the byte-level BPE core (pipeline/bpe.h). The first byte says what
 * the rest is: 'J' a tokenizer.json, 'R' a rank file named cl100k_base.tiktoken, anything else a
 * text. Nothing may crash. A file that does not load carries a message naming it; one that loads
 * encodes a few fixed texts and the input itself into ids from 0 to BPE_MAX_ID, at most two per
 * byte. A text is encoded by two fixed tokenizers the target builds itself (a rank file with
 * cl100k's pattern and special tokens; a tokenizer.json with a Split step, ByteLevel's regex and
 * added tokens), with special tokens as text and recognized, and must round-trip: the bytes of
 * its ids, in the target's own tables, concatenated, are the text. The seeds in
 * tests/fuzz/corpus/fuzz_bpe hold one of each. */
#include "fuzz.h"

#include "common/error.h"
#include "pipeline/bpe.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void check(int ok, const char *what, const char *detail)
{
    if (!ok) {
        fprintf(stderr, "fuzz_bpe: %s: %s\n", what, detail);
        abort();
    }
}

/* The tokens past the bytes, ids 256 on, in both fixed tokenizers. */
static const char *const extra[] = {"th",   "the", " the", "in",    "ing", "  ", "\n\n", "aa",
                                    "aaaa", "he",  "ll",   "hello", " w",  "or", " wor", "12"};
#define NEXTRA (sizeof extra / sizeof extra[0])

/* Added tokens of the tokenizer.json, and cl100k's special tokens. */
static const struct {
    const char *text;
    int32_t id;
    bool special, normalized;
} added[] = {
    {"<|end|>", 300, true, false},
    {"<pad>", 301, false, true},
    {"<|x|>", 302, false, false},
    {"<|endoftext|>", 100257, true, false},
    {"<|fim_prefix|>", 100258, true, false},
    {"<|fim_middle|>", 100259, true, false},
    {"<|fim_suffix|>", 100260, true, false},
    {"<|endofprompt|>", 100276, true, false},
};

struct buf {
    char *p;
    size_t len, cap;
};

static void put(struct buf *b, const char *s, size_t n)
{
    if (b->len + n + 1 > b->cap) {
        b->cap = (b->len + n + 1) * 2;
        b->p = realloc(b->p, b->cap);
        check(b->p != NULL, "out of memory", "");
    }
    memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = '\0';
}

static void puts_(struct buf *b, const char *s)
{
    put(b, s, strlen(s));
}

static void put_b64(struct buf *b, const uint8_t *p, size_t n)
{
    static const char a[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    for (size_t i = 0; i < n; i += 3) {
        uint32_t w = (uint32_t)p[i] << 16 | (i + 1 < n ? (uint32_t)p[i + 1] << 8 : 0) |
                     (i + 2 < n ? p[i + 2] : 0);
        char q[4] = {a[w >> 18], a[(w >> 12) & 63], i + 1 < n ? a[(w >> 6) & 63] : '=',
                     i + 2 < n ? a[w & 63] : '='};
        put(b, q, 4);
    }
}

/* GPT-2's byte alphabet: the character for byte c, JSON-escaped where it must be. */
static void put_byte_char(struct buf *b, int c)
{
    bool printable = (c >= '!' && c <= '~') || (c >= 0xa1 && c <= 0xac) || c >= 0xae;
    int cp = c;
    if (!printable) {
        cp = 256;
        for (int k = 0; k < c; k++)
            if (!((k >= '!' && k <= '~') || (k >= 0xa1 && k <= 0xac) || k >= 0xae))
                cp++;
    }
    char s[4];
    if (cp == '"' || cp == '\\') {
        s[0] = '\\';
        s[1] = (char)cp;
        put(b, s, 2);
    } else if (cp < 0x80) {
        s[0] = (char)cp;
        put(b, s, 1);
    } else {
        s[0] = (char)(0xc0 | (cp >> 6));
        s[1] = (char)(0x80 | (cp & 0x3f));
        put(b, s, 2);
    }
}

static void put_byte_string(struct buf *b, const char *s)
{
    for (; *s; s++)
        put_byte_char(b, (uint8_t)*s);
}

static struct bpe *build(const char *name, const struct buf *data)
{
    char err[SLUICE_ERRMSG_SIZE] = "";
    struct bpe *b = NULL;
    int rc = bpe_load(name, (const uint8_t *)data->p, data->len, &b, err, sizeof err);
    check(rc == 0, "a fixed tokenizer does not load", err);
    return b;
}

static struct bpe *fixed_ranks(void)
{
    struct buf r = {0};
    char line[32];
    for (int c = 0; c < 256; c++) {
        uint8_t byte = (uint8_t)c;
        put_b64(&r, &byte, 1);
        snprintf(line, sizeof line, " %d\n", c);
        puts_(&r, line);
    }
    for (size_t i = 0; i < NEXTRA; i++) {
        put_b64(&r, (const uint8_t *)extra[i], strlen(extra[i]));
        snprintf(line, sizeof line, " %zu\n", 256 + i);
        puts_(&r, line);
    }
    struct bpe *b = build("cl100k_base.tiktoken", &r);
    free(r.p);
    return b;
}

/* Merges make each extra token from its first byte and the rest (their parts are tokens). */
static struct bpe *fixed_json(void)
{
    struct buf j = {0};
    puts_(&j, "{\"added_tokens\": [");
    for (size_t i = 0; i < 3; i++) {
        char s[200];
        snprintf(s, sizeof s,
                 "%s{\"id\": %d, \"content\": \"%s\", \"special\": %s, "
                 "\"normalized\": %s}",
                 i ? ", " : "", added[i].id, added[i].text, added[i].special ? "true" : "false",
                 added[i].normalized ? "true" : "false");
        puts_(&j, s);
    }
    puts_(&j, "], \"normalizer\": null, \"pre_tokenizer\": {\"type\": \"Sequence\", "
              "\"pretokenizers\": [{\"type\": \"Split\", \"pattern\": {\"Regex\": "
              "\"\\\\p{N}{1,3}\"}, \"behavior\": \"Isolated\", \"invert\": false}, {\"type\": "
              "\"ByteLevel\", \"add_prefix_space\": false, \"use_regex\": true}]}, "
              "\"model\": {\"type\": \"BPE\", \"vocab\": {");
    for (int c = 0; c < 256; c++) {
        char s[32];
        puts_(&j, c ? ", \"" : "\"");
        put_byte_char(&j, c);
        snprintf(s, sizeof s, "\": %d", c);
        puts_(&j, s);
    }
    for (size_t i = 0; i < NEXTRA; i++) {
        char s[32];
        puts_(&j, ", \"");
        put_byte_string(&j, extra[i]);
        snprintf(s, sizeof s, "\": %zu", 256 + i);
        puts_(&j, s);
    }
    puts_(&j, "}, \"merges\": [");
    for (size_t i = 0, n = 0; i < NEXTRA; i++) {
        /* extra[i] = its first byte + the rest, when the rest is a token (a byte or an extra). */
        const char *rest = extra[i] + 1;
        bool ok = strlen(rest) == 1;
        for (size_t k = 0; k < NEXTRA && !ok; k++)
            ok = strcmp(extra[k], rest) == 0;
        if (!ok)
            continue;
        char first[2] = {extra[i][0], '\0'};
        puts_(&j, n++ ? ", [\"" : "[\"");
        put_byte_string(&j, first);
        puts_(&j, "\", \"");
        put_byte_string(&j, rest);
        puts_(&j, "\"]");
    }
    puts_(&j, "]}}");
    struct bpe *b = build("fixed.json", &j);
    free(j.p);
    return b;
}

/* The bytes of id in the fixed tables. */
static const char *id_bytes(int32_t id, size_t *len, char *one)
{
    if (id >= 0 && id < 256) {
        one[0] = (char)id;
        *len = 1;
        return one;
    }
    if (id >= 256 && (size_t)id < 256 + NEXTRA) {
        *len = strlen(extra[id - 256]);
        return extra[id - 256];
    }
    for (size_t i = 0; i < sizeof added / sizeof added[0]; i++)
        if (added[i].id == id) {
            *len = strlen(added[i].text);
            return added[i].text;
        }
    return NULL;
}

static void round_trip(struct bpe *b, struct bpe_state *st, const uint8_t *text, size_t len,
                       unsigned flags)
{
    struct bpe_ids ids = {0};
    char err[SLUICE_ERRMSG_SIZE] = "";
    int rc = bpe_encode(b, st, text, len, flags, &ids, err, sizeof err);
    check(rc == 0, "a fixed tokenizer fails to encode", err);
    check(ids.n <= len, "more ids than bytes", bpe_kind(b));
    size_t at = 0;
    for (size_t i = 0; i < ids.n; i++) {
        size_t n;
        char one[1];
        const char *p = id_bytes(ids.v[i], &n, one);
        check(p != NULL, "an id outside the tokenizer", bpe_kind(b));
        check(at + n <= len && memcmp(text + at, p, n) == 0, "the ids do not spell the text",
              bpe_kind(b));
        at += n;
    }
    check(at == len, "the ids spell less than the text", bpe_kind(b));
    free(ids.v);
}

static void encode_loaded(struct bpe *b, const uint8_t *text, size_t len)
{
    static const char *const fixed[] = {"", "hello world", " \n\n  x\t", "<|endoftext|>é\xff"};
    struct bpe_state *st = NULL;
    if (bpe_state_new(b, &st))
        return;
    for (int k = 0; k < 5; k++) {
        const uint8_t *t = k < 4 ? (const uint8_t *)fixed[k] : text;
        size_t n = k < 4 ? strlen(fixed[k]) : len;
        for (unsigned flags = 0; flags <= BPE_ALLOW_SPECIAL; flags++) {
            struct bpe_ids ids = {0};
            char err[SLUICE_ERRMSG_SIZE] = "";
            if (bpe_encode(b, st, t, n, flags, &ids, err, sizeof err) == 0) {
                check(ids.n <= 2 * n + 1, "too many ids", "");
                for (size_t i = 0; i < ids.n; i++)
                    check(ids.v[i] >= 0 && ids.v[i] <= BPE_MAX_ID, "an id out of range", "");
            } else {
                check(err[0] != '\0', "an encoding failure without a message", "");
            }
            free(ids.v);
        }
    }
    bpe_state_free(st);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static struct bpe *ranks, *json;
    static struct bpe_state *ranks_st, *json_st;
    if (!ranks) {
        ranks = fixed_ranks();
        json = fixed_json();
        check(bpe_state_new(ranks, &ranks_st) == 0 && bpe_state_new(json, &json_st) == 0,
              "out of memory", "");
    }
    if (size == 0)
        return 0;
    if (data[0] == 'J' || data[0] == 'R') {
        const char *name = data[0] == 'J' ? "fuzz.json" : "cl100k_base.tiktoken";
        char err[SLUICE_ERRMSG_SIZE] = "";
        struct bpe *b = NULL;
        int rc = bpe_load(name, data + 1, size - 1, &b, err, sizeof err);
        if (rc) {
            check(b == NULL, "a failed load returned a tokenizer", err);
            check(strncmp(err, name, strlen(name)) == 0 || rc == SLUICE_ERR_NOMEM,
                  "a message that does not name the file", err);
            return 0;
        }
        encode_loaded(b, data + 1, size - 1);
        bpe_free(b);
        return 0;
    }
    for (unsigned flags = 0; flags <= BPE_ALLOW_SPECIAL; flags++) {
        round_trip(ranks, ranks_st, data, size, flags);
        round_trip(json, json_st, data, size, flags);
    }
    return 0;
}
