#include "rows.h"

#include <stdlib.h>
#include <string.h>

static uint64_t key_at(const void *rows, size_t i, size_t stride, size_t key_off)
{
    uint64_t k;
    memcpy(&k, (const char *)rows + i * stride + key_off, sizeof k);
    return k;
}

size_t rows_lower(const void *rows, size_t n, size_t stride, size_t key_off, uint64_t key)
{
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (key_at(rows, mid, stride, key_off) < key)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

void *rows_find(const void *rows, size_t n, size_t stride, size_t key_off, uint64_t key)
{
    size_t i = rows_lower(rows, n, stride, key_off, key);
    if (i < n && key_at(rows, i, stride, key_off) == key)
        return (char *)rows + i * stride;
    return NULL;
}

void *rows_insert_at(void **rows, size_t *n, size_t *cap, size_t stride, size_t pos)
{
    if (*n == *cap) {
        size_t ncap = *cap ? *cap * 2 : 16;
        void *v = realloc(*rows, ncap * stride);
        if (!v)
            return NULL;
        *rows = v;
        *cap = ncap;
    }
    char *base = *rows;
    memmove(base + (pos + 1) * stride, base + pos * stride, (*n - pos) * stride);
    memset(base + pos * stride, 0, stride);
    (*n)++;
    return base + pos * stride;
}
