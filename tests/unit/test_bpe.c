/* Byte-level BPE (pipeline/bpe.h) on small hand-made tokenizers with exact expected ids: a rank
 * file named cl100k_base.tiktoken (so cl100k's pattern and special tokens apply) and
 * tokenizer.json files in both merge forms; merge order (lowest rank first, leftmost among
 * equals) on short and long pieces; special tokens allowed or not; added tokens with lstrip and
 * rstrip; BOS/EOS; invalid UTF-8; and the exact error of every kind of bad file. Then
 * map(tokenize, ...) in pipelines (files in a private temporary directory): options, its
 * argument check, element types, data roots, and a changed file loaded afresh. The ids of the
 * real tokenizers are checked against tiktoken and tokenizers.js in tests/tokenize/check.sh. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "lib/file.h"
#include "lib/pipeline.h"
#include "lib/tmp.h"

#include "common/error.h"
#include "pipeline/bpe.h"
#include "pipeline/open.h"
#include "pipeline/registry.h"
#include "pipeline/roots.h"
#include "pipeline/spec.h"
#include "pipeline/tokenize.h"

#include <stdio.h>
#include <stdlib.h>
#include <fcntl.h>
#include <pthread.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* ---- Building tokenizer files ------------------------------------------------------------- */

/* A growable text. */
struct text {
    char *p;
    size_t len, cap;
};

