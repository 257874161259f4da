/* Growing a byte buffer: the one doubling rule the readers share. Pure: no I/O. */
#ifndef SLUICE_COMMON_GROW_H
#define SLUICE_COMMON_GROW_H

#include <stddef.h>
#include <stdint.h>

/* Makes *buf (malloc'd, *cap bytes; NULL and 0 to start) hold at least need bytes, keeping its
 * content: doubling from first (or from *cap) until need fits. Returns 0, or SLUICE_ERR_NOMEM
 * with *buf and *cap unchanged. */
int grow_bytes(uint8_t **buf, size_t *cap, size_t need, size_t first);

#endif
