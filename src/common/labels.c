#include "labels.h"

#include "error.h"
#include "names.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static bool is_space(char c)
{
    return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
}

/* A byte the selector syntax gives a meaning: never part of a key or a value. */
static bool is_special(char c)
{
    return c == '=' || c == '!' || c == ',' || c == '(' || c == ')' || is_space(c);
}

/* Checks one key or value of len bytes at p (copied to be NUL-terminated for name_check). */
static int token_check(const char *field, const char *p, size_t len, size_t max, char *err,
                       size_t errlen)
{
    for (size_t i = 0; i < len; i++)
        if (is_special(p[i]))
            return err_set(err, errlen, SLUICE_ERR_INVALID, "%s: '%c' is not allowed at byte %zu",
                           field, is_space(p[i]) ? ' ' : p[i], i);
    if (len <= SELECTOR_TEXT_MAX) {
        char tmp[SELECTOR_TEXT_MAX + 1];
        memcpy(tmp, p, len);
        tmp[len] = '\0';
        return name_check(field, tmp, max, err, errlen);
    }
    if (len > max)
        return err_set(err, errlen, SLUICE_ERR_INVALID,
                       "%s: %zu bytes, longer than the limit of %d", field, len, (int)max);
    return 0;
}

int label_check(const char *kv, char *err, size_t errlen)
{
    const char *eq = strchr(kv, '=');
    if (!eq)
        return err_set(err, errlen, SLUICE_ERR_INVALID, "expected KEY=VALUE");
    if (eq == kv)
        return err_set(err, errlen, SLUICE_ERR_INVALID, "empty key");
    int rc = token_check("key", kv, (size_t)(eq - kv), LABEL_KEY_MAX, err, errlen);
    if (rc < 0)
        return rc;
    return token_check("value", eq + 1, strlen(eq + 1), LABEL_VALUE_MAX, err, errlen);
}

static int cmp_label_keys(const void *a, const void *b)
{
    const char *x = *(const char *const *)a, *y = *(const char *const *)b;
    size_t nx = strcspn(x, "="), ny = strcspn(y, "=");
    int c = memcmp(x, y, nx < ny ? nx : ny);
    if (c)
        return c;
    return nx < ny ? -1 : nx > ny;
}

int labels_canonical(const char *const *labels, size_t n, char *out, size_t outlen, char *err,
                     size_t errlen)
{
    if (n > LABELS_MAX)
        return err_set(err, errlen, SLUICE_ERR_INVALID, "more than %d labels", LABELS_MAX);
    const char *sorted[LABELS_MAX];
    for (size_t i = 0; i < n; i++) {
        char why[256];
        if (label_check(labels[i], why, sizeof why) < 0)
            return err_set(err, errlen, SLUICE_ERR_INVALID, "label %zu: %s", i + 1, why);
        sorted[i] = labels[i];
    }
    qsort(sorted, n, sizeof *sorted, cmp_label_keys);
    size_t len = 0;
    for (size_t i = 0; i < n; i++) {
        if (i > 0 && cmp_label_keys(&sorted[i - 1], &sorted[i]) == 0)
            return err_set(err, errlen, SLUICE_ERR_INVALID, "label key %.*s given twice",
                           (int)strcspn(sorted[i], "="), sorted[i]);
        size_t k = strlen(sorted[i]);
        if (len + (i > 0) + k + 1 > outlen)
            return err_set(err, errlen, SLUICE_ERR_INVALID, "labels: longer than the buffer");
        if (i > 0)
            out[len++] = ',';
        memcpy(out + len, sorted[i], k);
        len += k;
    }
    if (outlen == 0)
        return err_set(err, errlen, SLUICE_ERR_INVALID, "labels: longer than the buffer");
    out[len] = '\0';
    return 0;
}

bool labels_get(const char *canon, const char *key, const char **value, size_t *value_len)
{
    size_t klen = strlen(key);
    const char *p = canon;
    while (p && *p) {
        size_t item = strcspn(p, ",");
        size_t k = strcspn(p, "=,");
        if (k == klen && memcmp(p, key, klen) == 0) {
            if (value) {
                *value = k < item ? p + k + 1 : p + k;
                *value_len = k < item ? item - k - 1 : 0;
            }
            return true;
        }
        p = p[item] ? p + item + 1 : NULL;
    }
    return false;
}

size_t labels_count(const char *canon)
{
    if (!canon || !*canon)
        return 0;
    size_t n = 1;
    for (const char *p = canon; *p; p++)
        n += *p == ',';
    return n;
}

