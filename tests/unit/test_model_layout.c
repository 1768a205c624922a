/* The models' layout walk (it_model_param_*): InfiniTrain's names for GPT-2 (a tiny config),
 * LLaMA-3 and Mixtral (the committed fixtures), shapes, roles and tensor-parallel cuts, layer
 * and expert indices, views that tile the flat buffers exactly once, lookup by name and by
 * suffix; and the MoE-only entry points on models with and without experts. */
#include <stdint.h>

#include "infinitrain/autograd.h"
#include "infinitrain/models.h"
#include "it_test.h"

#define LFIX IT_SOURCE_DIR "/tests/fixtures/llama3/"
#define MFIX IT_SOURCE_DIR "/tests/fixtures/mixtral/"

/* Entries in flat order, each starting where the last ended, together num_params; each view
 * has the entry's shape, sits at its offset in the flat params (the gradient view in the flat
 * grads), and is a leaf whose gradient is that view (Mixtral's packed c_attn excepted). */
static void check_tiling(it_model *m) {
    const it_model_info *in = it_model_get_info(m);
    int n = it_model_param_count(m);
    int64_t off = 0;
    for (int i = 0; i < n; i++) {
        const it_model_param_info *p = it_model_param_at(m, i);
        CHECK_MSG(p->offset == off, "%s at %lld, expected %lld", p->name, (long long)p->offset, (long long)off);
        int64_t numel = p->ndim == 1 ? p->shape[0] : p->shape[0] * p->shape[1];
        CHECK_MSG(p->numel == numel && numel > 0, "%s: numel %lld", p->name, (long long)p->numel);
        CHECK(p->param && p->grad);
        if (!p->param || !p->grad) return;
        CHECK(it_tensor_ndim(p->param) == p->ndim && it_tensor_ndim(p->grad) == p->ndim);
        for (int d = 0; d < p->ndim; d++)
            CHECK(it_tensor_dim(p->param, d) == p->shape[d] && it_tensor_dim(p->grad, d) == p->shape[d]);
        CHECK(it_tensor_is_contiguous(p->param) && it_tensor_is_contiguous(p->grad));
        CHECK(it_tensor_shares_storage(p->param, it_model_params(m)) && it_tensor_offset(p->param) == p->offset);
        CHECK(it_tensor_shares_storage(p->grad, it_model_grads(m)) && it_tensor_offset(p->grad) == p->offset);
        bool alias = strcmp(in->family, "mixtral") == 0 && p->role == IT_PARAM_ROLE_ATTN_QKV;
        CHECK_MSG(alias ? !it_tensor_requires_grad(p->param)
                        : it_tensor_requires_grad(p->param) && it_tensor_grad(p->param) == p->grad,
                  "%s: leaf and gradient", p->name);
        CHECK(it_model_param_find(m, p->name) == p); /* names are unique */
        off += p->numel;
    }
    CHECK_MSG(off == in->num_params, "entries cover %lld of %lld", (long long)off, (long long)in->num_params);
    CHECK(it_model_param_at(m, -1) == NULL && it_model_param_at(m, n) == NULL);
}

/* The names of the entries with this layer index, in flat order, joined by spaces. */
static void layer_names(it_model *m, int layer, char *buf, size_t size) {
    buf[0] = '\0';
    size_t len = 0;
    for (int i = 0; i < it_model_param_count(m); i++) {
        const it_model_param_info *p = it_model_param_at(m, i);
        if (p->layer != layer) continue;
        len += (size_t)snprintf(buf + len, size - len, "%s%s", len ? " " : "", p->name);
        if (len >= size) return;
    }
}

static const it_model_param_info *find(it_model *m, const char *name) {
    const it_model_param_info *p = it_model_param_find(m, name);
    CHECK_MSG(p != NULL, "no parameter %s", name);
    return p;
}

