#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "lib/file.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void file_write(const char *path, const void *data, size_t len)
{
    FILE *f = fopen(path, "wb");
    if (!f)
        fail_msg("cannot create %s", path);
    if (len)
        assert_int_equal(fwrite(data, 1, len, f), len);
    assert_int_equal(fclose(f), 0);
}

void file_write_text(const char *path, const char *text)
{
    file_write(path, text, strlen(text));
}

void file_write_in(const char *dir, const char *name, const char *text)
{
    size_t n = strlen(dir) + strlen(name) + 2;
    char *path = malloc(n);
    assert_non_null(path);
    snprintf(path, n, "%s/%s", dir, name);
    file_write_text(path, text);
    free(path);
}

uint8_t *file_read(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        fail_msg("cannot open %s", path);
    assert_int_equal(fseek(f, 0, SEEK_END), 0);
    long n = ftell(f);
    assert_true(n >= 0);
    rewind(f);
    uint8_t *p = malloc((size_t)n + 1);
    assert_non_null(p);
    assert_int_equal(fread(p, 1, (size_t)n, f), (size_t)n);
    fclose(f);
    p[n] = 0;
    if (len)
        *len = (size_t)n;
    return p;
}

char *read_text_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    size_t cap = 1 << 16, len = 0;
    char *text = malloc(cap);
    if (!text)
        abort();
    for (size_t n; f && (n = fread(text + len, 1, cap - len - 1, f)) > 0;) {
        len += n;
        if (cap - len < 2 && !(text = realloc(text, cap *= 2)))
            abort();
    }
    if (f)
        fclose(f);
    text[len] = '\0';
    return text;
}

void print_file(const char *path, int max_lines)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return;
    char line[1024];
    int n = 0;
    fprintf(stderr, "---- %s ----\n", path);
    while (fgets(line, sizeof(line), f) && n++ < max_lines)
        fputs(line, stderr);
    fclose(f);
}
