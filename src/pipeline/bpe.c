/* Byte-level BPE (bpe.h): the tables, the two loaders (tiktoken rank files, Hugging Face
 * tokenizer.json), then encoding: added tokens, pre-tokenization, merges. */
#define PCRE2_CODE_UNIT_WIDTH 8
#include "bpe.h"

#include "common/error.h"

#include <jansson.h>
#include <pcre2.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Pre-tokenization regexes a tokenizer may chain (Split steps and ByteLevel's own). */
#define MAX_STEPS 4
/* Ids "bos" or "eos" may add. */
#define MAX_EDGE_IDS 4
/* Pieces up to this many bytes are merged by scanning an array; longer ones through a heap. */
#define SMALL_PIECE 96
#define RANK_NONE UINT32_MAX

/* ---- The published tiktoken encodings ------------------------------------------------------ */

/* The patterns are the ones the tiktoken package for JavaScript ships with the encodings (its
 * registry.json), which the tests compare against. Python's tiktoken writes cl100k's and o200k's
 * with possessive quantifiers and a "\s++$" alternative; that form cuts white space at the very
 * end of a text differently ("a  \n  ": "  \n  " whole, not "  \n" and "  "). */
#define PAT_CL100K                                                                                 \
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| "                     \
    "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
#define PAT_O200K                                                                                  \
    "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]*[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]+"    \
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)?|[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]+"    \
    "[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|\\p{N}{1,3}| "                    \
    "?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
/* GPT-2's, also Hugging Face's ByteLevel pre-tokenizer's. */
#define PAT_GPT2                                                                                   \
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+"

struct named_token {
    const char *text;
    int32_t id;
};

struct encoding {
    const char *name;
    const char *pattern;
    struct named_token special[6]; /* ends at a NULL text */
};

static const struct encoding encodings[] = {
    {"cl100k_base",
     PAT_CL100K,
     {{"<|endoftext|>", 100257},
      {"<|fim_prefix|>", 100258},
      {"<|fim_middle|>", 100259},
      {"<|fim_suffix|>", 100260},
      {"<|endofprompt|>", 100276}}},
    {"o200k_base", PAT_O200K, {{"<|endoftext|>", 199999}, {"<|endofprompt|>", 200018}}},
    {"p50k_base", PAT_GPT2, {{"<|endoftext|>", 50256}}},
    {"r50k_base", PAT_GPT2, {{"<|endoftext|>", 50256}}},
};

/* The special tokens "bos" and "eos" fall back on, in order, when a tokenizer.json's
 * post-processor names none. */
static const char *const bos_names[] = {"<|begin_of_text|>", "<s>", "<|startoftext|>", "<bos>"};
static const char *const eos_names[] = {"<|end_of_text|>", "<|endoftext|>", "</s>", "<eos>"};

/* ---- Tables -------------------------------------------------------------------------------- */

static inline uint64_t mix64(uint64_t h)
{
    h ^= h >> 32;
    h *= 0xd6e8feb86659fd93ULL;
    h ^= h >> 32;
    return h;
}

/* A hash of short byte strings (tokens are a few bytes): eight bytes a step, the tail read as
 * two overlapping words. The length is mixed in first. */
static inline uint64_t hash_bytes(const uint8_t *p, size_t n)
{
    uint64_t h = 0x9e3779b97f4a7c15ULL * (n + 1);
    while (n > 8) {
        uint64_t w;
        memcpy(&w, p, 8);
        h = (h ^ w) * 0xbf58476d1ce4e5b9ULL;
        h ^= h >> 29;
        p += 8;
        n -= 8;
    }
    uint64_t w;
    if (n >= 4) {
        uint32_t a, c;
        memcpy(&a, p, 4);
        memcpy(&c, p + n - 4, 4);
        w = (uint64_t)a << 32 | c;
    } else if (n > 0) {
        w = (uint64_t)p[0] << 16 | (uint64_t)p[n >> 1] << 8 | p[n - 1];
    } else {
        w = 0;
    }
    return mix64((h ^ w) * 0x94d049bb133111ebULL);
}

/* Byte strings to ids: the vocab (tokenizer.json) or the ranks (rank file). */
struct tok {
    uint32_t off, len; /* in blob */
    int32_t id;
};

struct bytemap {
    uint8_t *blob;
    size_t blob_len, blob_cap;
    struct tok *toks;
    size_t n, cap;
    uint64_t *slots; /* (hash tag << 32) | (index in toks + 1); 0: empty */
    size_t mask;
};

static int bytemap_init(struct bytemap *m, size_t cap)
{
    size_t slots = 16;
    while (slots < cap * 2)
        slots <<= 1;
    m->toks = malloc((cap ? cap : 1) * sizeof(*m->toks));
    m->slots = calloc(slots, sizeof(*m->slots));
    if (!m->toks || !m->slots)
        return SLUICE_ERR_NOMEM;
    m->cap = cap;
    m->mask = slots - 1;
    return 0;
}

static void bytemap_release(struct bytemap *m)
{
    free(m->blob);
    free(m->toks);
    free(m->slots);
}

static inline int32_t bytemap_get(const struct bytemap *m, const uint8_t *p, size_t n)
{
    uint64_t h = hash_bytes(p, n);
    uint32_t tag = (uint32_t)(h >> 32);
    for (size_t i = h & m->mask;; i = (i + 1) & m->mask) {
        uint64_t s = m->slots[i];
        if (!s)
            return -1;
        if ((uint32_t)(s >> 32) == tag) {
            const struct tok *t = &m->toks[(uint32_t)s - 1];
            if (t->len == n && memcmp(m->blob + t->off, p, n) == 0)
                return t->id;
        }
    }
}

/* Adds p[0, n) with id (at most cap entries). Returns 0, SLUICE_ERR_NOMEM, or SLUICE_ERR_EXISTS
 * with *old the id the same bytes already have. */
static int bytemap_put(struct bytemap *m, const uint8_t *p, size_t n, int32_t id, int32_t *old)
{
    uint64_t h = hash_bytes(p, n);
    uint32_t tag = (uint32_t)(h >> 32);
    size_t i = h & m->mask;
    for (;; i = (i + 1) & m->mask) {
        uint64_t s = m->slots[i];
        if (!s)
            break;
        const struct tok *t = &m->toks[(uint32_t)s - 1];
        if ((uint32_t)(s >> 32) == tag && t->len == n && memcmp(m->blob + t->off, p, n) == 0) {
            *old = t->id;
            return SLUICE_ERR_EXISTS;
        }
    }
    if (m->n == m->cap)
        return SLUICE_ERR_NOMEM; /* the loaders size the map for every entry they add */
    if (m->blob_len + n > m->blob_cap) {
        size_t cap = m->blob_cap ? m->blob_cap * 2 : 4096;
        while (cap < m->blob_len + n)
            cap *= 2;
        uint8_t *blob = realloc(m->blob, cap);
        if (!blob)
            return SLUICE_ERR_NOMEM;
        m->blob = blob;
        m->blob_cap = cap;
    }
    memcpy(m->blob + m->blob_len, p, n);
    m->toks[m->n] = (struct tok){(uint32_t)m->blob_len, (uint32_t)n, id};
    m->blob_len += n;
    m->slots[i] = (uint64_t)tag << 32 | (uint64_t)(m->n + 1);
    m->n++;
    return 0;
}

/* Merges of a tokenizer.json: (left id, right id) to (rank, merged id). */
struct pair {
    uint64_t key;
    uint32_t rank; /* RANK_NONE: empty slot */
    int32_t id;
};

static inline size_t pair_slot(uint64_t key, int bits)
{
    return (size_t)((key * 0x9e3779b97f4a7c15ULL) >> (64 - bits));
}

static inline uint64_t pair_key(int32_t a, int32_t b)
{
    return (uint64_t)(uint32_t)a << 32 | (uint32_t)b;
}

/* An added token (tokenizer.json) or a tiktoken special token. */
struct added {
    uint32_t off, len; /* in the tokenizer's added_blob */
    int32_t id;
    uint8_t first; /* its first byte */
    bool special, lstrip, rstrip;
};

/* The added tokens matched in one pass over the text, sorted by first byte, then longest first,
 * so the first that matches at a position is the longest there. */
struct added_set {
    struct added *tok;
    size_t n, cap, nplain;               /* nplain: those not special */
    uint32_t first[257];                 /* tok[first[c], first[c + 1]) begin with byte c */
    bool mark_all[256], mark_plain[256]; /* first bytes of any token, of a non-special one */
};

struct bpe {
    char kind[32];
    struct bytemap map;
    int32_t byte_id[256];
    bool whole_first;   /* a piece that is a token whole is that token (tiktoken, ignore_merges) */
    struct pair *pairs; /* NULL for a rank file: ranks of concatenations instead */
    int pair_bits;
    pcre2_code *rx[MAX_STEPS];
    int nrx;
    bool prefix_space; /* ByteLevel's add_prefix_space */
    /* Hugging Face matches added tokens marked normalized (set 1) only in what the others (set 0)
     * leave; tiktoken's special tokens are all in set 0. */
    struct added_set added[2];
    uint8_t *added_blob;
    size_t added_len, added_cap;
    int32_t bos[MAX_EDGE_IDS], eos[MAX_EDGE_IDS];
    size_t nbos, neos;
};

/* ---- Regexes ------------------------------------------------------------------------------- */

/* \s and \w as Oniguruma (Hugging Face) and Rust's regex (tiktoken) read them: White_Space is
 * \t-\r, U+0085 and \p{Z}; PCRE2's own \s also takes U+180E, and its \w leaves out marks. */
#define WS_IN "\\t-\\r\\x{85}\\p{Z}"
#define W_IN "\\p{L}\\p{M}\\p{N}\\p{Pc}"

/* A copy of pattern p[0, n) (malloc'd, NUL-terminated) with \s and \w spelled out as classes,
 * and \S and \W outside a class as their complements. NULL when out of memory. */
static char *rx_rewrite(const char *p, size_t n)
{
    size_t cap = n * 24 + 1;
    char *out = malloc(cap);
    if (!out)
        return NULL;
    size_t o = 0;
    bool in_class = false;
#define PUT(s)                                                                                     \
    do {                                                                                           \
        size_t l_ = strlen(s);                                                                     \
        memcpy(out + o, s, l_);                                                                    \
        o += l_;                                                                                   \
    } while (0)
    for (size_t i = 0; i < n; i++) {
        char c = p[i];
        if (c == '\\' && i + 1 < n) {
            char d = p[++i];
            if (d == 'Q') {
                /* Quoted text, to \E, stays as it is. */
                out[o++] = c;
                out[o++] = d;
                while (i + 1 < n && !(p[i + 1] == '\\' && i + 2 < n && p[i + 2] == 'E'))
                    out[o++] = p[++i];
                continue;
            }
            if (d == 's')
                PUT(in_class ? WS_IN : "[" WS_IN "]");
            else if (d == 'S' && !in_class)
                PUT("[^" WS_IN "]");
            else if (d == 'w')
                PUT(in_class ? W_IN : "[" W_IN "]");
            else if (d == 'W' && !in_class)
                PUT("[^" W_IN "]");
            else {
                out[o++] = c;
                out[o++] = d;
            }
            continue;
        }
        out[o++] = c;
        if (!in_class && c == '[') {
            in_class = true;
            /* A ']' first in a class (after an optional '^') is literal. */
            if (i + 1 < n && p[i + 1] == '^')
                out[o++] = p[++i];
            if (i + 1 < n && p[i + 1] == ']')
                out[o++] = p[++i];
        } else if (in_class && c == '[' && i + 1 < n && p[i + 1] == ':') {
            /* A POSIX class inside a class: copied through its ":]". */
            while (i + 1 < n && !(p[i] == ':' && p[i + 1] == ']'))
                out[o++] = p[++i];
            if (i + 1 < n)
                out[o++] = p[++i];
        } else if (in_class && c == ']') {
            in_class = false;
        }
    }
#undef PUT
    out[o] = '\0';
    return out;
}

/* Compiles a pre-tokenization step: a regex (rewritten as above) or a literal string. */
static int add_step(struct bpe *b, const char *name, const char *what, const char *p, size_t n,
                    bool literal, char *err, size_t errlen)
{
    if (b->nrx == MAX_STEPS)
        return err_set(err, errlen, SLUICE_ERR_INVALID,
                       "%s: more than %d pre-tokenization steps are not supported", name,
                       MAX_STEPS);
    char *pat = literal ? NULL : rx_rewrite(p, n);
    if (!literal && !pat)
        return err_set(err, errlen, SLUICE_ERR_NOMEM, "%s", sluice_strerror(SLUICE_ERR_NOMEM));
    uint32_t opts = PCRE2_UTF | PCRE2_MATCH_INVALID_UTF | (literal ? PCRE2_LITERAL : PCRE2_UCP);
    int code = 0;
    PCRE2_SIZE at = 0;
    pcre2_code *rx = pcre2_compile((PCRE2_SPTR)(literal ? p : pat),
                                   literal ? n : PCRE2_ZERO_TERMINATED, opts, &code, &at, NULL);
    free(pat);
    if (!rx) {
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(code, msg, sizeof msg);
        return err_set(err, errlen, SLUICE_ERR_INVALID, "%s: %s: %s (pattern offset %zu)", name,
                       what, (const char *)msg, (size_t)at);
    }
    /* Without JIT (a platform that lacks it) pcre2_match interprets: slower, same results. */
    (void)pcre2_jit_compile(rx, PCRE2_JIT_COMPLETE);
    b->rx[b->nrx++] = rx;
    return 0;
}

/* ---- Added tokens -------------------------------------------------------------------------- */

static int added_blob_put(struct bpe *b, const void *p, size_t n, uint32_t *off)
{
    if (b->added_len + n > b->added_cap) {
        size_t cap = b->added_cap ? b->added_cap * 2 : 1024;
        while (cap < b->added_len + n)
            cap *= 2;
        uint8_t *blob = realloc(b->added_blob, cap);
        if (!blob)
            return SLUICE_ERR_NOMEM;
        b->added_blob = blob;
        b->added_cap = cap;
    }
    memcpy(b->added_blob + b->added_len, p, n);
    *off = (uint32_t)b->added_len;
    b->added_len += n;
    return 0;
}

static int added_push(struct bpe *b, int set, const char *text, size_t len, int32_t id,
                      bool special, bool lstrip, bool rstrip)
{
    struct added_set *s = &b->added[set];
    if (s->n == s->cap) {
        size_t cap = s->cap ? s->cap * 2 : 8;
        struct added *tok = realloc(s->tok, cap * sizeof(*tok));
        if (!tok)
            return SLUICE_ERR_NOMEM;
        s->tok = tok;
        s->cap = cap;
    }
    uint32_t off;
    int rc = added_blob_put(b, text, len, &off);
    if (rc)
        return rc;
    s->tok[s->n++] =
        (struct added){off, (uint32_t)len, id, (uint8_t)text[0], special, lstrip, rstrip};
    return 0;
}

/* By first byte, then longest first; tokens of one length and first byte cannot both match at
 * one position unless they are equal, and then the lower id comes first. */
static int added_cmp(const void *x, const void *y)
{
    const struct added *a = x, *c = y;
    if (a->first != c->first)
        return a->first < c->first ? -1 : 1;
    if (a->len != c->len)
        return a->len > c->len ? -1 : 1;
    return a->id < c->id ? -1 : a->id > c->id;
}

/* Sorts each set and indexes it by first byte. */
static void added_index(struct bpe *b)
{
    for (int k = 0; k < 2; k++) {
        struct added_set *s = &b->added[k];
        if (s->n)
            qsort(s->tok, s->n, sizeof(*s->tok), added_cmp);
        memset(s->first, 0, sizeof s->first);
        for (size_t i = 0; i < s->n; i++) {
            uint8_t c = s->tok[i].first;
            s->first[c + 1]++;
            s->mark_all[c] = true;
            if (!s->tok[i].special) {
                s->mark_plain[c] = true;
                s->nplain++;
            }
        }
        for (int c = 0; c < 256; c++)
            s->first[c + 1] += s->first[c];
    }
}

int32_t bpe_special_id(const struct bpe *b, const char *text, size_t len)
{
    for (int k = 0; k < 2; k++) {
        const struct added_set *s = &b->added[k];
        for (size_t i = 0; i < s->n; i++)
            if (s->tok[i].len == len && memcmp(b->added_blob + s->tok[i].off, text, len) == 0)
                return s->tok[i].id;
    }
    return -1;
}

/* The id of a special token named in names, for "bos"/"eos" without a post-processor. */
static void edge_fallback(const struct bpe *b, const char *const *names, size_t nnames,
                          int32_t *ids, size_t *n)
{
    for (size_t i = 0; i < nnames && *n == 0; i++) {
        for (int k = 0; k < 2 && *n == 0; k++) {
            const struct added_set *s = &b->added[k];
            for (size_t j = 0; j < s->n; j++) {
                const struct added *a = &s->tok[j];
                if (a->special && a->len == strlen(names[i]) &&
                    memcmp(b->added_blob + a->off, names[i], a->len) == 0) {
                    ids[0] = a->id;
                    *n = 1;
                    break;
                }
            }
        }
    }
}

/* ---- Loading: what both forms share --------------------------------------------------------- */

static int nomem(char *err, size_t errlen)
{
    return err_set(err, errlen, SLUICE_ERR_NOMEM, "%s", sluice_strerror(SLUICE_ERR_NOMEM));
}

static struct bpe *bpe_alloc(void)
{
    struct bpe *b = calloc(1, sizeof(*b));
    if (b)
        for (int i = 0; i < 256; i++)
            b->byte_id[i] = -1;
    return b;
}

void bpe_free(struct bpe *b)
{
    if (!b)
        return;
    bytemap_release(&b->map);
    free(b->pairs);
    for (int i = 0; i < b->nrx; i++)
        pcre2_code_free(b->rx[i]);
    free(b->added[0].tok);
    free(b->added[1].tok);
    free(b->added_blob);
    free(b);
}

const char *bpe_kind(const struct bpe *b)
{
    return b->kind;
}

size_t bpe_bos(const struct bpe *b, const int32_t **ids)
{
    *ids = b->bos;
    return b->nbos;
}

size_t bpe_eos(const struct bpe *b, const int32_t **ids)
{
    *ids = b->eos;
    return b->neos;
}

/* Fills byte_id from the map; every byte must be a token of its own in a byte-level BPE. */
static int byte_ids(struct bpe *b, const char *name, const char *what, char *err, size_t errlen)
{
    for (int c = 0; c < 256; c++) {
        uint8_t byte = (uint8_t)c;
        b->byte_id[c] = bytemap_get(&b->map, &byte, 1);
        if (b->byte_id[c] < 0)
            return err_set(err, errlen, SLUICE_ERR_INVALID,
                           "%s: %s has no token for byte 0x%02x (a byte-level BPE has all 256)",
                           name, what, c);
    }
    return 0;
}

static const char *base_name(const char *path)
{
    const char *slash = strrchr(path, '/');
    return slash ? slash + 1 : path;
}

/* ---- Rank files ---------------------------------------------------------------------------- */

static int b64_value(uint8_t c)
{
    if (c >= 'A' && c <= 'Z')
        return c - 'A';
    if (c >= 'a' && c <= 'z')
        return c - 'a' + 26;
    if (c >= '0' && c <= '9')
        return c - '0' + 52;
    if (c == '+')
        return 62;
    if (c == '/')
        return 63;
    return -1;
}

/* Decodes standard base64 with padding, p[0, n) into out (at least n * 3 / 4 bytes). Returns the
 * decoded length, or -1 when p is not base64. */
static long b64_decode(const uint8_t *p, size_t n, uint8_t *out)
{
    if (n == 0 || n % 4 != 0)
        return -1;
    size_t o = 0;
    for (size_t i = 0; i < n; i += 4) {
        int v[4];
        int pad = 0;
        for (int k = 0; k < 4; k++) {
            if (p[i + k] == '=' && i + 4 == n && k >= 2) {
                v[k] = 0;
                pad++;
            } else if (pad || (v[k] = b64_value(p[i + k])) < 0) {
                return -1;
            }
        }
        uint32_t w =
            (uint32_t)v[0] << 18 | (uint32_t)v[1] << 12 | (uint32_t)v[2] << 6 | (uint32_t)v[3];
        out[o++] = (uint8_t)(w >> 16);
        if (pad < 2)
            out[o++] = (uint8_t)(w >> 8);
        if (pad < 1)
            out[o++] = (uint8_t)w;
    }
    return (long)o;
}

static bool is_blank(uint8_t c)
{
    return c == ' ' || c == '\t' || c == '\r';
}

static int load_ranks(struct bpe *b, const char *name, const struct encoding *enc, const uint8_t *d,
                      size_t len, char *err, size_t errlen)
{
    snprintf(b->kind, sizeof b->kind, "%s", enc->name);
    size_t lines = 1;
    for (size_t i = 0; i < len; i++)
        lines += d[i] == '\n';
    int rc = bytemap_init(&b->map, lines);
    uint8_t *tok = malloc(len / 4 * 3 + 3);
    uint8_t *seen = NULL; /* a bit per rank, to refuse a rank given twice */
    size_t seen_bytes = 0;
    if (rc || !tok) {
        rc = err_set(err, errlen, SLUICE_ERR_NOMEM, "%s", sluice_strerror(SLUICE_ERR_NOMEM));
        goto done;
    }
    size_t lineno = 0;
    for (size_t at = 0; at < len;) {
        const uint8_t *line = d + at;
        const uint8_t *nl = memchr(line, '\n', len - at);
        size_t n = nl ? (size_t)(nl - line) : len - at;
        at += n + 1;
        lineno++;
        while (n > 0 && is_blank(line[n - 1]))
            n--;
        size_t i = 0;
        while (i < n && is_blank(line[i]))
            i++;
        if (i == n)
            continue; /* blank lines are allowed, as tiktoken allows them */
        size_t t0 = i;
        while (i < n && !is_blank(line[i]))
            i++;
        size_t t1 = i;
        while (i < n && is_blank(line[i]))
            i++;
        uint64_t rank = 0;
        size_t r0 = i;
        for (; i < n && line[i] >= '0' && line[i] <= '9'; i++)
            rank = rank > (uint64_t)BPE_MAX_ID ? rank : rank * 10 + (uint64_t)(line[i] - '0');
        if (r0 == t1 || i != n || r0 == n) {
            rc = err_set(err, errlen, SLUICE_ERR_INVALID,
                         "%s: line %zu: expected \"BASE64TOKEN RANK\"", name, lineno);
            goto done;
        }
        if (rank > (uint64_t)BPE_MAX_ID) {
            rc = err_set(err, errlen, SLUICE_ERR_INVALID, "%s: line %zu: rank over %d", name,
                         lineno, BPE_MAX_ID);
            goto done;
        }
        long tlen = b64_decode(line + t0, t1 - t0, tok);
        if (tlen <= 0) {
            rc = err_set(err, errlen, SLUICE_ERR_INVALID, "%s: line %zu: bad base64 token", name,
                         lineno);
            goto done;
        }
        if (rank / 8 >= seen_bytes) {
            size_t grow = seen_bytes ? seen_bytes : 8192;
            while (grow <= rank / 8)
                grow *= 2;
            uint8_t *more = realloc(seen, grow);
            if (!more) {
                rc =
                    err_set(err, errlen, SLUICE_ERR_NOMEM, "%s", sluice_strerror(SLUICE_ERR_NOMEM));
                goto done;
            }
            memset(more + seen_bytes, 0, grow - seen_bytes);
            seen = more;
            seen_bytes = grow;
        }
        if (seen[rank / 8] & (1u << (rank % 8))) {
            rc = err_set(err, errlen, SLUICE_ERR_INVALID, "%s: line %zu: rank %llu given twice",
                         name, lineno, (unsigned long long)rank);
            goto done;
        }
        seen[rank / 8] |= (uint8_t)(1u << (rank % 8));
        int32_t old;
        rc = bytemap_put(&b->map, tok, (size_t)tlen, (int32_t)rank, &old);
        if (rc == SLUICE_ERR_EXISTS) {
            rc = err_set(err, errlen, SLUICE_ERR_INVALID,
                         "%s: line %zu: token already listed with rank %d", name, lineno, old);
            goto done;
        }
        if (rc) {
            rc = err_set(err, errlen, rc, "%s", sluice_strerror(rc));
            goto done;
        }
    }
    if ((rc = byte_ids(b, name, "the rank file", err, errlen)) != 0)
        goto done;
    for (const struct named_token *s = enc->special; s->text; s++) {
        uint64_t id = (uint64_t)s->id;
        if (id / 8 < seen_bytes && (seen[id / 8] & (1u << (id % 8)))) {
            rc = err_set(err, errlen, SLUICE_ERR_INVALID,
                         "%s: rank %d is %s's special token %s, not a rank", name, s->id, enc->name,
                         s->text);
            goto done;
        }
        if ((rc = added_push(b, 0, s->text, strlen(s->text), s->id, true, false, false)) != 0) {
            rc = err_set(err, errlen, rc, "%s", sluice_strerror(rc));
            goto done;
        }
    }
    b->whole_first = true;
    rc = add_step(b, name, "pattern", enc->pattern, strlen(enc->pattern), false, err, errlen);
    if (rc)
        goto done;
    added_index(b);
    /* tiktoken's encodings have no BOS; their EOS is <|endoftext|>. */
    b->eos[0] = bpe_special_id(b, "<|endoftext|>", 13);
    b->neos = b->eos[0] >= 0;
done:
    free(tok);
    free(seen);
    return rc;
}

/* ---- tokenizer.json ------------------------------------------------------------------------- */

/* Hugging Face's (and GPT-2's) byte-level alphabet: printable Latin-1 bytes are written as
 * themselves, the other bytes in order as the code points from U+0100 on. byte_of_cp maps a code
 * point below ALPHABET_END back to its byte, -1 for none. */
#define ALPHABET_END 324

static void byte_alphabet(int byte_of_cp[ALPHABET_END])
{
    for (int i = 0; i < ALPHABET_END; i++)
        byte_of_cp[i] = -1;
    int next = 256;
    for (int c = 0; c < 256; c++) {
        bool printable = (c >= '!' && c <= '~') || (c >= 0xa1 && c <= 0xac) || (c >= 0xae);
        byte_of_cp[printable ? c : next++] = c;
    }
}

/* Decodes a byte-level vocab string into bytes (out holds at least n). Returns the length, or -1
 * when s holds a character outside the alphabet (an added token's text, say). */
static long byte_level_decode(const int *byte_of_cp, const char *s, size_t n, uint8_t *out)
{
    size_t o = 0;
    for (size_t i = 0; i < n;) {
        uint8_t c = (uint8_t)s[i];
        uint32_t cp;
        if (c < 0x80) {
            cp = c;
            i++;
        } else if ((c & 0xe0) == 0xc0 && i + 1 < n) {
            cp = (uint32_t)(c & 0x1f) << 6 | ((uint8_t)s[i + 1] & 0x3f);
            i += 2;
        } else {
            return -1; /* three-byte characters start at U+0800, far past the alphabet */
        }
        if (cp >= ALPHABET_END || byte_of_cp[cp] < 0)
            return -1;
        out[o++] = (uint8_t)byte_of_cp[cp];
    }
    return (long)o;
}

static const char *jstr(const json_t *o, const char *key)
{
    return json_string_value(json_object_get(o, key));
}

/* A flag that may be missing (false) or null (false). */
static bool jflag(const json_t *o, const char *key)
{
    return json_is_true(json_object_get(o, key));
}

static const char *type_of(const json_t *o)
{
    const char *t = jstr(o, "type");
    return t ? t : "(none)";
}

static int not_supported(char *err, size_t errlen, const char *name, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static int not_supported(char *err, size_t errlen, const char *name, const char *fmt, ...)
{
    int n = snprintf(err, errlen, "%s: ", name);
    if (n >= 0 && (size_t)n < errlen) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err + n, errlen - (size_t)n, fmt, ap);
        va_end(ap);
    }
    return SLUICE_ERR_INVALID;
}

