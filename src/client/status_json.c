#include "status_json.h"

#include "common/error.h"
#include "common/names.h"

#include <inttypes.h>
#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A growable string; after a failed allocation it stays failed and ignores further writes. */
struct sb {
    char *p;
    size_t len, cap;
    bool failed;
};

static void sb_put(struct sb *b, const char *s, size_t n)
{
    if (b->failed)
        return;
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->len + n + 1)
            cap *= 2;
        char *p = realloc(b->p, cap);
        if (!p) {
            b->failed = true;
            return;
        }
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = '\0';
}

static void sb_str(struct sb *b, const char *s)
{
    sb_put(b, s, strlen(s));
}

static void sb_pad(struct sb *b, size_t n)
{
    static const char spaces[] = "                                ";
    while (n > 0) {
        size_t k = n < sizeof(spaces) - 1 ? n : sizeof(spaces) - 1;
        sb_put(b, spaces, k);
        n -= k;
    }
}

/* Whether the integer literal p[0, n) (digits, optionally after '-') lies outside int64. */
static bool beyond_int64(const char *p, size_t n)
{
    const char *digits = *p == '-' ? p + 1 : p;
    size_t nd = n - (size_t)(digits - p);
    const char *limit = *p == '-' ? "9223372036854775808" : "9223372036854775807";
    return nd > 19 || (nd == 19 && memcmp(digits, limit, 19) > 0);
}

/* Copies text with every integer literal beyond int64 put in quotes, so jansson (whose integers
 * are int64) reads it as a string of the exact digits instead of refusing the document. 64-bit
 * incarnations are such integers. Returns NULL when out of memory. */
static char *quote_big_ints(const char *text)
{
    size_t len = strlen(text);
    char *out = malloc(len * 3 + 1); /* at worst every literal grows by two quotes */
    if (!out)
        return NULL;
    size_t o = 0;
    bool in_string = false;
    for (size_t i = 0; i < len;) {
        char ch = text[i];
        if (in_string) {
            out[o++] = ch;
            if (ch == '\\' && i + 1 < len)
                out[o++] = text[++i];
            else if (ch == '"')
                in_string = false;
            i++;
            continue;
        }
        if (ch == '"') {
            in_string = true;
            out[o++] = text[i++];
            continue;
        }
        if (ch == '-' || (ch >= '0' && ch <= '9')) {
            size_t n = strspn(text + i, "-+0123456789.eE");
            size_t nd = strspn(text + i + (ch == '-'), "0123456789") + (ch == '-');
            bool big = nd == n && n > (size_t)(ch == '-') && beyond_int64(text + i, n);
            if (big)
                out[o++] = '"';
            memcpy(out + o, text + i, n);
            o += n;
            if (big)
                out[o++] = '"';
            i += n;
            continue;
        }
        out[o++] = text[i++];
    }
    out[o] = '\0';
    return out;
}

/* Parses text as JSON. A document jansson refuses is tried once more with its out-of-range
 * integers quoted (see quote_big_ints); errors name the first attempt's position. */
static json_t *load(const char *text, char *err, size_t errlen)
{
    json_error_t jerr, jerr2;
    json_t *root = json_loads(text, 0, &jerr);
    if (!root) {
        char *quoted = quote_big_ints(text);
        if (quoted)
            root = json_loads(quoted, 0, &jerr2);
        free(quoted);
    }
    if (!root) {
        err_set(err, errlen, SLUICE_ERR_CORRUPT, "status document: line %d column %d: %s",
                jerr.line, jerr.column, jerr.text);
        return NULL;
    }
    if (!json_is_object(root)) {
        json_decref(root);
        err_set(err, errlen, SLUICE_ERR_CORRUPT, "status document: not a JSON object");
        return NULL;
    }
    return root;
}

/* The text of one value for a table cell or a "name: value" line, malloc'd (NULL when out of
 * memory). Arrays show as their length: sections list tasks or clients either as counts or as
 * arrays of entries. */