static void put(struct text *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void put(struct text *t, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    assert_true(n >= 0);
    if (t->len + (size_t)n + 1 > t->cap) {
        t->cap = (t->len + (size_t)n + 1) * 2;
        t->p = realloc(t->p, t->cap);
        assert_non_null(t->p);
    }
    va_start(ap, fmt);
    vsnprintf(t->p + t->len, t->cap - t->len, fmt, ap);
    va_end(ap);
    t->len += (size_t)n;
}

static void put_b64(struct text *t, const uint8_t *p, size_t n)
{
    static const char a[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    for (size_t i = 0; i < n; i += 3) {
        uint32_t w = (uint32_t)p[i] << 16 | (i + 1 < n ? (uint32_t)p[i + 1] << 8 : 0) |
                     (i + 2 < n ? p[i + 2] : 0);
        put(t, "%c%c%c%c", a[w >> 18], a[(w >> 12) & 63], i + 1 < n ? a[(w >> 6) & 63] : '=',
            i + 2 < n ? a[w & 63] : '=');
    }
}

/* A rank file: every byte b at rank b, then the given tokens at ranks 256, 257, ... (each
 * NUL-terminated; "\xff" and the like allowed). */
static char *rank_file(const char *const *tokens, size_t n)
{
    struct text t = {0};
    for (int b = 0; b < 256; b++) {
        uint8_t byte = (uint8_t)b;
        put_b64(&t, &byte, 1);
        put(&t, " %d\n", b);
    }
    for (size_t i = 0; i < n; i++) {
        put_b64(&t, (const uint8_t *)tokens[i], strlen(tokens[i]));
        put(&t, " %zu\n", 256 + i);
    }
    return t.p;
}

/* GPT-2's byte-level alphabet, written independently of bpe.c: the character that stands for
 * byte b, as UTF-8. */
static void byte_char(int b, char out[3])
{
    int cp = b;
    bool printable = (b >= '!' && b <= '~') || (b >= 0xa1 && b <= 0xac) || b >= 0xae;
    if (!printable) {
        int k = 0;
        for (int c = 0; c < b; c++)
            if (!((c >= '!' && c <= '~') || (c >= 0xa1 && c <= 0xac) || c >= 0xae))
                k++;
        cp = 256 + k;
    }
    if (cp < 0x80) {
        out[0] = (char)cp;
        out[1] = '\0';
    } else {
        out[0] = (char)(0xc0 | (cp >> 6));
        out[1] = (char)(0x80 | (cp & 0x3f));
        out[2] = '\0';
    }
}

/* A tokenizer.json: every byte b has id b; vocab_extra, merges, added_tokens, pre_tokenizer
 * and post_processor are JSON text put in as they are, model_extra more fields of the model. */
struct hf {
    const char *vocab_extra; /* "\"he\": 256, ..." or NULL */
    const char *merges;      /* "[\"h e\", ...]" */
    const char *added;       /* "[...]" or NULL */
    const char *pre;         /* NULL: ByteLevel with its regex */
    const char *post;        /* NULL: null */
    const char *model_extra; /* ", \"ignore_merges\": true" or NULL */
    const char *type;        /* NULL: "BPE" */
    const char *normalizer;  /* NULL: null */
};

static char *hf_json(const struct hf *h)
{
    struct text t = {0};
    put(&t, "{\"version\": \"1.0\", \"truncation\": null, \"padding\": null, \"added_tokens\": %s,",
        h->added ? h->added : "[]");
    put(&t, "\"normalizer\": %s, \"pre_tokenizer\": %s, \"post_processor\": %s, \"decoder\": null,",
        h->normalizer ? h->normalizer : "null",
        h->pre ? h->pre
               : "{\"type\": \"ByteLevel\", \"add_prefix_space\": false, \"trim_offsets\": true, "
                 "\"use_regex\": true}",
        h->post ? h->post : "null");
    put(&t, "\"model\": {\"type\": \"%s\", \"dropout\": null, \"unk_token\": null, ",
        h->type ? h->type : "BPE");
    put(&t, "\"continuing_subword_prefix\": null, \"end_of_word_suffix\": null, ");
    put(&t, "\"fuse_unk\": false, \"byte_fallback\": false%s, \"vocab\": {",
        h->model_extra ? h->model_extra : "");
    for (int b = 0; b < 256; b++) {
        char c[3];
        byte_char(b, c);
        put(&t, "%s\"%s%s\": %d", b ? ", " : "", c[0] == '"' || c[0] == '\\' ? "\\" : "", c, b);
    }
    put(&t, "%s%s}, \"merges\": %s}}", h->vocab_extra ? ", " : "",
        h->vocab_extra ? h->vocab_extra : "", h->merges);
    return t.p;
}

/* ---- Loading and encoding ------------------------------------------------------------------ */

static struct bpe *load(const char *name, const char *data)
{
    char err[SLUICE_ERRMSG_SIZE] = "";
    struct bpe *b = NULL;
    int rc = bpe_load(name, (const uint8_t *)data, strlen(data), &b, err, sizeof err);
    if (rc)
        fail_msg("%s: %s", name, err);
    return b;
}

/* The error bpe_load gives for data. */
static void load_error(const char *name, const char *data, size_t len, const char *want)
{
    char err[SLUICE_ERRMSG_SIZE] = "";
    struct bpe *b = NULL;
    int rc = bpe_load(name, (const uint8_t *)data, len, &b, err, sizeof err);
    assert_null(b);
    assert_int_equal(rc, SLUICE_ERR_INVALID);
    if (strncmp(err, want, strlen(want)) != 0)
        fail_msg("%s: error \"%s\", want it to begin \"%s\"", name, err, want);
}

/* Encodes text[0, len) and compares with want[0, n). */
static void expect_ids(struct bpe *b, const char *text, size_t len, unsigned flags,
                       const int32_t *want, size_t n)
{
    struct bpe_state *st = NULL;
    assert_int_equal(bpe_state_new(b, &st), 0);
    struct bpe_ids ids = {0};
    char err[SLUICE_ERRMSG_SIZE] = "";
    int rc = bpe_encode(b, st, (const uint8_t *)text, len, flags, &ids, err, sizeof err);
    if (rc)
        fail_msg("\"%.*s\": %s", (int)len, text, err);
    bool same = ids.n == n && (n == 0 || memcmp(ids.v, want, n * sizeof(*want)) == 0);
    if (!same) {
        char got[4096] = "", exp[4096] = "";
        for (size_t i = 0; i < ids.n && strlen(got) < 4000; i++)
            snprintf(got + strlen(got), sizeof got - strlen(got), " %d", ids.v[i]);
        for (size_t i = 0; i < n && strlen(exp) < 4000; i++)
            snprintf(exp + strlen(exp), sizeof exp - strlen(exp), " %d", want[i]);
        fail_msg("\"%.*s\" (flags %u): got [%s ], want [%s ]", (int)(len > 80 ? 80 : len), text,
                 flags, got, exp);
    }
    free(ids.v);
    bpe_state_free(st);
}

#define IDS(...) ((const int32_t[]){__VA_ARGS__}), (sizeof((const int32_t[]){__VA_ARGS__}) / 4)
#define EXPECT(b, text, flags, ...) expect_ids(b, text, sizeof(text) - 1, flags, IDS(__VA_ARGS__))

/* Ranks 256..: what the rank-file tests merge. */
static const char *const small_tokens[] = {
    "he",   /* 256 */
    "ll",   /* 257 */
    "llo",  /* 258 */
    " w",   /* 259 */
    "or",   /* 260 */
    " wor", /* 261 */
    "aa",   /* 262 */
    "aaaa", /* 263 */
    "ab",   /* 264 */
    "\xff"
    "c",     /* 265: only reachable if an invalid byte were merged with its neighbour */
    "hello", /* 266: a piece that is a token whole is that token */
    "  ",    /* 267 */
};

static struct bpe *small_ranks(void)
{
    char *data = rank_file(small_tokens, sizeof small_tokens / sizeof small_tokens[0]);
    struct bpe *b = load("/some/dir/cl100k_base.tiktoken", data);
    free(data);
    assert_string_equal(bpe_kind(b), "cl100k_base");
    return b;
}

static void test_rank_file_merges(void **state)
{
    (void)state;
    struct bpe *b = small_ranks();
    /* Whole-piece tokens first; then merges by rank: "helo" is h e l o -> he l o. */
    EXPECT(b, "hello", 0, 266);
    EXPECT(b, "helo", 0, 256, 'l', 'o');
    /* " world": cl100k's pattern keeps the space with the word; " w" + "or" -> " wor". */
    EXPECT(b, " world", 0, 261, 'l', 'd');
    /* "hellos" is not a token: he (256) first, then ll (257), then llo (258), then he + llo,
     * since a rank file ranks what two parts spell together: "hello" (266). */
    EXPECT(b, "hellos", 0, 266, 's');
    /* Equal ranks merge leftmost first: aaa -> aa a; aaaaa -> aaaa a. */
    EXPECT(b, "aaa", 0, 262, 'a');
    EXPECT(b, "aaaaa", 0, 263, 'a');
    /* cl100k splits digits in threes and keeps contractions apart. */
    EXPECT(b, "1234567", 0, '1', '2', '3', '4', '5', '6', '7');
    EXPECT(b, "don't", 0, 'd', 'o', 'n', '\'', 't');
    /* Three spaces before a word: "  " then " w" ... (\s+(?!\S) leaves the last space). */
    EXPECT(b, "   wor", 0, 267, 261);
    EXPECT(b, "", 0);
    bpe_free(b);
}

/* Pieces over the array scan's length go through the heap: the same merges, same order. */
static void test_long_pieces(void **state)
{
    (void)state;
    struct bpe *b = small_ranks();
    char text[401];
    int32_t want[200];
    /* 95 a: 47 x aa + a, then 23 x aaaa + aa + a. */
    memset(text, 'a', 95);
    for (int i = 0; i < 23; i++)
        want[i] = 263;
    want[23] = 262;
    want[24] = 'a';
    expect_ids(b, text, 95, 0, want, 25);
    /* 97 and 400 a: 24 (100) x aaaa, then a for an odd count. */
    memset(text, 'a', 400);
    for (int i = 0; i < 100; i++)
        want[i] = 263;
    want[24] = 'a';
    expect_ids(b, text, 97, 0, want, 25);
    want[24] = 263;
    expect_ids(b, text, 400, 0, want, 100);
    /* "ab" repeated, 300 bytes: 150 x ab. */
    for (int i = 0; i < 300; i++)
        text[i] = i % 2 ? 'b' : 'a';
    for (int i = 0; i < 150; i++)
        want[i] = 264;
    expect_ids(b, text, 300, 0, want, 150);
    bpe_free(b);
}

/* Bytes that are not UTF-8 are matched by no regex: each stretch of them is a piece of its
 * own, encoded byte by byte, never merged with the text around it. */
static void test_invalid_utf8(void **state)
{
    (void)state;
    struct bpe *b = small_ranks();
    EXPECT(b,
           "ab\xff"
           "cd",
           0, 264, 0xff, 'c', 'd');
    EXPECT(b, "\xff\xfe", 0, 0xff, 0xfe);
    /* A truncated sequence at the end, an overlong one, a lone continuation byte. */
    EXPECT(b, "he\xe4\xb8", 0, 256, 0xe4, 0xb8);
    EXPECT(b,
           "\xc0\xaf"
           "ab",
           0, 0xc0, 0xaf, 264);
    EXPECT(b,
           "ab\x80"
           "ab",
           0, 264, 0x80, 264);
    /* A valid character still goes through: "é" is two bytes. */
    EXPECT(b, "\xc3\xa9", 0, 0xc3, 0xa9);
    bpe_free(b);
}

static void test_special_tokens(void **state)
{
    (void)state;
    struct bpe *b = small_ranks();
    /* As text: "<|", "endoftext", "|>" (no merges apply to them). */
    EXPECT(b, "<|endoftext|>", 0, '<', '|', 'e', 'n', 'd', 'o', 'f', 't', 'e', 'x', 't', '|', '>');
    EXPECT(b, "<|endoftext|>", BPE_ALLOW_SPECIAL, 100257);
    /* The text on either side is encoded apart: "he" then the token then "ll". */
    EXPECT(b, "he<|fim_middle|>ll", BPE_ALLOW_SPECIAL, 256, 100259, 257);
    EXPECT(b, "<|endofprompt|><|endoftext|>", BPE_ALLOW_SPECIAL, 100276, 100257);
    /* The stretch before a special token ends there: "  " before it is one piece. */
    EXPECT(b, "he  <|endoftext|>", BPE_ALLOW_SPECIAL, 256, 267, 100257);
    /* Not quite a special token. */
    EXPECT(b, "<|endoftext|", BPE_ALLOW_SPECIAL, '<', '|', 'e', 'n', 'd', 'o', 'f', 't', 'e', 'x',
           't', '|');
    assert_int_equal(bpe_special_id(b, "<|endoftext|>", 13), 100257);
    assert_int_equal(bpe_special_id(b, "<|fim_suffix|>", 14), 100260);
    assert_int_equal(bpe_special_id(b, "<|nope|>", 8), -1);
    const int32_t *ids;
    assert_int_equal(bpe_bos(b, &ids), 0);
    assert_int_equal(bpe_eos(b, &ids), 1);
    assert_int_equal(ids[0], 100257);
    bpe_free(b);
}

static void test_o200k_names(void **state)
{
    (void)state;
    char *data = rank_file(small_tokens, 2);
    struct bpe *b = load("o200k_base.tiktoken", data);
    free(data);
    assert_string_equal(bpe_kind(b), "o200k_base");
    EXPECT(b, "<|endoftext|><|endofprompt|>", BPE_ALLOW_SPECIAL, 199999, 200018);
    /* o200k keeps a contraction with its word and splits at case changes: "HeLLo" -> "He",
     * "LLo"; "don't" -> "don", "'t". */
    EXPECT(b, "HeLLo", 0, 'H', 'e', 'L', 'L', 'o');
    EXPECT(b, "he's", 0, 256, '\'', 's');
    bpe_free(b);
}

/* The tokenizer.json the JSON tests use, in the merge form asked for. */
static char *small_json(bool arrays, const char *extra_model, const char *pre, const char *post)
{
    static const char *const pairs[][2] = {
        {"h", "e"}, {"l", "l"}, {"ll", "o"}, {"\xc4\xa0", "w"}, {"o", "r"}, {"\xc4\xa0w", "or"},
    };
    struct text m = {0};
    put(&m, "[");
    for (size_t i = 0; i < sizeof pairs / sizeof pairs[0]; i++)
        if (arrays)
            put(&m, "%s[\"%s\", \"%s\"]", i ? ", " : "", pairs[i][0], pairs[i][1]);
        else
            put(&m, "%s\"%s %s\"", i ? ", " : "", pairs[i][0], pairs[i][1]);
    put(&m, "]");
    struct hf h = {
        .vocab_extra = "\"he\": 256, \"ll\": 257, \"llo\": 258, \"\xc4\xa0w\": 259, \"or\": 260, "
                       "\"\xc4\xa0wor\": 261, \"hello\": 262",
        .merges = m.p,
        .added = "[{\"id\": 300, \"content\": \"<|end|>\", \"single_word\": false, \"lstrip\": "
                 "false, \"rstrip\": false, \"normalized\": false, \"special\": true},"
                 "{\"id\": 301, \"content\": \"<pad>\", \"single_word\": false, \"lstrip\": "
                 "false, \"rstrip\": false, \"normalized\": true, \"special\": false},"
                 "{\"id\": 302, \"content\": \"<mask>\", \"single_word\": false, \"lstrip\": "
                 "true, \"rstrip\": true, \"normalized\": false, \"special\": true},"
                 "{\"id\": 303, \"content\": \"<s>\", \"special\": true},"
                 "{\"id\": 304, \"content\": \"</s>\", \"special\": true}]",
        .pre = pre,
        .post = post,
        .model_extra = extra_model,
    };
    char *json = hf_json(&h);
    free(m.p);
    return json;
}

static void test_json_merges(void **state)
{
    (void)state;
    for (int arrays = 0; arrays < 2; arrays++) {
        char *json = small_json(arrays, NULL, NULL, NULL);
        struct bpe *b = load("tok/tokenizer.json", json);
        free(json);
        assert_string_equal(bpe_kind(b), "tokenizer.json");
        /* Without ignore_merges the merges decide, even for a piece in the vocab. */
        EXPECT(b, "hello", 0, 256, 258);
        EXPECT(b, "hello world", 0, 256, 258, 261, 'l', 'd');
        /* GPT-2's pattern: "'s" apart, digits together, a space before a word with it. */
        EXPECT(b, "he's 1234", 0, 256, '\'', 's', ' ', '1', '2', '3', '4');
        bpe_free(b);
    }
    char *json = small_json(false, ", \"ignore_merges\": true", NULL, NULL);
    struct bpe *b = load("tokenizer.json", json);
    free(json);
    EXPECT(b, "hello", 0, 262);
    bpe_free(b);
}

static void test_json_added_tokens(void **state)
{
    (void)state;
    char *json = small_json(false, NULL, NULL, NULL);
    struct bpe *b = load("tokenizer.json", json);
    free(json);
    /* A special token is text unless allowed; a plain added token is always itself. */
    EXPECT(b, "he<|end|>", 0, 256, '<', '|', 'e', 'n', 'd', '|', '>');
    EXPECT(b, "he<|end|>", BPE_ALLOW_SPECIAL, 256, 300);
    EXPECT(b, "he<pad>he", 0, 256, 301, 256);
    /* lstrip and rstrip take the white space around the token with it. */
    EXPECT(b, "he  <mask>  he", BPE_ALLOW_SPECIAL, 256, 302, 256);
    EXPECT(b, "he \t<mask>\n", BPE_ALLOW_SPECIAL, 256, 302);
    assert_int_equal(bpe_special_id(b, "<pad>", 5), 301);
    assert_int_equal(bpe_special_id(b, "<mask>", 6), 302);
    /* No post-processor: "bos" and "eos" fall back on <s> and </s>. */
    const int32_t *ids;
    assert_int_equal(bpe_bos(b, &ids), 1);
    assert_int_equal(ids[0], 303);
    assert_int_equal(bpe_eos(b, &ids), 1);
    assert_int_equal(ids[0], 304);
    bpe_free(b);
}

static void test_json_post_processor(void **state)
{
    (void)state;
    const char *template =
        "{\"type\": \"Sequence\", \"processors\": [{\"type\": \"ByteLevel\"}, {\"type\": "
        "\"TemplateProcessing\", \"single\": [{\"SpecialToken\": {\"id\": \"<|end|>\", "
        "\"type_id\": 0}}, {\"Sequence\": {\"id\": \"A\", \"type_id\": 0}}, {\"SpecialToken\": "
        "{\"id\": \"<pad>\", \"type_id\": 0}}], \"special_tokens\": {\"<|end|>\": {\"id\": "
        "\"<|end|>\", \"ids\": [300], \"tokens\": [\"<|end|>\"]}, \"<pad>\": {\"id\": \"<pad>\", "
        "\"ids\": [301, 302], \"tokens\": [\"<pad>\", \"<mask>\"]}}}]}";
    char *json = small_json(false, NULL, NULL, template);
    struct bpe *b = load("tokenizer.json", json);
    free(json);
    const int32_t *ids;
    assert_int_equal(bpe_bos(b, &ids), 1);
    assert_int_equal(ids[0], 300);
    assert_int_equal(bpe_eos(b, &ids), 2);
    assert_int_equal(ids[0], 301);
    assert_int_equal(ids[1], 302);
    bpe_free(b);
    json = small_json(false, NULL, NULL,
                      "{\"type\": \"RobertaProcessing\", \"sep\": [\"</s>\", 304], \"cls\": "
                      "[\"<s>\", 303]}");
    b = load("tokenizer.json", json);
    free(json);
    assert_int_equal(bpe_bos(b, &ids), 1);
    assert_int_equal(ids[0], 303);
    assert_int_equal(bpe_eos(b, &ids), 1);
    assert_int_equal(ids[0], 304);
    bpe_free(b);
}

/* Split steps before a ByteLevel without regex (Llama 3's shape): each match and each stretch
 * between matches is a piece. */
static void test_json_split(void **state)
{
    (void)state;
    const char *pre =
        "{\"type\": \"Sequence\", \"pretokenizers\": [{\"type\": \"Split\", \"pattern\": "
        "{\"Regex\": \"\\\\d+\"}, \"behavior\": \"Isolated\", \"invert\": false}, {\"type\": "
        "\"Split\", \"pattern\": {\"String\": \"|\"}, \"behavior\": \"Isolated\", \"invert\": "
        "false}, {\"type\": \"ByteLevel\", \"add_prefix_space\": false, \"trim_offsets\": true, "
        "\"use_regex\": false}]}";
    char *json = small_json(false, NULL, pre, NULL);
    struct bpe *b = load("tokenizer.json", json);
    free(json);
    /* "hello world" is one piece: "hello" + " wor" + "l" + "d" after merges. */
    EXPECT(b, "hello world", 0, 256, 258, 261, 'l', 'd');
    /* Digits cut the text; "|" is a piece of its own. */
    EXPECT(b, "he12ll|he", 0, 256, '1', '2', 257, '|', 256);
    bpe_free(b);
    /* ByteLevel's add_prefix_space: a space before each stretch that lacks one. */
    json = small_json(false, NULL,
                      "{\"type\": \"ByteLevel\", \"add_prefix_space\": true, \"use_regex\": true}",
                      NULL);
    b = load("tokenizer.json", json);
    free(json);
    EXPECT(b, "world", 0, 261, 'l', 'd');
    EXPECT(b, " world", 0, 261, 'l', 'd');
    EXPECT(b, "world<|end|>world", BPE_ALLOW_SPECIAL, 261, 'l', 'd', 300, 261, 'l', 'd');
    bpe_free(b);
}

static void test_bad_files(void **state)
{
    (void)state;
    /* Rank files. */
    char *good = rank_file(small_tokens, 2);
    load_error("ranks.tiktoken", good, strlen(good),
               "ranks.tiktoken: a rank file needs a known encoding name to take its pattern and "
               "special tokens from: cl100k_base.tiktoken, o200k_base.tiktoken");
    /* Under another name it is read as a tokenizer.json; the error says how to name it. */
    load_error("dir/ranks.txt", good, strlen(good),
               "dir/ranks.txt: not JSON: line 1 column 2: '[' or '{' expected near 'AA' (a "
               "tiktoken rank file must be named cl100k_base.tiktoken, o200k_base.tiktoken, "
               "p50k_base.tiktoken or r50k_base.tiktoken)");
    free(good);
    static const struct {
        const char *data, *want;
    } ranks[] = {
        {"AA== 0\nAQ== x\n", "cl100k_base.tiktoken: line 2: expected \"BASE64TOKEN RANK\""},
        {"AA== 0\nAQ==\n", "cl100k_base.tiktoken: line 2: expected \"BASE64TOKEN RANK\""},
        {"AA== 0\n\nAQ== 1 2\n", "cl100k_base.tiktoken: line 3: expected \"BASE64TOKEN RANK\""},
        {"AA== 0\nA?== 1\n", "cl100k_base.tiktoken: line 2: bad base64 token"},
        {"AA== 0\nAQ= 1\n", "cl100k_base.tiktoken: line 2: bad base64 token"},
        {"AA== 0\nAQ== 0\n", "cl100k_base.tiktoken: line 2: rank 0 given twice"},
        {"AA== 0\nAA== 1\n", "cl100k_base.tiktoken: line 2: token already listed with rank 0"},
        {"AA== 99999999999\n", "cl100k_base.tiktoken: line 1: rank over 67108863"},
        {"AA== 0\n", "cl100k_base.tiktoken: the rank file has no token for byte 0x01 (a "
                     "byte-level BPE has all 256)"},
        {"", "cl100k_base.tiktoken: the rank file has no token for byte 0x00"},
    };
    for (size_t i = 0; i < sizeof ranks / sizeof ranks[0]; i++)
        load_error("cl100k_base.tiktoken", ranks[i].data, strlen(ranks[i].data), ranks[i].want);
    /* A special token's id taken by a rank. */
    const char *at_special[] = {"ab"};
    char *data = rank_file(at_special, 1);
    struct text t = {.p = data, .len = strlen(data), .cap = strlen(data) + 1};
    put(&t, "YWJj 199999\n");
    load_error("o200k_base.tiktoken", t.p, t.len,
               "o200k_base.tiktoken: rank 199999 is o200k_base's special token <|endoftext|>, "
               "not a rank");
    free(t.p);

    /* tokenizer.json files. */
    load_error("t.json", "{\"model\": ", 10, "t.json: not JSON: line 1 column 10: ");
    load_error("t.json", "", 0, "t.json: not JSON: ");
    load_error("t.json", "[1, 2]", 6, "t.json: no \"model\" object: not a tokenizer.json");
    static const char *const types[] = {"WordPiece", "Unigram", "WordLevel"};
    for (size_t i = 0; i < 3; i++) {
        struct hf h = {.merges = "[]", .type = types[i]};
        char *json = hf_json(&h);
        char want[128];
        snprintf(want, sizeof want, "t.json: model type %s is not supported (byte-level BPE only)",
                 types[i]);
        load_error("t.json", json, strlen(json), want);
        free(json);
    }
    static const struct {
        struct hf h;
        const char *want;
    } cases[] = {
        {{.merges = "[]", .pre = "{\"type\": \"Metaspace\", \"replacement\": \"\\u2581\"}"},
         "t.json: pre_tokenizer Metaspace is not byte-level (ByteLevel, or a Sequence of Split "
         "steps ending in ByteLevel)"},
        {{.merges = "[]", .pre = "null"}, "t.json: pre_tokenizer null is not byte-level"},
        {{.merges = "[]",
          .pre = "{\"type\": \"Sequence\", \"pretokenizers\": [{\"type\": \"Digits\"}, "
                 "{\"type\": \"ByteLevel\"}]}"},
         "t.json: pre_tokenizer Digits is not supported (Split and ByteLevel only)"},
        {{.merges = "[]",
          .pre = "{\"type\": \"Sequence\", \"pretokenizers\": [{\"type\": \"Split\", "
                 "\"pattern\": {\"Regex\": \"(\"}, \"behavior\": \"Isolated\"}, {\"type\": "
                 "\"ByteLevel\"}]}"},
         "t.json: Split regex: missing closing parenthesis (pattern offset 1)"},
        {{.merges = "[]",
          .pre = "{\"type\": \"Sequence\", \"pretokenizers\": [{\"type\": \"Split\", "
                 "\"pattern\": {\"Regex\": \"x\"}, \"behavior\": \"Removed\"}, {\"type\": "
                 "\"ByteLevel\"}]}"},
         "t.json: pre_tokenizer Split with behavior Removed is not supported (Isolated only)"},
        {{.merges = "[]", .normalizer = "{\"type\": \"NFC\"}"},
         "t.json: normalizer NFC is not supported"},
        {{.merges = "[\"q z\"]"}, "t.json: merge 0: \"qz\" is not in the vocab"},
        {{.merges = "[\"a b c\"]"}, "t.json: merge 0: expected \"A B\" or [A, B]"},
        {{.merges = "[[\"a\"]]"}, "t.json: merge 0: expected \"A B\" or [A, B]"},
        {{.merges = "[\"a b\"]", .vocab_extra = "\"ab\": -3"},
         "t.json: vocab entry \"ab\": id is not from 0 to 67108863"},
        {{.merges = "[]", .model_extra = ", \"byte_fallback\": true"},
         "t.json: BPE with byte_fallback, a continuing_subword_prefix, an end_of_word_suffix or "
         "dropout is not byte-level BPE"},
        {{.merges = "[]", .added = "[{\"id\": 5, \"content\": \"\"}]"},
         "t.json: added token 0: needs a non-empty content and an id from 0 to 67108863"},
        {{.merges = "[]", .added = "[{\"id\": 300, \"content\": \"<x>\", \"single_word\": true}]"},
         "t.json: added token \"<x>\" has single_word, which is not supported"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char *json = hf_json(&cases[i].h);
        load_error("t.json", json, strlen(json), cases[i].want);
        free(json);
    }
    /* A vocab without every byte is not byte-level. */
    struct text v = {0};
    put(&v, "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": []}, "
            "\"pre_tokenizer\": {\"type\": \"ByteLevel\"}}");
    load_error("t.json", v.p, v.len,
               "t.json: the vocab has no token for byte 0x00 (a byte-level BPE has all 256)");
    free(v.p);
}

/* ---- map(tokenize, ...) --------------------------------------------------------------------- */

static char dir[64];

static int setup(void **state)
{
    (void)state;
    snprintf(dir, sizeof dir, "/tmp/sluice-test-bpe-XXXXXX");
    return mkdtemp(dir) ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    pipe_tokenize_cache_clear();
    tmp_remove(dir);
    return 0;
}

/* The text of a run of pipeline (reg: a plain one when NULL), "ERR message" at its end when it
 * fails, or "OPEN message" when it does not open. */
static char *run_text(const char *pipeline, struct sluice_registry *reg)
{
    struct pipe_spec *spec = pipeline_parse(pipeline);
    struct sluice_registry *own = NULL;
    if (!reg) {
        assert_int_equal(pipe_registry_new(&own), 0);
        reg = own;
    }
    char err[SLUICE_ERRMSG_SIZE] = "";
    char *out;
    struct pipe_run *run = NULL;
    if (pipe_registry_check(reg, spec, err, sizeof err) != 0 ||
        pipe_open(spec, reg, &run, err, sizeof err) != 0) {
        size_t n = strlen(err) + 8;
        out = malloc(n);
        snprintf(out, n, "OPEN %s", err);
    } else {
        out = pipeline_text(run, NULL);
        pipe_run_free(run);
    }
    pipe_registry_free(own);
    pipe_spec_free(spec);
    return out;
}

static void expect_run(const char *pipeline, struct sluice_registry *reg, const char *want)
{
    char *out = run_text(pipeline, reg);
    if (strcmp(out, want) != 0)
        fail_msg("%s:\n got: %s\nwant: %s", pipeline, out, want);
    free(out);
}

static void write_tokenizers(void)
{
    char path[128];
    char *data = rank_file(small_tokens, sizeof small_tokens / sizeof small_tokens[0]);
    snprintf(path, sizeof path, "%s/cl100k_base.tiktoken", dir);
    file_write_text(path, data);
    free(data);
    char *json = small_json(false, NULL, NULL, NULL);
    snprintf(path, sizeof path, "%s/tokenizer.json", dir);
    file_write_text(path, json);
    free(json);
    file_write_in(dir, "text.txt", "hello world\nhe<|endoftext|>ll\n\n");
    file_write_in(dir, "text.jsonl",
                  "{\"n\": 7, \"text\": \"hello world\"}\n{\"n\": 8, \"text\": \"\"}\n");
}

static void test_op(void **state)
{
    (void)state;
    write_tokenizers();
    char p[512];
    snprintf(p, sizeof p, "lines(\"%s/text.txt\") | map(tokenize, \"%s/cl100k_base.tiktoken\")",
             dir, dir);
    expect_run(p, NULL,
               "[266, 261, 108, 100]\n[256, 60, 124, 101, 110, 100, 111, 102, 116, 101, 120, 116, "
               "124, 62, 257]\n[]\n");
    snprintf(p, sizeof p,
             "lines(\"%s/text.txt\") | map(tokenize, \"%s/cl100k_base.tiktoken\", \"special\", "
             "\"eos\", \"bos=<|fim_prefix|>\")",
             dir, dir);
    expect_run(p, NULL,
               "[100258, 266, 261, 108, 100, 100257]\n[100258, 256, 100257, 257, 100257]\n"
               "[100258, 100257]\n");
    /* Other components are kept; the first becomes the ids. */
    snprintf(p, sizeof p,
             "jsonl(\"%s/text.jsonl\", \"text\", \"n\") | map(tokenize, \"%s/tokenizer.json\", "
             "\"bos\")",
             dir, dir);
    expect_run(p, NULL, "([303, 256, 258, 261, 108, 100], 7)\n([303], 8)\n");
    snprintf(p, sizeof p, "lines(\"%s/text.txt\") | map(tokenize, \"%s/tokenizer.json\")", dir,
             dir);
    expect_run(p, NULL,
               "[256, 258, 261, 108, 100]\n[256, 60, 124, 101, 110, 100, 111, 102, 116, 101, 120, "
               "116, 124, 62, 257]\n[]\n");
}

static void test_op_errors(void **state)
{
    (void)state;
    write_tokenizers();
    char p[512], want[1024];
    static const struct {
        const char *args, *want;
    } checks[] = {
        {"", "takes 1 to 4 arguments, got 0"},
        {"1", "the first argument must be the tokenizer file's path, a non-empty string"},
        {"\"\"", "the first argument must be the tokenizer file's path, a non-empty string"},
        {"\"t.json\", \"bogus\"", "unknown option \"bogus\" (expected \"special\", \"bos\", "
                                  "\"eos\", \"bos=TOKEN\" or \"eos=TOKEN\")"},
        {"\"t.json\", \"bos\", \"bos=<s>\"", "option \"bos\" given twice"},
        {"\"t.json\", \"eos=\"", "option \"eos=\" needs a token after the '='"},
        {"\"t.json\", 3", "argument 2 must be an option string (\"special\", \"bos\", \"eos\", "
                          "\"bos=TOKEN\" or \"eos=TOKEN\")"},
    };
    for (size_t i = 0; i < sizeof checks / sizeof checks[0]; i++) {
        snprintf(p, sizeof p, "lines(\"x\") | map(tokenize%s%s)", checks[i].args[0] ? ", " : "",
                 checks[i].args);
        char *out = run_text(p, NULL);
        char whole[512];
        snprintf(whole, sizeof whole, "OPEN column 14: map(tokenize)%s%s",
                 strncmp(checks[i].want, "takes", 5) == 0 ? " " : ": ", checks[i].want);
        if (strcmp(out, whole) != 0)
            fail_msg("%s: got \"%s\", want \"%s\"", p, out, whole);
        free(out);
    }
    /* Failures on the first element: the file, the options, the element. */
    snprintf(p, sizeof p, "lines(\"%s/text.txt\") | map(tokenize, \"%s/missing.json\")", dir, dir);
    snprintf(want, sizeof want,
             "ERR map(tokenize, \"%s/missing.json\"): %s/missing.json: No such file or directory "
             "(record at %s/text.txt offset 0)",
             dir, dir, dir);
    expect_run(p, NULL, want);
    snprintf(p, sizeof p, "lines(\"%s/text.txt\") | map(tokenize, \"%s/text.txt\")", dir, dir);
    snprintf(want, sizeof want,
             "ERR map(tokenize, \"%s/text.txt\"): %s/text.txt: not JSON: line 1 column 5: '[' or "
             "'{' expected near 'hello' (record at %s/text.txt offset 0)",
             dir, dir, dir);
    expect_run(p, NULL, want);
    snprintf(p, sizeof p,
             "lines(\"%s/text.txt\") | map(tokenize, \"%s/cl100k_base.tiktoken\", "
             "\"bos\")",
             dir, dir);
    snprintf(want, sizeof want,
             "ERR map(tokenize, \"%s/cl100k_base.tiktoken\"): cl100k_base has no BOS token; name "
             "one with \"bos=TOKEN\" (record at %s/text.txt offset 0)",
             dir, dir);
    expect_run(p, NULL, want);
    snprintf(p, sizeof p,
             "lines(\"%s/text.txt\") | map(tokenize, \"%s/tokenizer.json\", "
             "\"eos=<|nope|>\")",
             dir, dir);
    snprintf(want, sizeof want,
             "ERR map(tokenize, \"%s/tokenizer.json\"): eos=<|nope|>: the tokenizer has no such "
             "special token (record at %s/text.txt offset 0)",
             dir, dir);
    expect_run(p, NULL, want);
    snprintf(p, sizeof p, "range(2) | map(tokenize, \"%s/tokenizer.json\")", dir);
    snprintf(want, sizeof want,
             "ERR map(tokenize, \"%s/tokenizer.json\"): component 0 is int64 of rank 0, expected "
             "a bytes scalar (the text)",
             dir);
    expect_run(p, NULL, want);
}

/* A confined registry opens tokenizers within its data roots only. */
static void test_op_roots(void **state)
{
    (void)state;
    write_tokenizers();
    char root[128], p[512], want[1024], err[SLUICE_ERRMSG_SIZE];
    snprintf(root, sizeof root, "%s/root", dir);
    assert_int_equal(mkdir(root, 0700), 0);
    file_write_in(root, "text.txt", "hello\n");
    const char *dirs[] = {root};
    struct pipe_roots roots;
    assert_int_equal(pipe_roots_init(&roots, dirs, 1, err, sizeof err), 0);
    struct sluice_registry *reg = NULL;
    assert_int_equal(pipe_registry_new(&reg), 0);
    assert_int_equal(pipe_registry_confine(reg, &roots, NULL, 0, err, sizeof err), 0);
    snprintf(p, sizeof p, "lines(\"%s/text.txt\") | map(tokenize, \"%s/tokenizer.json\")", root,
             dir);
    snprintf(want, sizeof want,
             "ERR map(tokenize, \"%s/tokenizer.json\"): tokenizer: %s/tokenizer.json is outside "
             "the data roots (%s) (record at %s/text.txt offset 0)",
             dir, dir, root, root);
    expect_run(p, reg, want);
    /* A link inside the root that leads outside is outside. */
    char link[192], target[192];
    snprintf(link, sizeof link, "%s/tok.json", root);
    snprintf(target, sizeof target, "%s/tokenizer.json", dir);
    assert_int_equal(symlink(target, link), 0);
    snprintf(p, sizeof p, "lines(\"%s/text.txt\") | map(tokenize, \"%s\")", root, link);
    snprintf(want, sizeof want,
             "ERR map(tokenize, \"%s\"): tokenizer: %s/tokenizer.json is outside the data roots "
             "(%s) (record at %s/text.txt offset 0)",
             link, dir, root, root);
    expect_run(p, reg, want);
    /* Within the root it runs. */
    char inside[192];
    snprintf(inside, sizeof inside, "%s/cl100k_base.tiktoken", root);
    char *data = rank_file(small_tokens, sizeof small_tokens / sizeof small_tokens[0]);
    file_write_text(inside, data);
    free(data);
    snprintf(p, sizeof p, "lines(\"%s/text.txt\") | map(tokenize, \"%s\")", root, inside);
    expect_run(p, reg, "[266]\n");
    pipe_registry_free(reg);
    pipe_roots_release(&roots);
}

/* Loaded tokenizers are shared while their file stays the same; a changed file is loaded
 * afresh. */
static void test_op_file_changes(void **state)
{
    (void)state;
    write_tokenizers();
    char path[128], p[512];
    snprintf(path, sizeof path, "%s/cl100k_base.tiktoken", dir);
    snprintf(p, sizeof p, "lines(\"%s/text.txt\") | take(1) | map(tokenize, \"%s\")", dir, path);
    expect_run(p, NULL, "[266, 261, 108, 100]\n");
    expect_run(p, NULL, "[266, 261, 108, 100]\n");
    /* Without "hello" (rank 266) and the rest: the bytes and he (256) only. */
    char *data = rank_file(small_tokens, 1);
    file_write_text(path, data);
    free(data);
    /* Same size or not, a new modification time is a new file. */
    struct timespec later[2] = {{.tv_sec = time(NULL) + 10}, {.tv_sec = time(NULL) + 10}};
    assert_int_equal(utimensat(AT_FDCWD, path, later, 0), 0);
    expect_run(p, NULL, "[256, 108, 108, 111, 32, 119, 111, 114, 108, 100]\n");
    pipe_tokenize_cache_clear();
    expect_run(p, NULL, "[256, 108, 108, 111, 32, 119, 111, 114, 108, 100]\n");
}

/* Threads that run pipelines over the same tokenizer files at once share the loaded ones; more
 * files than the cache keeps idle are loaded, dropped and loaded again. Every run gives the ids
 * its file gives. */
#define CACHE_THREADS 4
#define CACHE_FILES 7
#define CACHE_RUNS 12

static void *cache_worker(void *arg)
{
    int k = (int)(intptr_t)arg;
    for (int r = 0; r < CACHE_RUNS; r++) {
        int f = (k + r) % CACHE_FILES;
        char p[512];
        snprintf(p, sizeof p,
                 "lines(\"%s/text.txt\") | take(1) | map(tokenize, \"%s/%d/cl100k_base.tiktoken\")",
                 dir, dir, f);
        /* File f holds the first f + 1 tokens of small_tokens: he, ll, llo, " w", or, " wor"
         * and aa, so each gives "hello world" a little more merged. */
        const char *want = f >= 5   ? "[256, 258, 261, 108, 100]\n"
                           : f >= 4 ? "[256, 258, 259, 260, 108, 100]\n"
                           : f >= 3 ? "[256, 258, 259, 111, 114, 108, 100]\n"
                           : f >= 2 ? "[256, 258, 32, 119, 111, 114, 108, 100]\n"
                           : f >= 1 ? "[256, 257, 111, 32, 119, 111, 114, 108, 100]\n"
                                    : "[256, 108, 108, 111, 32, 119, 111, 114, 108, 100]\n";
        char *out = run_text(p, NULL);
        if (strcmp(out, want) != 0)
            fail_msg("%s:\n got: %s\nwant: %s", p, out, want);
        free(out);
    }
    return NULL;
}

static void test_op_shared_cache(void **state)
{
    (void)state;
    write_tokenizers();
    for (int f = 0; f < CACHE_FILES; f++) {
        char sub[128], path[160];
        snprintf(sub, sizeof sub, "%s/%d", dir, f);
        assert_int_equal(mkdir(sub, 0700), 0);
        snprintf(path, sizeof path, "%s/cl100k_base.tiktoken", sub);
        char *data = rank_file(small_tokens, (size_t)f + 1);
        file_write_text(path, data);
        free(data);
    }
    pthread_t t[CACHE_THREADS];
    for (int k = 0; k < CACHE_THREADS; k++)
        assert_int_equal(pthread_create(&t[k], NULL, cache_worker, (void *)(intptr_t)k), 0);
    for (int k = 0; k < CACHE_THREADS; k++)
        assert_int_equal(pthread_join(t[k], NULL), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_rank_file_merges),
        cmocka_unit_test(test_long_pieces),
        cmocka_unit_test(test_invalid_utf8),
        cmocka_unit_test(test_special_tokens),
        cmocka_unit_test(test_o200k_names),
        cmocka_unit_test(test_json_merges),
        cmocka_unit_test(test_json_added_tokens),
        cmocka_unit_test(test_json_post_processor),
        cmocka_unit_test(test_json_split),
        cmocka_unit_test(test_bad_files),
        cmocka_unit_test_setup_teardown(test_op, setup, teardown),
        cmocka_unit_test_setup_teardown(test_op_errors, setup, teardown),
        cmocka_unit_test_setup_teardown(test_op_roots, setup, teardown),
        cmocka_unit_test_setup_teardown(test_op_file_changes, setup, teardown),
        cmocka_unit_test_setup_teardown(test_op_shared_cache, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