static int byte_level_step(struct bpe *b, const char *name, const json_t *pt, bool alone, char *err,
                           size_t errlen)
{
    const json_t *use_regex = json_object_get(pt, "use_regex");
    bool prefix = jflag(pt, "add_prefix_space");
    if (prefix && !alone)
        return not_supported(err, errlen, name,
                             "ByteLevel with add_prefix_space after other pre-tokenizers is not "
                             "supported");
    b->prefix_space = prefix;
    if (!use_regex || json_is_null(use_regex) || json_is_true(use_regex))
        return add_step(b, name, "ByteLevel", PAT_GPT2, strlen(PAT_GPT2), false, err, errlen);
    return 0;
}

static int split_step(struct bpe *b, const char *name, const json_t *pt, char *err, size_t errlen)
{
    const char *behavior = jstr(pt, "behavior");
    if (!behavior || strcmp(behavior, "Isolated") != 0)
        return not_supported(
            err, errlen, name,
            "pre_tokenizer Split with behavior %s is not supported (Isolated only)",
            behavior ? behavior : "(none)");
    if (jflag(pt, "invert"))
        return not_supported(err, errlen, name, "pre_tokenizer Split with invert is not supported");
    const json_t *pat = json_object_get(pt, "pattern");
    const json_t *rx = json_object_get(pat, "Regex");
    const json_t *str = json_object_get(pat, "String");
    if (json_is_string(rx))
        return add_step(b, name, "Split regex", json_string_value(rx), json_string_length(rx),
                        false, err, errlen);
    if (json_is_string(str) && json_string_length(str) > 0)
        return add_step(b, name, "Split string", json_string_value(str), json_string_length(str),
                        true, err, errlen);
    return not_supported(
        err, errlen, name,
        "pre_tokenizer Split needs a pattern {\"Regex\": ...} or {\"String\": ...}");
}