static char *cell_text(const json_t *v)
{
    char buf[64];
    if (!v || json_is_null(v))
        return strdup("-");
    if (json_is_string(v)) {
        if (json_string_length(v) == 0)
            return strdup("-");
        /* Strings may contain NULs; the cell shows the text up to the first one. Control
         * characters (a newline in a name) would break the table: they show escaped. */
        return name_escape_dup(json_string_value(v));
    }
    if (json_is_integer(v)) {
        snprintf(buf, sizeof buf, "%" JSON_INTEGER_FORMAT, json_integer_value(v));
        return strdup(buf);
    }
    if (json_is_real(v)) {
        double d = json_real_value(v);
        if (d == floor(d) && fabs(d) < 1e17)
            snprintf(buf, sizeof buf, "%.0f", d);
        else
            snprintf(buf, sizeof buf, "%g", d);
        return strdup(buf);
    }
    if (json_is_true(v))
        return strdup("true");
    if (json_is_false(v))
        return strdup("false");
    if (json_is_array(v)) {
        snprintf(buf, sizeof buf, "%zu", json_array_size(v));
        return strdup(buf);
    }
    return json_dumps(v, JSON_COMPACT | JSON_SORT_KEYS);
}

/* How a column shows its field. */
enum col_kind {
    COL_TEXT,   /* cell_text() */
    COL_RATE,   /* a number per second, one decimal */
    COL_MB,     /* bytes (or bytes per second) as megabytes (10^6), two decimals */
    COL_AGE,    /* milliseconds, with "ms" */
    COL_SPLITS, /* a "splits" object: "finished/total", the total "endless" when null */
    COL_LEASED, /* a "splits" object: its "leased" */
    COL_HEDGED, /* a "splits" object: its "hedged" (copies leased, sluice read --hedge) */
    COL_LIST,   /* an array of numbers: "0.4, 0.6" */
    COL_SHARE,  /* a share in [0, 1] as a percentage: "41 %" */
    COL_SECONDS /* seconds, one decimal, with "s" */
};

/* The first of the NULL-terminated names present in obj, or NULL. */
static json_t *field(const json_t *obj, const char *const *names)
{
    for (size_t i = 0; names[i]; i++) {
        json_t *v = json_object_get(obj, names[i]);
        if (v)
            return v;
    }
    return NULL;
}

