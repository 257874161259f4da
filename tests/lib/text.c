#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "lib/text.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int text_format(char *buf, size_t len, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wformat-nonliteral"
    int n = vsnprintf(buf, len, fmt, ap);
#pragma GCC diagnostic pop
    va_end(ap);
    return n;
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

char *sorted_lines(const char *text)
{
    size_t n = count_lines(text);
    char *copy = strdup(text);
    char **lines = calloc(n + 1, sizeof(char *));
    if (!copy || !lines)
        abort();
    size_t k = 0;
    for (char *s = copy; *s && k < n;) {
        char *nl = strchr(s, '\n');
        if (nl)
            *nl = 0;
        lines[k++] = s;
        s = nl ? nl + 1 : s + strlen(s);
    }
    qsort(lines, k, sizeof(char *), cmp_str);
    size_t total = strlen(text) + 2;
    char *out = malloc(total);
    if (!out)
        abort();
    out[0] = 0;
    size_t len = 0;
    for (size_t i = 0; i < k; i++) {
        size_t l = strlen(lines[i]);
        memcpy(out + len, lines[i], l);
        len += l;
        out[len++] = '\n';
        out[len] = 0;
    }
    free(lines);
    free(copy);
    return out;
}

size_t count_lines(const char *text)
{
    size_t n = 0;
    for (const char *s = text; *s; s++)
        if (*s == '\n')
            n++;
    if (*text && text[strlen(text) - 1] != '\n')
        n++;
    return n;
}

void assert_contains_at(const char *text, const char *want, const char *file, int line)
{
    if (text && strstr(text, want))
        return;
    print_error("expected '%s' in:\n%s\n", want, text ? text : "(null)");
    _fail(file, line);
}