/* ---- selectors ---- */

struct sel_parser {
    const char *text;
    size_t pos;
    struct selector *out;
    size_t used; /* bytes of out->buf taken */
    char *err;
    size_t errlen;
};

static void skip_space(struct sel_parser *p)
{
    while (is_space(p->text[p->pos]))
        p->pos++;
}

/* Reads a key or value at the position into out->buf; *off receives its offset. An empty token
 * is allowed here (callers decide). */
static int read_token(struct sel_parser *p, const char *field, size_t max, uint16_t *off)
{
    size_t start = p->pos;
    while (p->text[p->pos] && !is_special(p->text[p->pos]))
        p->pos++;
    size_t len = p->pos - start;
    char why[256];
    if (token_check(field, p->text + start, len, max, why, sizeof why) < 0)
        return err_set(p->err, p->errlen, SLUICE_ERR_INVALID, "%s at byte %zu%s", field, start,
                       why + strlen(field));
    /* The text is at most SELECTOR_TEXT_MAX bytes, and every token takes its bytes and a NUL
     * from a buffer one byte longer: tokens are separated by at least one byte. */
    *off = (uint16_t)p->used;
    memcpy(p->out->buf + p->used, p->text + start, len);
    p->out->buf[p->used + len] = '\0';
    p->used += len + 1;
    return 0;
}

static int read_set(struct sel_parser *p, struct selector_req *r)
{
    skip_space(p);
    if (p->text[p->pos] != '(')
        return err_set(p->err, p->errlen, SLUICE_ERR_INVALID, "expected '(' at byte %zu", p->pos);
    p->pos++;
    for (;;) {
        skip_space(p);
        size_t at = p->pos;
        if (r->nvalues == LABEL_SET_MAX)
            return err_set(p->err, p->errlen, SLUICE_ERR_INVALID, "more than %d values at byte %zu",
                           LABEL_SET_MAX, at);
        int rc = read_token(p, "value", LABEL_VALUE_MAX, &r->values[r->nvalues]);
        if (rc < 0)
            return rc;
        if (p->pos == at)
            return err_set(p->err, p->errlen, SLUICE_ERR_INVALID, "expected a value at byte %zu",
                           at);
        r->nvalues++;
        skip_space(p);
        char c = p->text[p->pos];
        if (c == ')') {
            p->pos++;
            return 0;
        }
        if (c != ',')
            return err_set(p->err, p->errlen, SLUICE_ERR_INVALID, "expected ',' or ')' at byte %zu",
                           p->pos);
        p->pos++;
    }
}

static int read_requirement(struct sel_parser *p, struct selector_req *r)
{
    skip_space(p);
    char c = p->text[p->pos];
    if (c == ',' || c == '\0')
        return err_set(p->err, p->errlen, SLUICE_ERR_INVALID, "empty requirement at byte %zu",
                       p->pos);
    bool negated = c == '!';
    if (negated) {
        p->pos++;
        skip_space(p);
    }
    size_t at = p->pos;
    int rc = read_token(p, "key", LABEL_KEY_MAX, &r->key);
    if (rc < 0)
        return rc;
    if (p->pos == at)
        return err_set(p->err, p->errlen, SLUICE_ERR_INVALID, "expected a label key at byte %zu",
                       at);
    skip_space(p);
    c = p->text[p->pos];
    if (negated || c == ',' || c == '\0') {
        r->op = negated ? SELECTOR_NOT_EXISTS : SELECTOR_EXISTS;
        return 0;
    }
    if (c == '=' || (c == '!' && p->text[p->pos + 1] == '=')) {
        r->op = c == '=' ? SELECTOR_EQ : SELECTOR_NE;
        p->pos += c == '=' && p->text[p->pos + 1] == '=' ? 2 : c == '!' ? 2 : 1;
        skip_space(p);
        r->nvalues = 1;
        return read_token(p, "value", LABEL_VALUE_MAX, &r->values[0]);
    }
    const char *w = p->text + p->pos;
    if (strncmp(w, "in", 2) == 0 && (is_space(w[2]) || w[2] == '(')) {
        r->op = SELECTOR_IN;
        p->pos += 2;
        return read_set(p, r);
    }
    if (strncmp(w, "notin", 5) == 0 && (is_space(w[5]) || w[5] == '(')) {
        r->op = SELECTOR_NOTIN;
        p->pos += 5;
        return read_set(p, r);
    }
    return err_set(p->err, p->errlen, SLUICE_ERR_INVALID,
                   "expected '=', '!=', 'in' or 'notin' at byte %zu", p->pos);
}