static int pre_tokenizer(struct bpe *b, const char *name, const json_t *pt, char *err,
                         size_t errlen)
{
    const char *type = type_of(pt);
    if (json_is_object(pt) && strcmp(type, "ByteLevel") == 0)
        return byte_level_step(b, name, pt, true, err, errlen);
    if (!json_is_object(pt) || strcmp(type, "Sequence") != 0)
        return not_supported(err, errlen, name,
                             "pre_tokenizer %s is not byte-level (ByteLevel, or a Sequence of "
                             "Split steps ending in ByteLevel)",
                             json_is_object(pt) ? type : "null");
    const json_t *list = json_object_get(pt, "pretokenizers");
    size_t n = json_array_size(list);
    for (size_t i = 0; i < n; i++) {
        const json_t *step = json_array_get(list, i);
        const char *t = type_of(step);
        int rc;
        if (strcmp(t, "ByteLevel") == 0) {
            if (i + 1 != n)
                return not_supported(err, errlen, name,
                                     "pre_tokenizer ByteLevel must be the last of its Sequence");
            rc = byte_level_step(b, name, step, n == 1, err, errlen);
        } else if (strcmp(t, "Split") == 0) {
            rc = split_step(b, name, step, err, errlen);
        } else {
            return not_supported(err, errlen, name,
                                 "pre_tokenizer %s is not supported (Split and ByteLevel only)", t);
        }
        if (rc)
            return rc;
    }
    if (n == 0 || strcmp(type_of(json_array_get(list, n - 1)), "ByteLevel") != 0)
        return not_supported(err, errlen, name,
                             "pre_tokenizer Sequence does not end in ByteLevel: not byte-level");
    return 0;
}

