/* Leftmost-longest matching of special tokens' text (see special_match.h). Node 0 is the root;
 * a node's children are a linked list through `sibling`, in the order added (a handful each:
 * LLaMA-3's 256 tokens share "<|" and branch on a few letters and digits). */
#include "data/special_match.h"

#include <stdlib.h>
#include <string.h>

typedef struct node {
    int32_t child, sibling; /* -1 none */
    int64_t id;             /* the token ending here, or -1 */
    unsigned char byte;
} node;

struct it_special_match {
    node *nodes;
    size_t n, cap, count;
    uint64_t first[4], any[4]; /* bitmaps: bytes that start a token, bytes in a token */
};

static int32_t new_node(it_special_match *m, unsigned char byte) {
    if (m->n == m->cap) {
        size_t cap = m->cap ? 2 * m->cap : 64;
        if (cap > INT32_MAX) return -1;
        node *nodes = realloc(m->nodes, cap * sizeof *nodes);
        if (!nodes) return -1;
        m->nodes = nodes;
        m->cap = cap;
    }
    m->nodes[m->n] = (node){-1, -1, -1, byte};
    return (int32_t)m->n++;
}

it_special_match *it_special_match_new(void) {
    it_special_match *m = calloc(1, sizeof *m);
    if (m && new_node(m, 0) < 0) {
        free(m);
        return NULL;
    }
    return m;
}

void it_special_match_free(it_special_match *m) {
    if (!m) return;
    free(m->nodes);
    free(m);
}

static int32_t child_of(const it_special_match *m, int32_t at, unsigned char c) {
    for (int32_t k = m->nodes[at].child; k >= 0; k = m->nodes[k].sibling)
        if (m->nodes[k].byte == c) return k;
    return -1;
}

int it_special_match_add(it_special_match *m, const char *s, size_t n, uint32_t id) {
    if (n == 0) return 0;
    int32_t at = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        m->any[c >> 6] |= 1ull << (c & 63);
        int32_t k = child_of(m, at, c);
        if (k < 0) {
            if ((k = new_node(m, c)) < 0) return -1;
            m->nodes[k].sibling = m->nodes[at].child;
            m->nodes[at].child = k;
        }
        at = k;
    }
    unsigned char c0 = (unsigned char)s[0];
    m->first[c0 >> 6] |= 1ull << (c0 & 63);
    if (m->nodes[at].id < 0) m->nodes[at].id = id, m->count++;
    return 0;
}

bool it_special_match_next(const it_special_match *m, const char *text, size_t len, size_t from, size_t *start,
                           size_t *end, uint32_t *id) {
    const unsigned char *s = (const unsigned char *)text;
    if (!m || !m->count) return false;
    for (size_t p = from; p < len; p++) {
        if (!(m->first[s[p] >> 6] >> (s[p] & 63) & 1)) continue;
        int64_t best = -1;
        size_t best_end = 0;
        int32_t at = 0;
        for (size_t q = p; q < len && (at = child_of(m, at, s[q])) >= 0; q++)
            if (m->nodes[at].id >= 0) best = m->nodes[at].id, best_end = q + 1;
        if (best >= 0) {
            *start = p, *end = best_end, *id = (uint32_t)best;
            return true;
        }
    }
    return false;
}

size_t it_special_match_count(const it_special_match *m) { return m ? m->count : 0; }

bool it_special_match_has_byte(const it_special_match *m, unsigned char c) {
    return m && (m->any[c >> 6] >> (c & 63) & 1);
}
