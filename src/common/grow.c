#include "grow.h"

#include "error.h"

#include <stdlib.h>

int grow_bytes(uint8_t **buf, size_t *cap, size_t need, size_t first)
{
    if (need <= *cap)
        return 0;
    size_t c = *cap ? *cap : (first ? first : 1);
    while (c < need)
        c = c > SIZE_MAX / 2 ? need : c * 2;
    uint8_t *p = realloc(*buf, c);
    if (!p)
        return SLUICE_ERR_NOMEM;
    *buf = p;
    *cap = c;
    return 0;
}