/* The ids of a post-processor's special tokens around the text: bos before, eos after. */
static void post_processor(struct bpe *b, const json_t *pp)
{
    const char *type = type_of(pp);
    if (strcmp(type, "Sequence") == 0) {
        const json_t *list = json_object_get(pp, "processors");
        for (size_t i = 0; i < json_array_size(list); i++)
            post_processor(b, json_array_get(list, i));
        return;
    }
    if (strcmp(type, "RobertaProcessing") == 0 || strcmp(type, "BertProcessing") == 0) {
        const json_t *cls = json_array_get(json_object_get(pp, "cls"), 1);
        const json_t *sep = json_array_get(json_object_get(pp, "sep"), 1);
        if (json_is_integer(cls) && b->nbos == 0) {
            b->bos[0] = (int32_t)json_integer_value(cls);
            b->nbos = 1;
        }
        if (json_is_integer(sep) && b->neos == 0) {
            b->eos[0] = (int32_t)json_integer_value(sep);
            b->neos = 1;
        }
        return;
    }
    if (strcmp(type, "TemplateProcessing") != 0)
        return;
    const json_t *single = json_object_get(pp, "single");
    const json_t *specials = json_object_get(pp, "special_tokens");
    int32_t ids[2][MAX_EDGE_IDS];
    size_t n[2] = {0, 0};
    int side = 0;
    for (size_t i = 0; i < json_array_size(single); i++) {
        const json_t *item = json_array_get(single, i);
        if (json_object_get(item, "Sequence")) {
            side = 1;
            continue;
        }
        const char *tok = jstr(json_object_get(item, "SpecialToken"), "id");
        const json_t *list = json_object_get(json_object_get(specials, tok ? tok : ""), "ids");
        for (size_t k = 0; k < json_array_size(list); k++) {
            const json_t *id = json_array_get(list, k);
            if (!json_is_integer(id) || n[side] == MAX_EDGE_IDS)
                return; /* a template this module does not follow: no bos/eos from it */
            ids[side][n[side]++] = (int32_t)json_integer_value(id);
        }
    }
    if (n[0] && b->nbos == 0) {
        memcpy(b->bos, ids[0], n[0] * sizeof(int32_t));
        b->nbos = n[0];
    }
    if (n[1] && b->neos == 0) {
        memcpy(b->eos, ids[1], n[1] * sizeof(int32_t));
        b->neos = n[1];
    }
}

