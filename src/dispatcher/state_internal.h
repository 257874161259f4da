/* What the state machine's files share: the small helpers over sequence lists, update lists and
 * id tables that state_tables.c defines, and that state.c (lifecycle, state_apply),
 * state_query.c (lookups and queries) and the planners (plan.c and plan_*.c) use. Pure: no I/O, no
 * clocks, no threads. */

#ifndef SLUICE_DISPATCHER_STATE_INTERNAL_H
#define SLUICE_DISPATCHER_STATE_INTERNAL_H

#include "state.h"

#include "common/error.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* state_query.c */

/* Compression values as Sluice__Compression numbers them; the state does not see protobuf. */
const char *state_compression_name(int compression);

/* state_tables.c */

/* Grows the array *v of *cap elements of size bytes to hold at least need (doubling, from 8).
 * Returns 0, or SLUICE_ERR_NOMEM with *v and *cap unchanged. */
int state_grow(void **v, size_t *cap, size_t need, size_t size);
/* Drops the updates appended after start: a plan that fails leaves the list as it found it. */
void state_list_truncate(struct st_update_list *l, size_t start);
/* Sorted sequence lists (struct st_seq_list): release; reserve room for extra more (0 or
 * SLUICE_ERR_NOMEM, the list unchanged); contains (binary search); assign a copy of v[0..n)
 * (0, or SLUICE_ERR_NOMEM with dst left empty). */
void state_seq_release(struct st_seq_list *l);
int state_seq_reserve(struct st_seq_list *l, size_t extra);
bool state_seq_contains(const struct st_seq_list *l, uint64_t v);
int state_seq_assign(struct st_seq_list *dst, const uint64_t *v, size_t n);
/* Inserts v (not in l, room reserved) in order; removes v (in l). */
void state_seq_insert(struct st_seq_list *l, uint64_t v);
void state_seq_remove(struct st_seq_list *l, uint64_t v);
/* Whether l's values are strictly increasing. */
bool state_seq_strictly_increasing(const struct st_seq_list *l);

/* The id tables: the row of id in base[0, n), rows of size bytes that begin with their uint64_t
 * id and are sorted by it, or NULL. STATE_FIND(s, jobs, id) finds in s->jobs. */
void *state_row_find(const void *base, size_t n, size_t size, uint64_t id);
#define STATE_FIND(s, table, id) state_row_find((s)->table, (s)->n##table, sizeof *(s)->table, (id))
/* Inserts a row for id (not in the table, room reserved) in order, zeroed but for its id, and
 * returns it; erases row, which lies in the table. */
void *state_row_insert(void *base, size_t *n, size_t size, uint64_t id);
void state_row_erase(void *base, size_t *n, size_t size, void *row);
/* The index of the first dataset whose id is not below id (s->datasets is sorted by id). */
size_t state_dataset_lower(const struct state *s, const char *id);
/* The index in s->by_address of the first worker whose address is not below address. */
size_t state_address_lower(const struct state *s, const char *address);
/* The position of (key, task_id) in the task index v[0, n) (s->by_worker or s->by_iteration),
 * or where it would go. */
size_t state_ref_lower(const struct st_task_ref *v, size_t n, uint64_t key, uint64_t task_id);

#endif