int selector_parse(const char *text, struct selector *out, char *err, size_t errlen)
{
    memset(out, 0, sizeof *out);
    size_t len = strlen(text);
    if (len > SELECTOR_TEXT_MAX)
        return err_set(err, errlen, SLUICE_ERR_INVALID, "longer than the limit of %d bytes",
                       SELECTOR_TEXT_MAX);
    struct sel_parser p = {.text = text, .out = out, .err = err, .errlen = errlen};
    skip_space(&p);
    if (text[p.pos] == '\0')
        return 0;
    for (;;) {
        if (out->n == SELECTOR_REQS_MAX) {
            memset(out, 0, sizeof *out);
            return err_set(err, errlen, SLUICE_ERR_INVALID, "more than %d requirements",
                           SELECTOR_REQS_MAX);
        }
        int rc = read_requirement(&p, &out->req[out->n]);
        if (rc < 0) {
            memset(out, 0, sizeof *out);
            return rc;
        }
        out->n++;
        skip_space(&p);
        if (text[p.pos] == '\0')
            break;
        if (text[p.pos] != ',') {
            size_t at = p.pos;
            memset(out, 0, sizeof *out);
            return err_set(err, errlen, SLUICE_ERR_INVALID, "expected ',' at byte %zu", at);
        }
        p.pos++;
    }
    if (selector_format(out, NULL, 0) > SELECTOR_TEXT_MAX) {
        memset(out, 0, sizeof *out);
        return err_set(err, errlen, SLUICE_ERR_INVALID, "longer than the limit of %d bytes",
                       SELECTOR_TEXT_MAX);
    }
    return 0;
}

static bool value_in(const struct selector *sel, const struct selector_req *r, const char *v,
                     size_t vlen)
{
    for (size_t i = 0; i < r->nvalues; i++) {
        const char *x = sel->buf + r->values[i];
        if (strlen(x) == vlen && memcmp(x, v, vlen) == 0)
            return true;
    }
    return false;
}

bool selector_matches(const struct selector *sel, const char *canon)
{
    for (size_t i = 0; i < sel->n; i++) {
        const struct selector_req *r = &sel->req[i];
        const char *v = NULL;
        size_t vlen = 0;
        bool has = labels_get(canon ? canon : "", sel->buf + r->key, &v, &vlen);
        bool ok;
        switch (r->op) {
        case SELECTOR_EQ:
        case SELECTOR_IN:
            ok = has && value_in(sel, r, v, vlen);
            break;
        case SELECTOR_NE:
        case SELECTOR_NOTIN:
            ok = !has || !value_in(sel, r, v, vlen);
            break;
        case SELECTOR_EXISTS:
            ok = has;
            break;
        default:
            ok = !has;
            break;
        }
        if (!ok)
            return false;
    }
    return true;
}

/* Appends s to out at *len (counting what does not fit). */
static void put(char *out, size_t outlen, size_t *len, const char *s)
{
    size_t n = strlen(s);
    if (*len < outlen) {
        size_t room = outlen - *len - 1;
        memcpy(out + *len, s, n < room ? n : room);
        out[*len + (n < room ? n : room)] = '\0';
    }
    *len += n;
}

size_t selector_format(const struct selector *sel, char *out, size_t outlen)
{
    size_t len = 0;
    if (outlen)
        out[0] = '\0';
    for (size_t i = 0; i < sel->n; i++) {
        const struct selector_req *r = &sel->req[i];
        if (i > 0)
            put(out, outlen, &len, ",");
        if (r->op == SELECTOR_NOT_EXISTS)
            put(out, outlen, &len, "!");
        put(out, outlen, &len, sel->buf + r->key);
        switch (r->op) {
        case SELECTOR_EQ:
        case SELECTOR_NE:
            put(out, outlen, &len, r->op == SELECTOR_EQ ? "=" : "!=");
            put(out, outlen, &len, sel->buf + r->values[0]);
            break;
        case SELECTOR_IN:
        case SELECTOR_NOTIN:
            put(out, outlen, &len, r->op == SELECTOR_IN ? " in (" : " notin (");
            for (size_t k = 0; k < r->nvalues; k++) {
                if (k > 0)
                    put(out, outlen, &len, ",");
                put(out, outlen, &len, sel->buf + r->values[k]);
            }
            put(out, outlen, &len, ")");
            break;
        default:
            break;
        }
    }
    return len;
}