static bool valid_id(const json_t *v)
{
    return json_is_integer(v) && json_integer_value(v) >= 0 && json_integer_value(v) <= BPE_MAX_ID;
}

static int vocab_id(const json_t *vocab, const char *s, size_t n)
{
    const json_t *v = json_object_getn(vocab, s, n);
    return valid_id(v) ? (int)json_integer_value(v) : -1;
}

/* The merges, in either form, into the pair table. */
static int merges(struct bpe *b, const char *name, const json_t *vocab, const json_t *list,
                  char *err, size_t errlen)
{
    size_t n = json_array_size(list);
    int bits = 4;
    while (((size_t)1 << bits) < n * 2 + 2)
        bits++;
    b->pair_bits = bits;
    b->pairs = malloc(((size_t)1 << bits) * sizeof(*b->pairs));
    char *cat = NULL;
    size_t cat_cap = 0;
    if (!b->pairs)
        return err_set(err, errlen, SLUICE_ERR_NOMEM, "%s", sluice_strerror(SLUICE_ERR_NOMEM));
    for (size_t i = 0; i < ((size_t)1 << bits); i++)
        b->pairs[i].rank = RANK_NONE;
    int rc = 0;
    for (size_t i = 0; i < n; i++) {
        const json_t *m = json_array_get(list, i);
        const char *a, *c;
        size_t alen, clen;
        if (json_is_string(m)) {
            a = json_string_value(m);
            const char *space = memchr(a, ' ', json_string_length(m));
            if (!space || memchr(space + 1, ' ', json_string_length(m) - (size_t)(space + 1 - a))) {
                rc = not_supported(err, errlen, name, "merge %zu: expected \"A B\" or [A, B]", i);
                break;
            }
            alen = (size_t)(space - a);
            c = space + 1;
            clen = json_string_length(m) - alen - 1;
        } else if (json_array_size(m) == 2 && json_is_string(json_array_get(m, 0)) &&
                   json_is_string(json_array_get(m, 1))) {
            a = json_string_value(json_array_get(m, 0));
            alen = json_string_length(json_array_get(m, 0));
            c = json_string_value(json_array_get(m, 1));
            clen = json_string_length(json_array_get(m, 1));
        } else {
            rc = not_supported(err, errlen, name, "merge %zu: expected \"A B\" or [A, B]", i);
            break;
        }
        if (alen + clen > cat_cap) {
            cat_cap = (alen + clen) * 2 + 64;
            char *more = realloc(cat, cat_cap);
            if (!more) {
                rc =
                    err_set(err, errlen, SLUICE_ERR_NOMEM, "%s", sluice_strerror(SLUICE_ERR_NOMEM));
                break;
            }
            cat = more;
        }
        memcpy(cat, a, alen);
        memcpy(cat + alen, c, clen);
        int ia = vocab_id(vocab, a, alen), ic = vocab_id(vocab, c, clen);
        int im = vocab_id(vocab, cat, alen + clen);
        if (ia < 0 || ic < 0 || im < 0) {
            const char *which = ia < 0 ? a : ic < 0 ? c : cat;
            int wlen = (int)(ia < 0 ? alen : ic < 0 ? clen : alen + clen);
            rc = not_supported(err, errlen, name, "merge %zu: \"%.*s\" is not in the vocab", i,
                               wlen > 100 ? 100 : wlen, which);
            break;
        }
        /* As in Hugging Face's table, a pair merged twice keeps its last rank. */
        uint64_t key = pair_key(ia, ic);
        size_t s = pair_slot(key, bits);
        while (b->pairs[s].rank != RANK_NONE && b->pairs[s].key != key)
            s = (s + 1) & (((size_t)1 << bits) - 1);
        b->pairs[s] = (struct pair){key, (uint32_t)i, im};
    }
    free(cat);
    return rc;
}

static int added_tokens(struct bpe *b, const char *name, const json_t *list, char *err,
                        size_t errlen)
{
    for (size_t i = 0; i < json_array_size(list); i++) {
        const json_t *t = json_array_get(list, i);
        const json_t *content = json_object_get(t, "content");
        const json_t *id = json_object_get(t, "id");
        if (!json_is_string(content) || json_string_length(content) == 0 || !valid_id(id))
            return not_supported(err, errlen, name,
                                 "added token %zu: needs a non-empty content and an id from 0 "
                                 "to %d",
                                 i, BPE_MAX_ID);
        const char *text = json_string_value(content);
        size_t len = json_string_length(content);
        if (jflag(t, "single_word"))
            return not_supported(err, errlen, name,
                                 "added token \"%.*s\" has single_word, which is not supported",
                                 (int)(len > 100 ? 100 : len), text);
        int rc = added_push(b, jflag(t, "normalized") ? 1 : 0, text, len,
                            (int32_t)json_integer_value(id), jflag(t, "special"),
                            jflag(t, "lstrip"), jflag(t, "rstrip"));
        if (rc)
            return err_set(err, errlen, rc, "%s", sluice_strerror(rc));
    }
    return 0;
}