static char *printed(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static char *printed(const char *fmt, ...)
{
    char buf[96];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    return strdup(buf);
}

/* The text of v as a column of kind shows it (malloc'd, NULL when out of memory). A value of
 * another type than the kind expects shows as cell_text() does. */
static char *kind_text(const json_t *v, enum col_kind kind)
{
    switch (kind) {
    case COL_RATE:
        if (json_is_number(v))
            return printed("%.1f", json_number_value(v));
        break;
    case COL_MB:
        if (json_is_number(v))
            return printed("%.2f", json_number_value(v) / 1e6);
        break;
    case COL_AGE:
        if (json_is_number(v))
            return printed("%.0fms", json_number_value(v));
        break;
    case COL_SPLITS:
        if (json_is_object(v)) {
            json_t *fin = json_object_get(v, "finished"), *total = json_object_get(v, "total");
            char *a = cell_text(fin);
            char *b = json_is_null(total) ? strdup("endless") : cell_text(total);
            char *s = a && b ? printed("%s/%s", a, b) : NULL;
            free(a);
            free(b);
            return s;
        }
        break;
    case COL_LEASED:
    case COL_HEDGED:
        if (json_is_object(v) && json_object_get(v, kind == COL_LEASED ? "leased" : "hedged"))
            return cell_text(json_object_get(v, kind == COL_LEASED ? "leased" : "hedged"));
        return strdup("-");
    case COL_LIST:
        if (json_is_array(v)) {
            char buf[512];
            size_t n = 0;
            buf[0] = '\0';
            for (size_t i = 0; i < json_array_size(v) && n < sizeof buf - 32; i++) {
                json_t *e = json_array_get(v, i);
                /* Fractions to three places, other numbers as they are. */
                char *c = json_is_real(e) && json_real_value(e) < 1 && json_real_value(e) > 0
                              ? printed("%.3f", json_real_value(e))
                              : cell_text(e);
                if (!c)
                    return NULL;
                n += (size_t)snprintf(buf + n, sizeof buf - n, "%s%s", i ? "," : "", c);
                free(c);
            }
            return strdup(buf);
        }
        break;
    case COL_SHARE:
        if (json_is_number(v))
            return printed("%.0f %%", json_number_value(v) * 100.0);
        break;
    case COL_SECONDS:
        if (json_is_number(v))
            return printed("%.1fs", json_number_value(v));
        break;
    case COL_TEXT:
        break;
    }
    return cell_text(v);
}

#define MAX_COLS 15

struct column {
    const char *title;
    const char *names[4]; /* accepted field names, NULL-terminated */
    bool is_id;           /* falls back to the entry's key in a section keyed by id */
    enum col_kind kind;
    /* Shown only when some entry of the section has the field, so a document from a dispatcher
     * that does not report it renders as before (COL_HEDGED: only when some entry's count is
     * above 0, so reads that never hedge render as before too). */
    bool optional;
};

struct section {
    const char *name;
    size_t ncols;
    struct column cols[MAX_COLS];
    /* A field shown under the table, one line per entry that has it (NULL: none):
     * "  <row> <id> <what>: <text>". */
    const char *note_key, *note_row, *note_what;
    /* Rendered only when the document has the section (a dispatcher without any says nothing). */
    bool only_present;
};

static const struct section sections[] = {
    {"workers",
     12,
     {{"ADDRESS", {"address", "addr", NULL}, true, COL_TEXT, false},
      {"INCARNATION", {"incarnation", NULL}, false, COL_TEXT, false},
      {"HOST", {"host_id", NULL}, false, COL_TEXT, true},
      {"LABELS", {"labels", NULL}, false, COL_TEXT, true},
      {"SLOTS", {"task_slots", NULL}, false, COL_TEXT, true},
      {"TASKS", {"tasks", "num_tasks", NULL}, false, COL_TEXT, false},
      {"DRAINING", {"draining", NULL}, false, COL_TEXT, true},
      {"BUFFERED", {"buffered", NULL}, false, COL_TEXT, true},
      {"BUF_MB", {"buffered_bytes", NULL}, false, COL_MB, true},
      {"ELEM/S", {"elements_per_second", NULL}, false, COL_RATE, true},
      {"MB/S", {"bytes_per_second", NULL}, false, COL_MB, true},
      {"HEARTBEAT", {"heartbeat_age_ms", NULL}, false, COL_AGE, true}}},
    {"datasets",
     2,
     {{"ID", {"id", "dataset_id", NULL}, true}, {"PIPELINE", {"pipeline", "text", NULL}, false}}},
    {"jobs",
     15,
     {{"ID", {"id", "job_id", NULL}, true, COL_TEXT, false},
      {"NAME", {"name", "job_name", NULL}, false, COL_TEXT, false},
      {"DATASET", {"dataset", "dataset_id", NULL}, false, COL_TEXT, false},
      {"MODE", {"mode", NULL}, false, COL_TEXT, false},
      {"TARGET", {"target_workers", NULL}, false, COL_TEXT, true},
      {"SELECTOR", {"worker_selector", NULL}, false, COL_TEXT, true},
      {"STATE", {"state", NULL}, false, COL_TEXT, false},
      {"CLIENTS", {"clients", "num_clients", NULL}, false, COL_TEXT, false},
      {"TASKS", {"tasks", "num_tasks", NULL}, false, COL_TEXT, false},
      {"WORKERS", {"workers", "num_workers", NULL}, false, COL_TEXT, true},
      {"SPLITS", {"splits", NULL}, false, COL_SPLITS, true},
      {"LEASED", {"splits", NULL}, false, COL_LEASED, true},
      {"HEDGED", {"splits", NULL}, false, COL_HEDGED, true},
      {"ELEM/S", {"elements_per_second", NULL}, false, COL_RATE, true},
      {"MB/S", {"bytes_per_second", NULL}, false, COL_MB, true}},
     "error",
     "job",
     "failed"},
    {"saves",
     6,
     {{"ID", {"id", "save_id", NULL}, true, COL_TEXT, false},
      {"DATASET", {"dataset", "dataset_id", NULL}, false, COL_TEXT, false},
      {"PATH", {"path", NULL}, false, COL_TEXT, false},
      {"STATE", {"state", NULL}, false, COL_TEXT, false},
      {"CHUNKS", {"chunks", NULL}, false, COL_TEXT, false},
      {"COMMITTED", {"chunks_committed", NULL}, false, COL_TEXT, false}},
     "error",
     "save",
     "failed",
     true},
    {"mixes",
     6,
     {{"JOB", {"job_name", NULL}, false, COL_TEXT, false},
      {"DATASET", {"dataset_id", NULL}, false, COL_TEXT, false},
      {"WEIGHTS", {"weights", NULL}, false, COL_LIST, false},
      {"FROM", {"weights_from", NULL}, false, COL_TEXT, false},
      {"HORIZON", {"horizon", NULL}, false, COL_TEXT, false},
      {"SHARES", {"realized_shares", NULL}, false, COL_LIST, true}},
     NULL,
     NULL,
     NULL,
     true},
};

/* The consumers of every job, one row each, from the jobs' "consumers" arrays (the table
 * status_json_table() adds after the sections when some job has consumers). */
static const struct section consumers_section = {
    "consumers",
    5,
    {{"JOB", {"job", NULL}, false, COL_TEXT, false},
     {"CONSUMER", {"id", NULL}, false, COL_TEXT, false},
     {"WAITED", {"exposed_wait_seconds", NULL}, false, COL_SECONDS, false},
     {"WAIT_1M", {"wait_share", NULL}, false, COL_SHARE, false},
     {"ELEM/S", {"elements_per_second", NULL}, false, COL_RATE, false}}};

/* Appends one section's table. Entries that are not objects are skipped. */
static void render_section(struct sb *b, const struct section *sec, json_t *list)
{
    size_t nrows = json_is_array(list) ? json_array_size(list) : json_object_size(list);
    char **cells = calloc(nrows * sec->ncols + 1, sizeof *cells);
    if (!cells) {
        b->failed = true;
        return;
    }
    /* The columns shown: every column but an optional one no entry has a field for. */
    size_t vis[MAX_COLS], nvis = 0;
    for (size_t c = 0; c < sec->ncols; c++) {
        bool shown = !sec->cols[c].optional;
        for (size_t i = 0; i < nrows && !shown; i++) {
            json_t *e = json_is_array(list) ? json_array_get(list, i) : NULL;
            if (!json_is_array(list)) {
                /* Objects keyed by id: walk to the i-th value. */
                void *it = json_object_iter(list);
                for (size_t k = 0; k < i && it; k++)
                    it = json_object_iter_next(list, it);
                e = it ? json_object_iter_value(it) : NULL;
            }
            json_t *v = json_is_object(e) ? field(e, sec->cols[c].names) : NULL;
            shown = v != NULL;
            if (v && sec->cols[c].kind == COL_HEDGED) {
                json_t *h = json_is_object(v) ? json_object_get(v, "hedged") : NULL;
                shown = json_is_number(h) && json_number_value(h) > 0;
            }
        }
        if (shown)
            vis[nvis++] = c;
    }
    size_t width[MAX_COLS];
    for (size_t c = 0; c < nvis; c++)
        width[c] = strlen(sec->cols[vis[c]].title);

    char **notes = calloc(nrows + 1, sizeof *notes);
    if (!notes) {
        free(cells);
        b->failed = true;
        return;
    }
    size_t rows = 0;
    const char *key = NULL;
    json_t *entry = NULL;
    void *iter = json_is_object(list) ? json_object_iter(list) : NULL;
    for (size_t i = 0; i < nrows; i++) {
        if (json_is_array(list)) {
            entry = json_array_get(list, i);
            key = NULL;
        } else {
            key = json_object_iter_key(iter);
            entry = json_object_iter_value(iter);
            iter = json_object_iter_next(list, iter);
        }
        if (!json_is_object(entry))
            continue;
        for (size_t c = 0; c < nvis; c++) {
            const struct column *col = &sec->cols[vis[c]];
            json_t *v = field(entry, col->names);
            char *text = !v && col->is_id && key ? name_escape_dup(key) : kind_text(v, col->kind);
            if (!text) {
                b->failed = true;
                goto done;
            }
            cells[rows * sec->ncols + c] = text;
            size_t w = strlen(text);
            if (w > width[c])
                width[c] = w;
        }
        json_t *note = sec->note_key ? json_object_get(entry, sec->note_key) : NULL;
        if (json_is_string(note) && json_string_length(note) > 0 &&
            !(notes[rows] = name_escape_dup(json_string_value(note)))) {
            rows++;
            b->failed = true;
            goto done;
        }
        rows++;
    }

    char head[64];
    snprintf(head, sizeof head, "%s (%zu)\n", sec->name, rows);
    sb_str(b, head);
    if (rows == 0) {
        sb_str(b, "  none\n");
        goto done;
    }
    for (size_t r = 0; r <= rows; r++) {
        sb_str(b, "  ");
        for (size_t c = 0; c < nvis; c++) {
            const char *text = r == 0 ? sec->cols[vis[c]].title : cells[(r - 1) * sec->ncols + c];
            sb_str(b, text);
            if (c + 1 < nvis)
                sb_pad(b, width[c] - strlen(text) + 2);
        }
        sb_str(b, "\n");
    }
    for (size_t r = 0; r < rows; r++) {
        if (!notes[r])
            continue;
        sb_str(b, "  ");
        sb_str(b, sec->note_row);
        sb_str(b, " ");
        sb_str(b, cells[r * sec->ncols]);
        sb_str(b, " ");
        sb_str(b, sec->note_what);
        sb_str(b, ": ");
        sb_str(b, notes[r]);
        sb_str(b, "\n");
    }
done:
    for (size_t i = 0; i < nrows * sec->ncols; i++)
        free(cells[i]);
    free(cells);
    for (size_t i = 0; i < nrows; i++)
        free(notes[i]);
    free(notes);
}

static bool is_section(const char *key)
{
    for (size_t s = 0; s < sizeof sections / sizeof sections[0]; s++)
        if (strcmp(key, sections[s].name) == 0)
            return true;
    return false;
}

int status_json_table(const char *json, char **out, char *err, size_t errlen)
{
    *out = NULL;
    json_t *root = load(json, err, errlen);
    if (!root)
        return SLUICE_ERR_CORRUPT;
    struct sb b = {0};
    sb_str(&b, "");

    /* Scalars first (the dispatcher's own facts), in the document's order. */
    const char *key;
    json_t *v;
    json_object_foreach(root, key, v)
    {
        if (json_is_array(v) || json_is_object(v) || is_section(key))
            continue;
        char *text = cell_text(v);
        if (!text) {
            b.failed = true;
            break;
        }
        sb_str(&b, key);
        sb_str(&b, ": ");
        sb_str(&b, text);
        sb_str(&b, "\n");
        free(text);
    }
    /* A dispatcher replica's own view of its group (the "raft" object), on one line. */
    json_t *raft = json_object_get(root, "raft");
    if (json_is_object(raft)) {
        static const char *const keys[] = {"role", "membership",   "serving",       "leader_id",
                                           "term", "commit_index", "applied_index", "state_digest"};
        char *id = cell_text(json_object_get(raft, "id"));
        sb_str(&b, "replica: ");
        sb_str(&b, id ? id : "?");
        free(id);
        for (size_t k = 0; k < sizeof keys / sizeof keys[0]; k++) {
            json_t *kv = json_object_get(raft, keys[k]);
            if (!kv)
                continue;
            char *text = cell_text(kv);
            if (!text) {
                b.failed = true;
                break;
            }
            sb_str(&b, k == 0 ? " " : ", ");
            if (k > 0) {
                sb_str(&b, keys[k]);
                sb_str(&b, " ");
            }
            sb_str(&b, text);
            free(text);
        }
        sb_str(&b, "\n");
    }
    for (size_t s = 0; s < sizeof sections / sizeof sections[0]; s++) {
        json_t *list = json_object_get(root, sections[s].name);
        if (!json_is_array(list) && !json_is_object(list))
            list = NULL;
        if (!list && sections[s].only_present)
            continue;
        if (b.len > 0)
            sb_str(&b, "\n");
        if (list) {
            render_section(&b, &sections[s], list);
        } else {
            sb_str(&b, sections[s].name);
            sb_str(&b, " (0)\n  none\n");
        }
    }
    /* The consumers of the jobs, when any reported its wait. */
    json_t *rows = json_array();
    json_t *jobs = json_object_get(root, "jobs");
    for (size_t i = 0; rows && json_is_array(jobs) && i < json_array_size(jobs); i++) {
        json_t *job = json_array_get(jobs, i);
        json_t *cs = json_is_object(job) ? json_object_get(job, "consumers") : NULL;
        for (size_t k = 0; json_is_array(cs) && k < json_array_size(cs); k++) {
            json_t *c = json_array_get(cs, k);
            json_t *row = json_is_object(c) ? json_deep_copy(c) : NULL;
            if (!row)
                continue;
            json_t *id = json_object_get(job, "id");
            if (id && json_object_set(row, "job", id) != 0)
                b.failed = true;
            if (json_array_append_new(rows, row) != 0)
                b.failed = true;
        }
    }
    if (!rows)
        b.failed = true;
    else if (json_array_size(rows) > 0) {
        sb_str(&b, "\n");
        render_section(&b, &consumers_section, rows);
    }
    json_decref(rows);
    json_decref(root);
    if (b.failed) {
        free(b.p);
        return err_set(err, errlen, SLUICE_ERR_NOMEM, "%s", sluice_strerror(SLUICE_ERR_NOMEM));
    }
    *out = b.p;
    return 0;
}

/* Reads an id given as a JSON integer, an integral number, or a string of decimal digits. */
static bool id_value(const json_t *v, uint64_t *out)
{
    if (json_is_integer(v)) {
        if (json_integer_value(v) < 0)
            return false;
        *out = (uint64_t)json_integer_value(v);
        return true;
    }
    if (json_is_real(v)) {
        double d = json_real_value(v);
        if (d < 0 || d != floor(d) || d >= 1.8e19)
            return false;
        *out = (uint64_t)d;
        return true;
    }
    if (json_is_string(v)) {
        const char *s = json_string_value(v);
        if (!*s)
            return false;
        uint64_t x = 0;
        for (; *s; s++) {
            if (*s < '0' || *s > '9')
                return false;
            uint64_t d = (uint64_t)(*s - '0');
            if (x > UINT64_MAX / 10 || (x == UINT64_MAX / 10 && d > UINT64_MAX % 10))
                return false;
            x = x * 10 + d;
        }
        *out = x;
        return true;
    }
    return false;
}

/* Whether a job entry agrees with ref on every field it has. */
static bool job_matches(const json_t *job, const struct status_job_ref *ref)
{
    static const char *const dataset_names[] = {"dataset", "dataset_id", NULL};
    static const char *const name_names[] = {"name", "job_name", NULL};
    static const char *const mode_names[] = {"mode", NULL};
    static const char *const iteration_names[] = {"iteration_id", "iteration", NULL};
    const json_t *v = field(job, dataset_names);
    if (v && (!json_is_string(v) || strcmp(json_string_value(v), ref->dataset_id) != 0))
        return false;
    v = field(job, name_names);
    if (v && !(json_is_null(v) && !ref->name[0]) &&
        (!json_is_string(v) || strcmp(json_string_value(v), ref->name) != 0))
        return false;
    v = field(job, mode_names);
    if (v && ref->mode && (!json_is_string(v) || strcmp(json_string_value(v), ref->mode) != 0))
        return false;
    v = field(job, iteration_names);
    uint64_t iteration;
    if (v && ref->iteration_id && (!id_value(v, &iteration) || iteration != ref->iteration_id))
        return false;
    return true;
}

enum status_job_verdict status_json_job(const char *json, const struct status_job_ref *ref)
{
    static const char *const id_names[] = {"id", "job_id", NULL};
    json_t *root = load(json, NULL, 0);
    if (!root)
        return STATUS_JOB_UNKNOWN;
    enum status_job_verdict verdict = STATUS_JOB_UNKNOWN;
    json_t *jobs = json_object_get(root, "jobs");
    if (json_is_array(jobs) || json_is_object(jobs)) {
        verdict = STATUS_JOB_GONE;
        size_t n = json_is_array(jobs) ? json_array_size(jobs) : json_object_size(jobs);
        void *iter = json_is_object(jobs) ? json_object_iter(jobs) : NULL;
        for (size_t i = 0; i < n; i++) {
            json_t *job;
            uint64_t id = 0;
            bool have_id;
            if (json_is_array(jobs)) {
                job = json_array_get(jobs, i);
                have_id = json_is_object(job) && id_value(field(job, id_names), &id);
            } else {
                json_t *key = json_string(json_object_iter_key(iter));
                job = json_object_iter_value(iter);
                iter = json_object_iter_next(jobs, iter);
                have_id = json_is_object(job) && id_value(field(job, id_names), &id);
                if (!have_id && key && json_is_object(job))
                    have_id = id_value(key, &id);
                json_decref(key);
            }
            if (!have_id || id != ref->id)
                continue;
            if (job_matches(job, ref))
                verdict = STATUS_JOB_PRESENT;
            break;
        }
    }
    json_decref(root);
    return verdict;
}

int status_json_why(const char *json, const char *job, bool as_json, char **out, char *err,
                    size_t errlen)
{
    *out = NULL;
    json_t *root = load(json, err, errlen);
    if (!root)
        return SLUICE_ERR_CORRUPT;
    json_t *jobs = json_object_get(root, "jobs"), *found = NULL;
    uint64_t want = 0;
    size_t len = strlen(job);
    bool by_id = len > 0 && len <= 19 && strspn(job, "0123456789") == len;
    if (by_id)
        want = strtoull(job, NULL, 10);
    for (size_t i = 0; json_is_array(jobs) && i < json_array_size(jobs); i++) {
        json_t *j = json_array_get(jobs, i);
        uint64_t id;
        const char *name = json_string_value(json_object_get(j, "name"));
        /* A name matches its newest job (the highest id); an id matches itself. */
        if ((by_id && id_value(json_object_get(j, "id"), &id) && id == want) ||
            (name && strcmp(name, job) == 0))
            found = j;
    }
    int rc = 0;
    json_t *why = found ? json_object_get(found, "why") : NULL;
    const char *text = json_string_value(json_object_get(why, "text"));
    if (!found)
        rc = err_set(err, errlen, SLUICE_ERR_NOT_FOUND, "no job '%s'", job);
    else if (!json_is_object(why) || !text)
        rc = err_set(err, errlen, SLUICE_ERR_PROTOCOL,
                     "the dispatcher's status has no attribution for job '%s'", job);
    else if (as_json)
        *out = json_dumps(why, JSON_COMPACT);
    else if ((*out = malloc(strlen(text) + 2)) != NULL)
        sprintf(*out, "%s\n", text);
    if (rc == 0 && !*out)
        rc = err_set(err, errlen, SLUICE_ERR_NOMEM, "%s", sluice_strerror(SLUICE_ERR_NOMEM));
    json_decref(root);
    return rc;
}