/* Role, cut, bias flag, layer, expert and shape of one entry. */
static void check_entry(it_model *m, const char *name, it_param_role role, it_param_split split, bool is_bias,
                        int layer, int expert, int64_t rows, int64_t cols) {
    const it_model_param_info *p = find(m, name);
    if (!p) return;
    CHECK_MSG(p->role == role && p->split == split && p->is_bias == is_bias, "%s: role %d split %d bias %d", name,
              p->role, p->split, p->is_bias);
    CHECK_MSG(p->layer == layer && p->expert == expert, "%s: layer %d expert %d", name, p->layer, p->expert);
    CHECK_MSG(p->ndim == (cols ? 2 : 1) && p->shape[0] == rows && p->shape[1] == cols, "%s: shape (%lld, %lld)", name,
              (long long)p->shape[0], (long long)p->shape[1]);
    bool linear =
        role != IT_PARAM_ROLE_TOKEN_EMBEDDING && role != IT_PARAM_ROLE_POSITION_EMBEDDING && role != IT_PARAM_ROLE_NORM;
    CHECK(p->is_linear == linear);
    /* the module is the name less ".weight" / ".bias" */
    size_t ml = strlen(p->module);
    CHECK(strncmp(p->module, name, ml) == 0 && (strcmp(name + ml, ".weight") == 0 || strcmp(name + ml, ".bias") == 0));
}

/* Loss of one fixed batch of token ids (all below 32). */
static double batch_loss(it_model *m) {
    int32_t x[2 * 8], y[2 * 8];
    for (int i = 0; i < 16; i++) {
        x[i] = (i * 7 + 3) % 32;
        y[i] = (i * 5 + 1) % 32;
    }
    int64_t shape[2] = {2, 8};
    double v = NAN;
    it_scope_begin();
    it_tensor *tx = it_tensor_from_host(it_model_device(m), IT_DTYPE_I32, 2, shape, x, sizeof x);
    it_tensor *ty = it_tensor_from_host(it_model_device(m), IT_DTYPE_I32, 2, shape, y, sizeof y);
    it_tensor *loss = it_model_loss(m, tx, ty);
    CHECK(loss != NULL);
    if (loss) CHECK_OK(it_tensor_item(loss, NULL, &v));
    it_tape_clear();
    it_scope_end();
    return v;
}

/* A model without experts: no counts (nothing written) and the aux coefficient changes nothing. */
static void check_no_experts(it_model *m) {
    int64_t counts[4] = {-7, -7, -7, -7};
    CHECK(it_model_expert_tokens(m, counts, 4, true) == 0);
    CHECK(it_model_expert_tokens(m, counts, 4, false) == 0);
    double a = batch_loss(m);
    it_model_set_aux_loss_coeff(m, 0.5f);
    double b = batch_loss(m);
    CHECK(isfinite(a) && a == b);
    CHECK(it_model_expert_tokens(m, counts, 4, true) == 0);
    CHECK(counts[0] == -7 && counts[3] == -7);
}

/* llm.c's initialization, drawn element by element in flat order: splitmix64 uniforms,
 * Box-Muller normals (as src/models/model.c). */