static int load_json(struct bpe *b, const char *name, const uint8_t *data, size_t len, char *err,
                     size_t errlen)
{
    snprintf(b->kind, sizeof b->kind, "tokenizer.json");
    json_error_t je;
    json_t *root = json_loadb((const char *)data, len, 0, &je);
    if (!root) {
        /* A rank file under another name says what it lacks. */
        const uint8_t *sp = memchr(data, ' ', len < 200 ? len : 200);
        bool ranks = len > 0 && b64_value(data[0]) >= 0 && sp && sp + 1 < data + len &&
                     sp[1] >= '0' && sp[1] <= '9';
        return err_set(err, errlen, SLUICE_ERR_INVALID, "%s: not JSON: line %d column %d: %s%s",
                       name, je.line, je.column, je.text,
                       ranks ? " (a tiktoken rank file must be named cl100k_base.tiktoken, "
                               "o200k_base.tiktoken, p50k_base.tiktoken or r50k_base.tiktoken)"
                             : "");
    }
    int rc = 0;
    const json_t *model = json_object_get(root, "model");
    const char *type = jstr(model, "type");
    if (!json_is_object(model)) {
        rc = not_supported(err, errlen, name, "no \"model\" object: not a tokenizer.json");
        goto done;
    }
    if (!type && json_object_get(model, "merges"))
        type = "BPE"; /* older files leave the type out */
    if (!type || strcmp(type, "BPE") != 0) {
        rc =
            not_supported(err, errlen, name, "model type %s is not supported (byte-level BPE only)",
                          type ? type : "(none)");
        goto done;
    }
    const json_t *dropout = json_object_get(model, "dropout");
    const char *prefix = jstr(model, "continuing_subword_prefix");
    const char *suffix = jstr(model, "end_of_word_suffix");
    if (jflag(model, "byte_fallback") || (prefix && *prefix) || (suffix && *suffix) ||
        (json_is_number(dropout) && json_number_value(dropout) != 0.0)) {
        rc = not_supported(err, errlen, name,
                           "BPE with byte_fallback, a continuing_subword_prefix, an "
                           "end_of_word_suffix or dropout is not byte-level BPE");
        goto done;
    }
    const json_t *norm = json_object_get(root, "normalizer");
    if (norm && !json_is_null(norm) &&
        !(strcmp(type_of(norm), "Sequence") == 0 &&
          json_array_size(json_object_get(norm, "normalizers")) == 0)) {
        rc = not_supported(err, errlen, name, "normalizer %s is not supported", type_of(norm));
        goto done;
    }
    const json_t *vocab = json_object_get(model, "vocab");
    const json_t *list = json_object_get(model, "merges");
    if (!json_is_object(vocab) || !json_is_array(list)) {
        rc = not_supported(err, errlen, name,
                           "BPE model needs a \"vocab\" object and a "
                           "\"merges\" array");
        goto done;
    }
    if ((rc = pre_tokenizer(b, name, json_object_get(root, "pre_tokenizer"), err, errlen)) != 0)
        goto done;
    int byte_of_cp[ALPHABET_END];
    byte_alphabet(byte_of_cp);
    if ((rc = bytemap_init(&b->map, json_object_size(vocab))) != 0) {
        rc = err_set(err, errlen, rc, "%s", sluice_strerror(rc));
        goto done;
    }
    const char *key;
    size_t klen;
    json_t *value;
    uint8_t *buf = NULL;
    size_t buf_cap = 0;
    json_object_keylen_foreach((json_t *)vocab, key, klen, value)
    {
        if (klen > buf_cap) {
            buf_cap = klen * 2;
            uint8_t *more = realloc(buf, buf_cap);
            if (!more) {
                free(buf);
                rc = nomem(err, errlen);
                goto done;
            }
            buf = more;
        }
        if (!valid_id(value)) {
            free(buf);
            rc = not_supported(err, errlen, name, "vocab entry \"%.*s\": id is not from 0 to %d",
                               (int)(klen > 100 ? 100 : klen), key, BPE_MAX_ID);
            goto done;
        }
        /* Tokens written outside the byte alphabet (added ones) are never reached by merging
         * bytes; only the others go into the map. */
        long n = byte_level_decode(byte_of_cp, key, klen, buf);
        int32_t old;
        if (n > 0 && bytemap_put(&b->map, buf, (size_t)n, (int32_t)json_integer_value(value),
                                 &old) == SLUICE_ERR_NOMEM) {
            free(buf);
            rc = nomem(err, errlen);
            goto done;
        }
    }
    free(buf);
    if ((rc = byte_ids(b, name, "the vocab", err, errlen)) != 0)
        goto done;
    if ((rc = merges(b, name, vocab, list, err, errlen)) != 0)
        goto done;
    b->whole_first = jflag(model, "ignore_merges");
    if ((rc = added_tokens(b, name, json_object_get(root, "added_tokens"), err, errlen)) != 0)
        goto done;
    added_index(b);
    post_processor(b, json_object_get(root, "post_processor"));
    if (b->nbos == 0)
        edge_fallback(b, bos_names, sizeof bos_names / sizeof bos_names[0], b->bos, &b->nbos);
    if (b->neos == 0)
        edge_fallback(b, eos_names, sizeof eos_names / sizeof eos_names[0], b->eos, &b->neos);
done:
    json_decref(root);
    return rc;
}

int bpe_load(const char *name, const uint8_t *data, size_t len, struct bpe **out, char *err,
             size_t errlen)
{
    *out = NULL;
    if (len > BPE_MAX_FILE_BYTES)
        return err_set(err, errlen, SLUICE_ERR_TOO_LARGE, "%s: over %zu bytes", name,
                       BPE_MAX_FILE_BYTES);
    const char *base = base_name(name);
    size_t blen = strlen(base);
    const struct encoding *enc = NULL;
    bool rank_file = blen > 9 && strcmp(base + blen - 9, ".tiktoken") == 0;
    if (rank_file) {
        for (size_t i = 0; i < sizeof encodings / sizeof encodings[0]; i++)
            if (blen == strlen(encodings[i].name) + 9 &&
                strncmp(base, encodings[i].name, blen - 9) == 0)
                enc = &encodings[i];
        if (!enc)
            return err_set(err, errlen, SLUICE_ERR_INVALID,
                           "%s: a rank file needs a known encoding name to take its pattern and "
                           "special tokens from: cl100k_base.tiktoken, o200k_base.tiktoken, "
                           "p50k_base.tiktoken or r50k_base.tiktoken",
                           name);
    }
    struct bpe *b = bpe_alloc();
    if (!b)
        return err_set(err, errlen, SLUICE_ERR_NOMEM, "%s", sluice_strerror(SLUICE_ERR_NOMEM));
    int rc = enc ? load_ranks(b, name, enc, data, len, err, errlen)
                 : load_json(b, name, data, len, err, errlen);
    if (rc) {
        bpe_free(b);
        return rc;
    }
    *out = b;
    return 0;
}

/* ---- Encoding ------------------------------------------------------------------------------ */

/* A merge candidate of the heap: the parts [pos, mid) and [mid, end), and the merged id. */
struct cand {
    uint32_t rank, pos, mid, end;
    int32_t id;
};

struct bpe_state {
    const struct bpe *b;
    pcre2_match_data *md[MAX_STEPS];
    pcre2_match_context *mctx;
    pcre2_jit_stack *jit;
    /* Merge scratch for pieces of up to cap bytes. */
    size_t cap;
    uint32_t *start, *rank, *next, *prev;
    int32_t *id, *merged;
    struct cand *heap;
    size_t heap_cap;
    /* A stretch with ByteLevel's prefix space in front. */
    uint8_t *pbuf;
    size_t pbuf_cap;
};

int bpe_state_new(const struct bpe *b, struct bpe_state **out)
{
    struct bpe_state *st = calloc(1, sizeof(*st));
    if (!st)
        return SLUICE_ERR_NOMEM;
    st->b = b;
    st->mctx = pcre2_match_context_create(NULL);
    /* The default 32 KiB JIT stack is too small for long runs of whitespace under (?!\S). */
    st->jit = pcre2_jit_stack_create(32 * 1024, 64 * 1024 * 1024, NULL);
    bool ok = st->mctx && st->jit;
    for (int i = 0; ok && i < b->nrx; i++)
        ok = (st->md[i] = pcre2_match_data_create_from_pattern(b->rx[i], NULL)) != NULL;
    if (!ok) {
        bpe_state_free(st);
        return SLUICE_ERR_NOMEM;
    }
    pcre2_jit_stack_assign(st->mctx, NULL, st->jit);
    *out = st;
    return 0;
}

void bpe_state_free(struct bpe_state *st)
{
    if (!st)
        return;
    for (int i = 0; i < MAX_STEPS; i++)
        pcre2_match_data_free(st->md[i]);
    pcre2_match_context_free(st->mctx);
    pcre2_jit_stack_free(st->jit);
    free(st->start);
    free(st->rank);
    free(st->next);
    free(st->prev);
    free(st->id);
    free(st->merged);
    free(st->heap);
    free(st->pbuf);
    free(st);
}

static int ids_reserve(struct bpe_ids *out, size_t more)
{
    if (out->cap - out->n >= more)
        return 0;
    size_t cap = out->cap ? out->cap : 256;
    while (cap - out->n < more)
        cap *= 2;
    int32_t *v = realloc(out->v, cap * sizeof(*v));
    if (!v)
        return SLUICE_ERR_NOMEM;
    out->v = v;
    out->cap = cap;
    return 0;
}

