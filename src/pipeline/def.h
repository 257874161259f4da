/* Conversion between a spec and its DatasetDef protobuf (proto/dataset.proto). Round trips are
 * exact: pipe_spec_from_def(pipe_spec_to_def(s)) equals s. Protobuf stays at the edge: only
 * code that moves bytes (journal, wire) calls these. */
#ifndef SLUICE_PIPELINE_DEF_H
#define SLUICE_PIPELINE_DEF_H

#include "spec.h"

#include <stddef.h>
#include <stdint.h>

/* Serializes spec as a DatasetDef. On success *out is malloc'd (caller frees) with *len bytes. */
int pipe_spec_encode(const struct pipe_spec *spec, uint8_t **out, size_t *len);

/* Parses a serialized DatasetDef and validates it exactly as the parser would (bad enum values,
 * missing source, out-of-range arguments, over-deep nesting are SLUICE_ERR_CORRUPT with a
 * message in err). On success *out owns a new spec. */
int pipe_spec_decode(const uint8_t *data, size_t len, struct pipe_spec **out, char *err,
                     size_t errlen);

#endif
