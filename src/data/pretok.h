/* Pre-tokenizers that are not public API (the public ones are in infinitrain/data.h:
 * it_bpe_pretoken_end, it_tiktoken_pretoken_end, it_tiktoken_pretoken_end_o200k). Each returns
 * the end of the pre-token that starts at byte pos < len of text[0..len). Private to src/data. */
#ifndef IT_DATA_PRETOK_H
#define IT_DATA_PRETOK_H

#include <stddef.h>

/* Qwen2's pattern: cl100k_base's with single digits (pretok.c). */
size_t it_pretok_qwen2_end(const char *text, size_t len, size_t pos);

#endif
