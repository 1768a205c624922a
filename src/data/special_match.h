/* Finds special (added) tokens' text in a text, as Hugging Face's added-token splitting and
 * tiktoken's encode with allowed_special="all" do: the leftmost match, and of the matches that
 * start there the longest. A byte trie with sorted sibling lists; a 256-bit table of first
 * bytes skips positions no token starts at. Private to src/data. */
#ifndef IT_DATA_SPECIAL_MATCH_H
#define IT_DATA_SPECIAL_MATCH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct it_special_match it_special_match;

it_special_match *it_special_match_new(void); /* NULL when out of memory */
void it_special_match_free(it_special_match *m);
/* Adds token text s[0..n) with id; n > 0. A text added twice keeps its first id. -1 when out
 * of memory. */
int it_special_match_add(it_special_match *m, const char *s, size_t n, uint32_t id);
/* The leftmost-longest match in text[from..len): true with [*start, *end) and its *id. */
bool it_special_match_next(const it_special_match *m, const char *text, size_t len, size_t from, size_t *start,
                           size_t *end, uint32_t *id);
size_t it_special_match_count(const it_special_match *m); /* tokens added */
/* Whether some token contains byte c (a split point at c may cut a token). */
bool it_special_match_has_byte(const it_special_match *m, unsigned char c);

#endif
