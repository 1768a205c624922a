/* Context parallelism's place in the models (model_impl.h): the positions of this rank's rows
 * and attention over the CP group. The rows themselves are cut before the model sees them
 * (it_cp_slice_host, by the trainer); everything between attentions is per token. */
#include "autograd/node.h"
#include "infinitrain/dist.h"
#include "models/model_impl.h"

int64_t it__cp_length(const it_model *m, int64_t Tl) { return Tl * m->cp_size; }

it_tensor *it__cp_rows(it_model *m, it_tensor *table, int64_t pos, int64_t Tl, int64_t lo, int64_t n) {
    if (!m->cp) return it_slice(table, 0, pos + lo, pos + lo + n, 1);
    int64_t st[2], ln[2];
    int k = it_cp_runs(Tl * m->cp_size, m->cp_size, m->cp_rank, m->cp_balance, lo, n, st, ln);
    it_tensor *parts[2];
    for (int i = 0; i < k; i++) parts[i] = it_slice(table, 0, st[i], st[i] + ln[i], 1);
    return it_cat(k, parts, 0);
}

it_tensor *it__cp_attend(it_model *m, it_tensor *q, it_tensor *k, it_tensor *v, bool keep) {
    if (!m->cp) return keep ? it__attention_low(q, k, v) : it_attention(q, k, v);
    return it__cp_attention(m->cp, m->cp_comm, m->cp_balance, q, k, v, keep && it__autocast_keep_low());
}