int bpe_ids_append(struct bpe_ids *out, const int32_t *ids, size_t n)
{
    if (n == 0)
        return 0;
    if (ids_reserve(out, n))
        return SLUICE_ERR_NOMEM;
    memcpy(out->v + out->n, ids, n * sizeof(*ids));
    out->n += n;
    return 0;
}

static int scratch_reserve(struct bpe_state *st, size_t n)
{
    if (n <= st->cap)
        return 0;
    size_t cap = st->cap ? st->cap : 64;
    while (cap < n)
        cap *= 2;
    void *p[6] = {realloc(st->start, (cap + 1) * 4), NULL, NULL, NULL, NULL, NULL};
    if (p[0])
        st->start = p[0];
    if ((p[1] = realloc(st->rank, cap * 4)))
        st->rank = p[1];
    if ((p[2] = realloc(st->next, (cap + 1) * 4)))
        st->next = p[2];
    if ((p[3] = realloc(st->prev, (cap + 1) * 4)))
        st->prev = p[3];
    if ((p[4] = realloc(st->id, cap * 4)))
        st->id = p[4];
    if ((p[5] = realloc(st->merged, cap * 4)))
        st->merged = p[5];
    for (int i = 0; i < 6; i++)
        if (!p[i])
            return SLUICE_ERR_NOMEM;
    st->cap = cap;
    return 0;
}

/* The rank of merging the parts [s0, s1) and [s1, s2) of piece p, whose ids are a and c, and
 * the merged token's id in *m; RANK_NONE when they do not merge. A rank file ranks the
 * concatenation; a tokenizer.json ranks the pair. */
static inline uint32_t pair_rank(const struct bpe *b, const uint8_t *p, uint32_t s0, uint32_t s2,
                                 int32_t a, int32_t c, int32_t *m)
{
    if (!b->pairs) {
        int32_t r = bytemap_get(&b->map, p + s0, s2 - s0);
        *m = r;
        return r < 0 ? RANK_NONE : (uint32_t)r;
    }
    uint64_t key = pair_key(a, c);
    size_t mask = ((size_t)1 << b->pair_bits) - 1;
    for (size_t s = pair_slot(key, b->pair_bits);; s = (s + 1) & mask) {
        const struct pair *e = &b->pairs[s];
        if (e->rank == RANK_NONE)
            return RANK_NONE;
        if (e->key == key) {
            *m = e->id;
            return e->rank;
        }
    }
}

/* Short pieces: the parts in arrays, the lowest-ranked pair found by a scan after each merge
 * (what tiktoken does). Writes the ids to out and returns how many. */
static size_t merge_small(const struct bpe *b, struct bpe_state *st, const uint8_t *p, uint32_t n,
                          int32_t *out)
{
    uint32_t *start = st->start, *rank = st->rank;
    int32_t *id = st->id, *merged = st->merged;
    for (uint32_t i = 0; i < n; i++) {
        start[i] = i;
        id[i] = b->byte_id[p[i]];
    }
    start[n] = n;
    for (uint32_t i = 0; i + 1 < n; i++)
        rank[i] = pair_rank(b, p, start[i], start[i + 2], id[i], id[i + 1], &merged[i]);
    uint32_t m = n;
    for (;;) {
        uint32_t best = RANK_NONE, at = 0;
        for (uint32_t i = 0; i + 1 < m; i++)
            if (rank[i] < best) {
                best = rank[i];
                at = i;
            }
        if (best == RANK_NONE)
            break;
        id[at] = merged[at];
        /* Part at + 1 is gone; pair at + 1 with it. */
        uint32_t after = m - at - 2; /* parts after at + 1 */
        memmove(&start[at + 1], &start[at + 2], (after + 1) * sizeof(*start));
        memmove(&id[at + 1], &id[at + 2], after * sizeof(*id));
        if (after > 1) {
            memmove(&rank[at + 1], &rank[at + 2], (after - 1) * sizeof(*rank));
            memmove(&merged[at + 1], &merged[at + 2], (after - 1) * sizeof(*merged));
        }
        m--;
        if (at > 0)
            rank[at - 1] =
                pair_rank(b, p, start[at - 1], start[at + 1], id[at - 1], id[at], &merged[at - 1]);
        if (at + 1 < m)
            rank[at] = pair_rank(b, p, start[at], start[at + 2], id[at], id[at + 1], &merged[at]);
    }
    memcpy(out, id, m * sizeof(*id));
    return m;
}

static inline bool cand_less(const struct cand *x, const struct cand *y)
{
    return x->rank < y->rank || (x->rank == y->rank && x->pos < y->pos);
}