static uint64_t splitmix64(uint64_t *s) {
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static double normal(uint64_t *s) {
    double u1 = (double)(splitmix64(s) >> 11) * (1.0 / 9007199254740992.0);
    double u2 = (double)(splitmix64(s) >> 11) * (1.0 / 9007199254740992.0);
    if (u1 < 1e-300) u1 = 1e-300;
    return sqrt(-2.0 * log(u1)) * cos(2.0 * M_PI * u2);
}

static void test_gpt2(void) {
    const int L = 3, C = 8, NH = 2, T = 16, V = 50, VP = 64;
    it_gpt2_config cfg = {
        .block_size = T, .vocab_size = V, .padded_vocab_size = VP, .n_layer = L, .n_head = NH, .n_embd = C};
    it_model *m = NULL;
    CHECK_OK(it_gpt2_new(&cfg, it_device_cpu(), 7, &m));
    if (!m) return;
    CHECK(it_model_param_count(m) == 2 + 12 * L + 2);
    check_tiling(m);

    char names[4096];
    layer_names(m, 1, names, sizeof names);
    CHECK_MSG(strcmp(names, "transformer.h.1.ln_1.weight transformer.h.1.ln_1.bias "
                            "transformer.h.1.attn.c_attn.weight transformer.h.1.attn.c_attn.bias "
                            "transformer.h.1.attn.c_proj.weight transformer.h.1.attn.c_proj.bias "
                            "transformer.h.1.ln_2.weight transformer.h.1.ln_2.bias "
                            "transformer.h.1.mlp.c_fc.weight transformer.h.1.mlp.c_fc.bias "
                            "transformer.h.1.mlp.c_proj.weight transformer.h.1.mlp.c_proj.bias") == 0,
              "layer 1: %s", names);
    layer_names(m, -1, names, sizeof names);
    CHECK_MSG(strcmp(names, "transformer.wte.weight transformer.wpe.weight transformer.ln_f.weight "
                            "transformer.ln_f.bias") == 0,
              "globals: %s", names);
    /* llm.c's order: each kind for all layers in turn */
    CHECK(strcmp(it_model_param_at(m, 2)->name, "transformer.h.0.ln_1.weight") == 0);
    CHECK(strcmp(it_model_param_at(m, 3)->name, "transformer.h.1.ln_1.weight") == 0);
    CHECK(strcmp(it_model_param_at(m, 2 + L)->name, "transformer.h.0.ln_1.bias") == 0);
    CHECK(strcmp(it_model_param_at(m, 2 + 12 * L)->name, "transformer.ln_f.weight") == 0);

    const it_param_split N = IT_PARAM_SPLIT_NONE, COL = IT_PARAM_SPLIT_COLUMN, ROW = IT_PARAM_SPLIT_ROW;
    check_entry(m, "transformer.wte.weight", IT_PARAM_ROLE_TOKEN_EMBEDDING, IT_PARAM_SPLIT_VOCAB, false, -1, -1, VP, C);
    check_entry(m, "transformer.wpe.weight", IT_PARAM_ROLE_POSITION_EMBEDDING, N, false, -1, -1, T, C);
    check_entry(m, "transformer.h.2.ln_1.weight", IT_PARAM_ROLE_NORM, N, false, 2, -1, C, 0);
    check_entry(m, "transformer.h.2.ln_1.bias", IT_PARAM_ROLE_NORM, N, true, 2, -1, C, 0);
    check_entry(m, "transformer.h.2.attn.c_attn.weight", IT_PARAM_ROLE_ATTN_QKV, COL, false, 2, -1, 3 * C, C);
    check_entry(m, "transformer.h.2.attn.c_attn.bias", IT_PARAM_ROLE_ATTN_QKV, COL, true, 2, -1, 3 * C, 0);
    check_entry(m, "transformer.h.2.attn.c_proj.weight", IT_PARAM_ROLE_ATTN_OUT, ROW, false, 2, -1, C, C);
    check_entry(m, "transformer.h.2.attn.c_proj.bias", IT_PARAM_ROLE_ATTN_OUT, N, true, 2, -1, C, 0);
    check_entry(m, "transformer.h.0.mlp.c_fc.weight", IT_PARAM_ROLE_MLP_UP, COL, false, 0, -1, 4 * C, C);
    check_entry(m, "transformer.h.0.mlp.c_fc.bias", IT_PARAM_ROLE_MLP_UP, COL, true, 0, -1, 4 * C, 0);
    check_entry(m, "transformer.h.0.mlp.c_proj.weight", IT_PARAM_ROLE_MLP_DOWN, ROW, false, 0, -1, C, 4 * C);
    check_entry(m, "transformer.h.0.mlp.c_proj.bias", IT_PARAM_ROLE_MLP_DOWN, N, true, 0, -1, C, 0);
    check_entry(m, "transformer.ln_f.bias", IT_PARAM_ROLE_NORM, N, true, -1, -1, C, 0);
    const it_model_param_info *qkv = find(m, "transformer.h.1.attn.c_attn.weight");
    if (qkv) CHECK(qkv->q_rows == C && qkv->kv_rows == C && qkv->head_dim == C / NH);
    const it_model_param_info *proj = find(m, "transformer.h.1.attn.c_proj.weight");
    if (proj) CHECK(proj->q_rows == 0 && proj->kv_rows == 0 && proj->head_dim == 0);
    /* tied: InfiniTrain's lm_head.weight is wte */
    CHECK(it_model_param_find(m, "lm_head.weight") == NULL);
    const it_model_param_info *wte = find(m, "transformer.wte.weight");
    if (wte) CHECK(wte->tied_name && strcmp(wte->tied_name, "lm_head.weight") == 0);
    if (proj) CHECK(proj->tied_name == NULL && strcmp(proj->module, "transformer.h.1.attn.c_proj") == 0);
    CHECK(it_model_param_find(m, "transformer.h.3.ln_1.weight") == NULL);
    CHECK(it_model_param_find(m, "h.1.ln_1.weight") == NULL);

    /* suffixes at '.' boundaries */
    const it_model_param_info *hits[8];
    CHECK(it_model_param_match(m, "attn.c_proj.weight", hits, 8) == L);
    for (int l = 0; l < L; l++) CHECK(hits[l]->layer == l && hits[l]->split == ROW);
    CHECK(it_model_param_match(m, "mlp.c_proj.weight", NULL, 0) == L);
    CHECK(it_model_param_match(m, "c_proj.weight", NULL, 0) == 2 * L);
    CHECK(it_model_param_match(m, "proj.weight", NULL, 0) == 0);
    CHECK(it_model_param_match(m, "bias", NULL, 0) == 6 * L + 1);
    CHECK(it_model_param_match(m, "transformer.wte.weight", hits, 1) == 1 && hits[0] == wte);
    CHECK(it_model_param_match(m, "", NULL, 0) == 0);
    CHECK(it_model_param_match(m, "c_attn.weight", hits, 2) == L); /* only 2 written, all counted */
    CHECK(hits[0]->layer == 0 && hits[1]->layer == 1 && hits[2]->layer == 2);
    CHECK(it_model_name_matches("transformer.h.0.attn.c_proj", "attn.c_proj"));
    CHECK(!it_model_name_matches("transformer.h.0.mlp.c_proj", "attn.c_proj"));
    CHECK(it_model_name_matches("transformer.h.0.mlp.c_proj", "c_proj"));
    CHECK(!it_model_name_matches("transformer.h.0.mlp.c_proj", "proj"));
    CHECK(it_model_name_matches("lm_head", "lm_head") && !it_model_name_matches("lm_head", "xlm_head"));
    CHECK(!it_model_name_matches("lm_head", "") && !it_model_name_matches("head", "lm_head"));

    /* pipeline stages select by layer: every layer has its 12 */
    for (int l = 0; l < L; l++) {
        int k = 0;
        for (int i = 0; i < it_model_param_count(m); i++) k += it_model_param_at(m, i)->layer == l;
        CHECK(k == 12);
    }

    /* it_gpt2_new initializes by name in flat order: layernorm weights 1, biases 0, the
     * residual projections (c_proj) N(0, 0.02/sqrt(2L)), the rest N(0, 0.02). */
    int64_t np = it_model_get_info(m)->num_params;
    float *w = malloc(sizeof(float) * (size_t)np);
    CHECK_OK(it_tensor_copy_to_host(it_model_params(m), w, sizeof(float) * (size_t)np));
    uint64_t rng = 7;
    int64_t bad = 0;
    for (int i = 0; i < it_model_param_count(m); i++) {
        const it_model_param_info *p = it_model_param_at(m, i);
        bool norm = strstr(p->name, ".ln_") != NULL, bias = it_model_name_matches(p->name, "bias");
        bool resid = it_model_name_matches(p->name, "c_proj.weight");
        for (int64_t j = 0; j < p->numel; j++) {
            float want = bias ? 0.0f : norm ? 1.0f : (float)((resid ? 0.02 / sqrt(2.0 * L) : 0.02) * normal(&rng));
            bad += memcmp(&w[p->offset + j], &want, sizeof want) != 0;
        }
    }
    CHECK_MSG(bad == 0, "%lld initial values differ", (long long)bad);
    free(w);

    check_no_experts(m);
    it_model_free(m);
}

static void test_llama3(void) {
    it_model *m = NULL;
    CHECK_OK(it_llama3_load(LFIX "tiny_llama3.bin", it_device_cpu(), &m));
    if (!m) return;
    const it_model_info *in = it_model_get_info(m);
    int L = in->n_layer;
    int64_t C = in->n_embd, V = in->vocab_size, F = in->ffn_hidden, hd = C / in->n_head, kvd = in->n_kv_head * hd;
    CHECK(in->n_kv_head < in->n_head); /* the fixture has grouped-query attention */
    CHECK(it_model_param_count(m) == 1 + 7 * L + 2);
    check_tiling(m);
    char names[4096];
    layer_names(m, L - 1, names, sizeof names);
    char want[4096];
    snprintf(want, sizeof want,
             "transformer.h.%d.ln_1.weight transformer.h.%d.attn.c_attn.weight transformer.h.%d.attn.c_proj.weight "
             "transformer.h.%d.ln_2.weight transformer.h.%d.mlp.c_fc.weight transformer.h.%d.mlp.c_fc2.weight "
             "transformer.h.%d.mlp.c_proj.weight",
             L - 1, L - 1, L - 1, L - 1, L - 1, L - 1, L - 1);
    CHECK_MSG(strcmp(names, want) == 0, "last layer: %s", names);
    layer_names(m, -1, names, sizeof names);
    CHECK_MSG(strcmp(names, "transformer.wte.weight transformer.ln_f.weight lm_head.weight") == 0, "globals: %s",
              names);
    const it_param_split N = IT_PARAM_SPLIT_NONE, COL = IT_PARAM_SPLIT_COLUMN, ROW = IT_PARAM_SPLIT_ROW;
    check_entry(m, "transformer.wte.weight", IT_PARAM_ROLE_TOKEN_EMBEDDING, IT_PARAM_SPLIT_VOCAB, false, -1, -1, V, C);
    check_entry(m, "transformer.h.0.ln_1.weight", IT_PARAM_ROLE_NORM, N, false, 0, -1, C, 0);
    check_entry(m, "transformer.h.0.attn.c_attn.weight", IT_PARAM_ROLE_ATTN_QKV, COL, false, 0, -1, C + 2 * kvd, C);
    check_entry(m, "transformer.h.0.attn.c_proj.weight", IT_PARAM_ROLE_ATTN_OUT, ROW, false, 0, -1, C, C);
    check_entry(m, "transformer.h.0.mlp.c_fc.weight", IT_PARAM_ROLE_MLP_UP, COL, false, 0, -1, F, C);
    check_entry(m, "transformer.h.0.mlp.c_fc2.weight", IT_PARAM_ROLE_MLP_GATE, COL, false, 0, -1, F, C);
    check_entry(m, "transformer.h.0.mlp.c_proj.weight", IT_PARAM_ROLE_MLP_DOWN, ROW, false, 0, -1, C, F);
    check_entry(m, "transformer.ln_f.weight", IT_PARAM_ROLE_NORM, N, false, -1, -1, C, 0);
    check_entry(m, "lm_head.weight", IT_PARAM_ROLE_LM_HEAD, COL, false, -1, -1, V, C);
    const it_model_param_info *qkv = find(m, "transformer.h.0.attn.c_attn.weight");
    if (qkv) CHECK(qkv->q_rows == C && qkv->kv_rows == kvd && qkv->head_dim == hd);
    /* c_fc2 entries come after all c_fc ones (kind by kind) */
    const it_model_param_info *fc_last = find(m, "transformer.h.1.mlp.c_fc.weight"),
                              *fc2_first = find(m, "transformer.h.0.mlp.c_fc2.weight");
    if (L == 2 && fc_last && fc2_first) CHECK(fc2_first->offset == fc_last->offset + fc_last->numel);
    CHECK(it_model_param_match(m, "attn.c_proj.weight", NULL, 0) == L);
    CHECK(it_model_param_match(m, "c_proj.weight", NULL, 0) == 2 * L);
    CHECK(it_model_param_match(m, "c_fc.weight", NULL, 0) == L);
    CHECK(it_model_param_match(m, "bias", NULL, 0) == 0);
    int col = 0, row = 0;
    for (int i = 0; i < it_model_param_count(m); i++) {
        col += it_model_param_at(m, i)->split == COL;
        row += it_model_param_at(m, i)->split == ROW;
    }
    CHECK(col == 3 * L + 1 && row == 2 * L);
    check_no_experts(m);
    it_model_free(m);
}

static void test_mixtral(void) {
    it_model *m = NULL;
    CHECK_OK(it_mixtral_load(MFIX "tiny_mixtral.bin", it_device_cpu(), &m));
    if (!m) return;
    const it_model_info *in = it_model_get_info(m);
    int L = in->n_layer, E = in->n_expert;
    int64_t C = in->n_embd, V = in->vocab_size, F = in->ffn_hidden, hd = C / in->n_head, kvd = in->n_kv_head * hd;
    CHECK(E == 4 && L == 2);
    CHECK(it_model_param_count(m) == 1 + L * (5 + 3 * E) + 2);
    check_tiling(m);
    char names[8192];
    layer_names(m, 1, names, sizeof names);
    CHECK_MSG(strcmp(names, "transformer.h.1.ln_1.weight transformer.h.1.attn.c_attn.weight "
                            "transformer.h.1.attn.c_proj.weight transformer.h.1.ln_2.weight "
                            "transformer.h.1.mlp.router.weight "
                            "transformer.h.1.mlp.experts.expert_0.c_fc2.weight "
                            "transformer.h.1.mlp.experts.expert_0.c_fc.weight "
                            "transformer.h.1.mlp.experts.expert_0.c_proj.weight "
                            "transformer.h.1.mlp.experts.expert_1.c_fc2.weight "
                            "transformer.h.1.mlp.experts.expert_1.c_fc.weight "
                            "transformer.h.1.mlp.experts.expert_1.c_proj.weight "
                            "transformer.h.1.mlp.experts.expert_2.c_fc2.weight "
                            "transformer.h.1.mlp.experts.expert_2.c_fc.weight "
                            "transformer.h.1.mlp.experts.expert_2.c_proj.weight "
                            "transformer.h.1.mlp.experts.expert_3.c_fc2.weight "
                            "transformer.h.1.mlp.experts.expert_3.c_fc.weight "
                            "transformer.h.1.mlp.experts.expert_3.c_proj.weight") == 0,
              "layer 1: %s", names);
    layer_names(m, -1, names, sizeof names);
    CHECK_MSG(strcmp(names, "transformer.wte.weight transformer.ln_f.weight lm_head.weight") == 0, "globals: %s",
              names);
    const it_param_split N = IT_PARAM_SPLIT_NONE, COL = IT_PARAM_SPLIT_COLUMN, ROW = IT_PARAM_SPLIT_ROW;
    check_entry(m, "transformer.h.0.attn.c_attn.weight", IT_PARAM_ROLE_ATTN_QKV, COL, false, 0, -1, C + 2 * kvd, C);
    check_entry(m, "transformer.h.0.attn.c_proj.weight", IT_PARAM_ROLE_ATTN_OUT, ROW, false, 0, -1, C, C);
    check_entry(m, "transformer.h.0.mlp.router.weight", IT_PARAM_ROLE_ROUTER, N, false, 0, -1, E, C);
    check_entry(m, "transformer.h.1.mlp.experts.expert_3.c_fc2.weight", IT_PARAM_ROLE_MLP_GATE, COL, false, 1, 3, F, C);
    check_entry(m, "transformer.h.1.mlp.experts.expert_3.c_fc.weight", IT_PARAM_ROLE_MLP_UP, COL, false, 1, 3, F, C);
    check_entry(m, "transformer.h.1.mlp.experts.expert_3.c_proj.weight", IT_PARAM_ROLE_MLP_DOWN, ROW, false, 1, 3, C,
                F);
    check_entry(m, "lm_head.weight", IT_PARAM_ROLE_LM_HEAD, COL, false, -1, -1, V, C);
    const it_model_param_info *qkv = find(m, "transformer.h.0.attn.c_attn.weight");
    if (qkv) CHECK(qkv->q_rows == C && qkv->kv_rows == kvd && qkv->head_dim == hd);
    CHECK(it_model_param_match(m, "mlp.c_proj.weight", NULL, 0) == 0);
    CHECK(it_model_param_match(m, "attn.c_proj.weight", NULL, 0) == L);
    CHECK(it_model_param_match(m, "c_proj.weight", NULL, 0) == L + L * E);
    CHECK(it_model_param_match(m, "c_fc.weight", NULL, 0) == L * E);
    CHECK(it_model_param_match(m, "expert_2.c_fc2.weight", NULL, 0) == L);
    CHECK(it_model_param_match(m, "router.weight", NULL, 0) == L);

    /* The packed c_attn view reads the file's Q|K|V rows: the flat params at its offset. */
    if (qkv) {
        int64_t np = in->num_params;
        float *flat = malloc(sizeof(float) * (size_t)np), *view = malloc(sizeof(float) * (size_t)qkv->numel);
        CHECK_OK(it_tensor_copy_to_host(it_model_params(m), flat, sizeof(float) * (size_t)np));
        CHECK_OK(it_tensor_copy_to_host(qkv->param, view, sizeof(float) * (size_t)qkv->numel));
        CHECK(memcmp(flat + qkv->offset, view, sizeof(float) * (size_t)qkv->numel) == 0);
        free(flat);
        free(view);
    }

    /* Expert counts: L*E entries, each layer routes every token of the batch to top-k experts. */
    int64_t counts[9];
    for (int i = 0; i < 9; i++) counts[i] = -7;
    CHECK(it_model_expert_tokens(m, counts, 8, true) == L * E);
    for (int i = 0; i < 8; i++) CHECK(counts[i] == 0);
    double a = batch_loss(m);
    CHECK(it_model_expert_tokens(m, counts, 3, false) == L * E); /* only 3 written */
    CHECK(counts[3] == 0 && counts[8] == -7);
    CHECK(it_model_expert_tokens(m, counts, 8, true) == L * E);
    for (int l = 0; l < L; l++) {
        int64_t sum = 0;
        for (int e = 0; e < E; e++) sum += counts[l * E + e];
        CHECK_MSG(sum == 16 * in->router_topk, "layer %d routed %lld", l, (long long)sum);
    }
    CHECK(counts[8] == -7);
    CHECK(it_model_expert_tokens(m, counts, 8, false) == L * E);
    for (int i = 0; i < 8; i++) CHECK(counts[i] == 0); /* the reset took */
    /* The load-balancing loss is added with its coefficient and gone at 0 again. */
    it_model_set_aux_loss_coeff(m, 0.25f);
    double b = batch_loss(m);
    it_model_set_aux_loss_coeff(m, 0.0f);
    double c = batch_loss(m);
    CHECK(isfinite(a) && b > a && c == a);
    it_model_free(m);
}

int main(void) {
    test_gpt2();
    test_llama3();
    test_mixtral();
    return it_test_report("test_model_layout");
}
