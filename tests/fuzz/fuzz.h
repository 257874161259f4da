/* What every fuzz target (tests/fuzz/fuzz_*.c) defines: the entry point libFuzzer calls with each
 * input. */
#ifndef SLUICE_TESTS_FUZZ_FUZZ_H
#define SLUICE_TESTS_FUZZ_FUZZ_H

#include <stddef.h>
#include <stdint.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* A target may mutate its inputs itself (fuzz_journal_file), with libFuzzer's own mutator. */
size_t LLVMFuzzerCustomMutator(uint8_t *data, size_t size, size_t max_size, unsigned int seed);
size_t LLVMFuzzerMutate(uint8_t *data, size_t size, size_t max_size);

#endif