static int heap_push(struct bpe_state *st, size_t *n, struct cand c)
{
    if (*n == st->heap_cap) {
        size_t cap = st->heap_cap ? st->heap_cap * 2 : 256;
        struct cand *h = realloc(st->heap, cap * sizeof(*h));
        if (!h)
            return SLUICE_ERR_NOMEM;
        st->heap = h;
        st->heap_cap = cap;
    }
    struct cand *h = st->heap;
    size_t i = (*n)++;
    while (i > 0 && cand_less(&c, &h[(i - 1) / 2])) {
        h[i] = h[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    h[i] = c;
    return 0;
}

static struct cand heap_pop(struct bpe_state *st, size_t *n)
{
    struct cand *h = st->heap;
    struct cand top = h[0], last = h[--(*n)];
    size_t i = 0;
    for (;;) {
        size_t k = 2 * i + 1;
        if (k >= *n)
            break;
        if (k + 1 < *n && cand_less(&h[k + 1], &h[k]))
            k++;
        if (!cand_less(&h[k], &last))
            break;
        h[i] = h[k];
        i = k;
    }
    if (*n > 0)
        h[i] = last;
    return top;
}

static int push_pair(const struct bpe *b, struct bpe_state *st, const uint8_t *p, size_t *n,
                     uint32_t s0, uint32_t s1, uint32_t s2)
{
    int32_t m;
    uint32_t r = pair_rank(b, p, s0, s2, st->id[s0], st->id[s1], &m);
    return r == RANK_NONE ? 0 : heap_push(st, n, (struct cand){r, s0, s1, s2, m});
}

/* Long pieces: parts linked by their starts, candidates in a heap ordered by rank, then
 * position, so the same merges happen in the same order as merge_small's, in O(n log n).
 * A candidate whose parts have changed since it was pushed is skipped. */
static int merge_long(const struct bpe *b, struct bpe_state *st, const uint8_t *p, uint32_t n,
                      int32_t *out, size_t *nout)
{
    uint32_t *next = st->next, *prev = st->prev; /* next[s]: the end of the part at s, 0 if none */
    for (uint32_t i = 0; i < n; i++) {
        next[i] = i + 1;
        prev[i] = i ? i - 1 : 0;
        st->id[i] = b->byte_id[p[i]];
    }
    size_t nh = 0;
    for (uint32_t i = 0; i + 1 < n; i++)
        if (push_pair(b, st, p, &nh, i, i + 1, i + 2))
            return SLUICE_ERR_NOMEM;
    while (nh > 0) {
        struct cand c = heap_pop(st, &nh);
        if (next[c.pos] != c.mid || next[c.mid] != c.end)
            continue;
        next[c.pos] = c.end;
        next[c.mid] = 0;
        st->id[c.pos] = c.id;
        if (c.end < n)
            prev[c.end] = c.pos;
        if (c.pos > 0 && push_pair(b, st, p, &nh, prev[c.pos], c.pos, c.end))
            return SLUICE_ERR_NOMEM;
        if (c.end < n && push_pair(b, st, p, &nh, c.pos, c.end, next[c.end]))
            return SLUICE_ERR_NOMEM;
    }
    size_t k = 0;
    for (uint32_t i = 0; i < n; i = next[i])
        out[k++] = st->id[i];
    *nout = k;
    return 0;
}

/* One piece of pre-tokenized text into ids. */
static int encode_piece(const struct bpe *b, struct bpe_state *st, const uint8_t *p, size_t n,
                        struct bpe_ids *out, char *err, size_t errlen)
{
    if (n == 0)
        return 0;
    if (ids_reserve(out, n))
        return nomem(err, errlen);
    if (n == 1) {
        out->v[out->n++] = b->byte_id[p[0]];
        return 0;
    }
    if (b->whole_first) {
        int32_t id = bytemap_get(&b->map, p, n);
        if (id >= 0) {
            out->v[out->n++] = id;
            return 0;
        }
    }
    if (n >= UINT32_MAX / 2)
        return err_set(err, errlen, SLUICE_ERR_TOO_LARGE, "a piece of %zu bytes is too long", n);
    if (scratch_reserve(st, n))
        return nomem(err, errlen);
    if (n <= SMALL_PIECE) {
        out->n += merge_small(b, st, p, (uint32_t)n, out->v + out->n);
        return 0;
    }
    size_t k = 0;
    if (merge_long(b, st, p, (uint32_t)n, out->v + out->n, &k))
        return nomem(err, errlen);
    out->n += k;
    return 0;
}

/* Pre-tokenization step k over s[0, len): each match, and each stretch between matches, is a
 * piece of its own, handed to step k + 1 (or merged, after the last step). */
static int split_step_run(const struct bpe *b, struct bpe_state *st, int k, const uint8_t *s,
                          size_t len, struct bpe_ids *out, char *err, size_t errlen)
{
    if (k == b->nrx)
        return encode_piece(b, st, s, len, out, err, errlen);
    size_t off = 0, prev = 0;
    int rc;
    while (off < len) {
        int m = pcre2_match(b->rx[k], s, len, off, 0, st->md[k], st->mctx);
        if (m == PCRE2_ERROR_NOMATCH)
            break;
        if (m < 0) {
            PCRE2_UCHAR msg[256];
            pcre2_get_error_message(m, msg, sizeof msg);
            return err_set(err, errlen, SLUICE_ERR_INVALID, "pre-tokenization regex: %s",
                           (const char *)msg);
        }
        const PCRE2_SIZE *ov = pcre2_get_ovector_pointer(st->md[k]);
        size_t ms = ov[0], me = ov[1];
        if (me <= ms) {
            /* An empty match yields no piece; the search goes on from the next character. */
            off = ms + 1;
            while (off < len && (s[off] & 0xc0) == 0x80)
                off++;
            continue;
        }
        if (ms > prev && (rc = split_step_run(b, st, k + 1, s + prev, ms - prev, out, err, errlen)))
            return rc;
        if ((rc = split_step_run(b, st, k + 1, s + ms, me - ms, out, err, errlen)))
            return rc;
        prev = off = me;
    }
    if (prev < len)
        return split_step_run(b, st, k + 1, s + prev, len - prev, out, err, errlen);
    return 0;
}

/* A stretch of text between added tokens. */
static int encode_stretch(const struct bpe *b, struct bpe_state *st, const uint8_t *s, size_t len,
                          struct bpe_ids *out, char *err, size_t errlen)
{
    if (len == 0)
        return 0;
    if (b->prefix_space && s[0] != ' ') {
        if (len + 1 > st->pbuf_cap) {
            size_t cap = (len + 1) * 2;
            uint8_t *buf = realloc(st->pbuf, cap);
            if (!buf)
                return nomem(err, errlen);
            st->pbuf = buf;
            st->pbuf_cap = cap;
        }
        st->pbuf[0] = ' ';
        memcpy(st->pbuf + 1, s, len);
        return split_step_run(b, st, 0, st->pbuf, len + 1, out, err, errlen);
    }
    return split_step_run(b, st, 0, s, len, out, err, errlen);
}

/* The length of the UTF-8 character at s[0, n) and its code point; an invalid byte is one
 * character of its own with code point 0xfffd. */
static size_t utf8_next(const uint8_t *s, size_t n, uint32_t *cp)
{
    uint8_t c = s[0];
    size_t len = c < 0x80             ? 1
                 : (c & 0xe0) == 0xc0 ? 2
                 : (c & 0xf0) == 0xe0 ? 3
                 : (c & 0xf8) == 0xf0 ? 4
                                      : 0;
    if (len == 0 || len > n) {
        *cp = 0xfffd;
        return 1;
    }
    uint32_t v = len == 1 ? c : c & (0x7f >> len);
    for (size_t i = 1; i < len; i++) {
        if ((s[i] & 0xc0) != 0x80) {
            *cp = 0xfffd;
            return 1;
        }
        v = v << 6 | (s[i] & 0x3f);
    }
    *cp = v;
    return len;
}

/* Unicode White_Space, as Rust's char::is_whitespace (Hugging Face's lstrip and rstrip). */
static bool white_space(uint32_t c)
{
    return (c >= 0x09 && c <= 0x0d) || c == 0x20 || c == 0x85 || c == 0xa0 || c == 0x1680 ||
           (c >= 0x2000 && c <= 0x200a) || c == 0x2028 || c == 0x2029 || c == 0x202f ||
           c == 0x205f || c == 0x3000;
}

/* The leftmost, then longest, token of set matching in s[from, len); false when none does. */
static bool find_added(const struct bpe *b, const struct added_set *set, bool special,
                       const uint8_t *s, size_t from, size_t len, size_t *at,
                       const struct added **which)
{
    const bool *mark = special ? set->mark_all : set->mark_plain;
    for (size_t i = from; i < len; i++) {
        uint8_t c = s[i];
        if (!mark[c])
            continue;
        for (uint32_t j = set->first[c]; j < set->first[c + 1]; j++) {
            const struct added *a = &set->tok[j];
            if ((special || !a->special) && a->len <= len - i &&
                memcmp(b->added_blob + a->off, s + i, a->len) == 0) {
                *at = i;
                *which = a;
                return true;
            }
        }
    }
    return false;
}

/* Cuts s[0, len) at the added tokens of set k (0, then 1), as Hugging Face does: a token with
 * lstrip or rstrip also takes the white space before or after it. */
static int encode_added(const struct bpe *b, struct bpe_state *st, int k, bool special,
                        const uint8_t *s, size_t len, struct bpe_ids *out, char *err, size_t errlen)
{
    if (k == 2)
        return encode_stretch(b, st, s, len, out, err, errlen);
    const struct added_set *set = &b->added[k];
    if (set->n == 0 || (!special && set->nplain == 0))
        return encode_added(b, st, k + 1, special, s, len, out, err, errlen);
    size_t pos = 0, at;
    const struct added *a;
    int rc;
    while (pos < len && find_added(b, set, special, s, pos, len, &at, &a)) {
        size_t start = at, stop = at + a->len;
        if (a->lstrip) {
            /* Back over white space, to the previous token's end at most: the run of white
             * space that ends where the token begins. */
            size_t run = pos;
            for (size_t i = pos; i < start;) {
                uint32_t cp;
                size_t l = utf8_next(s + i, start - i, &cp);
                i += l;
                if (!white_space(cp))
                    run = i;
            }
            start = run;
        }
        if (a->rstrip) {
            uint32_t cp;
            size_t l;
            while (stop < len && (l = utf8_next(s + stop, len - stop, &cp)) && white_space(cp))
                stop += l;
        }
        if (start > pos &&
            (rc = encode_added(b, st, k + 1, special, s + pos, start - pos, out, err, errlen)))
            return rc;
        if (ids_reserve(out, 1))
            return nomem(err, errlen);
        out->v[out->n++] = a->id;
        pos = stop;
    }
    if (pos < len)
        return encode_added(b, st, k + 1, special, s + pos, len - pos, out, err, errlen);
    return 0;
}

int bpe_encode(const struct bpe *b, struct bpe_state *st, const uint8_t *text, size_t len,
               unsigned flags, struct bpe_ids *out, char *err, size_t errlen)
{
    if (len == 0)
        return 0;
    /* About what a text needs (four bytes a token is typical), so a stream of like texts rarely
     * grows out; pieces reserve what they need beyond it. */
    if (ids_reserve(out, len / 4 + 16))
        return nomem(err, errlen);
    return encode_added(b, st, 0, (flags & BPE_ALLOW_SPECIAL) != 0, text, len, out, err, errlen);
}
