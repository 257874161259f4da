/* Texts in tests: lines as a multiset, and a check that a text holds another. */
#ifndef SLUICE_TESTS_LIB_TEXT_H
#define SLUICE_TESTS_LIB_TEXT_H

#include <stddef.h>

/* Splits text into lines, sorts them, and joins them back with '\n' (a canonical multiset). The
 * result is malloc'd. */
char *sorted_lines(const char *text);

/* Counts lines (a last line without '\n' counts too). */
size_t count_lines(const char *text);

/* Fails the test (at the caller's file and line) unless text holds want; text may be NULL,
 * which holds nothing. The message shows both. */
#define assert_contains(text, want) assert_contains_at((text), (want), __FILE__, __LINE__)
void assert_contains_at(const char *text, const char *want, const char *file, int line);

/* snprintf for a format that is data, which the compiler cannot check (a table of pipeline texts
 * with %s for a directory): the one place the tests hand printf a format that is no literal. */
int text_format(char *buf, size_t len, const char *fmt, ...);

#endif
