/* Files for tests: write one, read one back whole, show one on stderr. The writers and
 * file_read fail the test (cmocka) when the file system refuses; read_text_file and print_file
 * take a missing file in their stride, for logs that may not exist yet. */
#ifndef SLUICE_TESTS_LIB_FILE_H
#define SLUICE_TESTS_LIB_FILE_H

#include <stddef.h>
#include <stdint.h>

/* Writes data[0, len) to path, created or truncated; fails the test unless every byte is
 * written and the file closes cleanly. */
void file_write(const char *path, const void *data, size_t len);

/* file_write of text without its NUL. */
void file_write_text(const char *path, const char *text);

/* file_write_text of text to DIR/NAME. */
void file_write_in(const char *dir, const char *name, const char *text);

/* The whole of path, malloc'd (the caller frees it), with *len its size (len may be NULL) and a
 * NUL after the last byte, so that a text reads as a string. Fails the test when path cannot be
 * read. */
uint8_t *file_read(const char *path, size_t *len);

/* The whole text of a file (a log, say), malloc'd and NUL-terminated; "" when it cannot be
 * opened. Aborts on out of memory. */
char *read_text_file(const char *path);

/* Copies the first max_lines lines of path to stderr under a "---- PATH ----" line; nothing when
 * it cannot be opened. */
void print_file(const char *path, int max_lines);

#endif
