#!/usr/bin/python3
"""The PyTorch peer of bench_train's GPT-2 case: the same model, weights, data and step.

Loads the llm.c GPT-2 checkpoint that `bench_train --workdir DIR` left in DIR/gpt2_124m.bin
(the initial weights of its GPT-2 124M cases) and the token shard it trained on, then times
the same training step: zero_grad, forward, cross entropy, backward, AdamW update
(lr 1e-4, betas 0.9/0.999, eps 1e-8, weight decay 0.1 on every parameter), fp32, on the CPU;
with --dtype bfloat16 the forward and the loss run under CPU autocast to bf16 (oneDNN's bf16
matmuls), the parameters, gradients and AdamW fp32, as our --dtype bfloat16.

PyTorch gets its best showing (docs/performance.md lists what was tried):
  - torch.set_num_threads(THREADS) and OMP_NUM_THREADS as the caller sets it; the BLAS
    threads (OPENBLAS_NUM_THREADS) likewise, from the environment;
  - no anomaly detection, zero_grad(set_to_none=True), AdamW(foreach=True) (torch 1.13 has
    no fused CPU AdamW), torch.set_flush_denormal(True);
  - bench/run.sh also runs it with glibc malloc kept from mmap-ing and trimming
    (MALLOC_MMAP_MAX_=0 MALLOC_TRIM_THRESHOLD_=...): without that, the step's large
    temporaries are mapped and unmapped every step and half the CPU time goes to the kernel;
  - the loss over the whole padded vocabulary (llm.c's PyTorch reference does this; our
    step restricts the softmax to the valid 50257 columns, slightly more work for us).
Before timing, one no-grad forward computes the loss over the valid columns on batch 0:
it must equal bench_train's step-1 loss (same weights, same tokens), which checks that
both sides train the same model.

Prints one line "PEER key=value ..." for bench/run.sh, or "PEER_SKIPPED reason=..." when
torch cannot be imported (the benchmark then runs without a peer).
"""
import argparse
import os
import statistics
import sys
import time


def proc_mib(field):
    """A field of /proc/self/status in MiB ("VmRSS", "VmHWM"); -1 when unreadable."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1]) / 1024.0
    except OSError:
        pass
    return -1.0


def reset_peak_rss():
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--checkpoint", required=True, help="llm.c GPT-2 checkpoint (magic 20240326, version 3)")
    ap.add_argument("--shard", required=True, help="llm.c token shard (magic 20240520 or 20240801)")
    ap.add_argument("--case", default="gpt2_124m_t64")
    ap.add_argument("--B", type=int, default=4)
    ap.add_argument("--T", type=int, default=64)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--attention", choices=["manual", "sdpa"], default="manual",
                    help="manual: softmax(q k^T) v with a mask; sdpa: torch 1.13's _scaled_dot_product_attention")
    ap.add_argument("--mkldnn", choices=["on", "off"], default="on", help="torch.backends.mkldnn.enabled")
    ap.add_argument("--flush-denormal", choices=["on", "off"], default="on",
                    help="torch.set_flush_denormal: on keeps tiny Adam moments from slowing the step down")
    ap.add_argument("--tag", default="", help="a label for the PEER line (the settings under test)")
    ap.add_argument("--dtype", choices=["float32", "bfloat16"], default="float32",
                    help="bfloat16: forward and loss under torch.autocast('cpu', dtype=torch.bfloat16), as our "
                         "--dtype bfloat16 (weights, grads and AdamW stay fp32)")
    args = ap.parse_args()

    try:
        import numpy as np
        import torch
        import torch.nn as nn
        import torch.nn.functional as F
    except Exception as e:  # noqa: BLE001 - any import failure means: no peer here
        print(f"PEER_SKIPPED reason=import torch/numpy failed ({type(e).__name__}: {e}) python={sys.executable}")
        return 0

    torch.set_num_threads(args.threads)
    torch.backends.mkldnn.enabled = args.mkldnn == "on"
    torch.set_flush_denormal(args.flush_denormal == "on")
    torch.autograd.set_detect_anomaly(False)
    torch.manual_seed(0)
    # Process memory, as bench_train measures ours: RSS before the model exists (libraries
    # loaded), peak RSS through the steps (Linux clear_refs 5 resets the peak to now).
    hwm_reset = reset_peak_rss()
    rss_base = proc_mib("VmRSS")

    # ---- checkpoint: 256 int32 header, then fp32 tensors in llm.c order
    header = np.fromfile(args.checkpoint, dtype=np.int32, count=256)
    if header[0] != 20240326 or header[1] != 3:
        print(f"PEER_SKIPPED reason={args.checkpoint}: header magic/version {header[0]}/{header[1]}, "
              "expected 20240326/3")
        return 1
    maxT, V, L, NH, C, Vp = (int(x) for x in header[2:8])
    flat = np.fromfile(args.checkpoint, dtype=np.float32, offset=1024)
    shapes = [("wte", (Vp, C)), ("wpe", (maxT, C)), ("ln1w", (L, C)), ("ln1b", (L, C)),
              ("qkvw", (L, 3 * C, C)), ("qkvb", (L, 3 * C)), ("projw", (L, C, C)), ("projb", (L, C)),
              ("ln2w", (L, C)), ("ln2b", (L, C)), ("fcw", (L, 4 * C, C)), ("fcb", (L, 4 * C)),
              ("fcprojw", (L, C, 4 * C)), ("fcprojb", (L, C)), ("lnfw", (C,)), ("lnfb", (C,))]
    w, off = {}, 0
    for name, shape in shapes:
        n = int(np.prod(shape))
        w[name] = torch.from_numpy(flat[off:off + n].reshape(shape).copy())
        off += n
    if off != flat.size:
        print(f"PEER_SKIPPED reason={args.checkpoint}: {flat.size} floats, the header implies {off}")
        return 1

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln_1 = nn.LayerNorm(C, eps=1e-5)
            self.c_attn = nn.Linear(C, 3 * C)
            self.c_proj = nn.Linear(C, C)
            self.ln_2 = nn.LayerNorm(C, eps=1e-5)
            self.c_fc = nn.Linear(C, 4 * C)
            self.c_fcproj = nn.Linear(4 * C, C)

        def attn(self, x, mask):
            Bb, Tt, _ = x.shape
            q, k, v = self.c_attn(x).split(C, dim=2)
            q = q.view(Bb, Tt, NH, C // NH).transpose(1, 2)
            k = k.view(Bb, Tt, NH, C // NH).transpose(1, 2)
            v = v.view(Bb, Tt, NH, C // NH).transpose(1, 2)
            if args.attention == "sdpa":
                y = F._scaled_dot_product_attention(q, k, v, is_causal=True)[0]
            else:
                att = (q @ k.transpose(-2, -1)) * (1.0 / (C // NH) ** 0.5)
                att = att.masked_fill(mask[:Tt, :Tt], float("-inf")).softmax(dim=-1)
                y = att @ v
            return self.c_proj(y.transpose(1, 2).contiguous().view(Bb, Tt, C))

        def forward(self, x, mask):
            x = x + self.attn(self.ln_1(x), mask)
            return x + self.c_fcproj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))

    class GPT(nn.Module):
        def __init__(self):
            super().__init__()
            self.wte = nn.Embedding(Vp, C)
            self.wpe = nn.Embedding(maxT, C)
            self.h = nn.ModuleList(Block() for _ in range(L))
            self.ln_f = nn.LayerNorm(C, eps=1e-5)
            self.register_buffer("mask", torch.ones(maxT, maxT, dtype=torch.bool).triu(1), persistent=False)

        def forward(self, idx):
            x = self.wte(idx) + self.wpe(torch.arange(idx.shape[1]))
            for blk in self.h:
                x = blk(x, self.mask)
            return F.linear(self.ln_f(x), self.wte.weight)  # lm_head tied to wte, as GPT-2

    model = GPT()
    with torch.no_grad():
        model.wte.weight.copy_(w["wte"])
        model.wpe.weight.copy_(w["wpe"])
        model.ln_f.weight.copy_(w["lnfw"])
        model.ln_f.bias.copy_(w["lnfb"])
        for l, blk in enumerate(model.h):
            for mod, wn, bn in [(blk.ln_1, "ln1w", "ln1b"), (blk.c_attn, "qkvw", "qkvb"), (blk.c_proj, "projw", "projb"),
                                (blk.ln_2, "ln2w", "ln2b"), (blk.c_fc, "fcw", "fcb"),
                                (blk.c_fcproj, "fcprojw", "fcprojb")]:
                mod.weight.copy_(w[wn][l])
                mod.bias.copy_(w[bn][l])
    del w, flat

    # ---- data: InfiniTrain's loader, batch b = tokens[b*B*T, (b+1)*B*T (+1 for targets))
    sh = np.fromfile(args.shard, dtype=np.int32, count=256)
    tdt = {20240520: np.uint16, 20240801: np.uint32}.get(int(sh[0]))
    if tdt is None:
        print(f"PEER_SKIPPED reason={args.shard}: magic {sh[0]} is not a token shard")
        return 1
    tokens = np.fromfile(args.shard, dtype=tdt, offset=1024).astype(np.int64)
    B, T = args.B, args.T
    nbatches = (len(tokens) // T - 1) // B

    def batch(i):
        b = i % nbatches
        chunk = torch.from_numpy(tokens[b * B * T: (b + 1) * B * T + 1])
        return chunk[:-1].view(B, T), chunk[1:].view(B, T)

    with torch.no_grad():  # the check: loss over the valid vocabulary on batch 0
        x, y = batch(0)
        check = F.cross_entropy(model(x)[:, :, :V].reshape(-1, V), y.reshape(-1)).item()

    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.1,
                            foreach=True)
    times, cpu_sum = [], 0.0
    for i in range(args.warmup + args.steps):
        x, y = batch(i)
        t0, c0 = time.perf_counter(), time.process_time()
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=args.dtype == "bfloat16"):
            logits = model(x)
            loss = F.cross_entropy(logits.view(-1, Vp), y.view(-1))
        loss.backward()
        opt.step()
        lv = loss.item()
        ms, cpu = (time.perf_counter() - t0) * 1e3, (time.process_time() - c0) * 1e3
        times.append(ms)
        if i >= args.warmup:
            cpu_sum += cpu
        print(f"  peer step {i + 1}{' (warm-up)' if i < args.warmup else '          '} {ms:10.1f} ms "
              f"(CPU {100 * cpu / (args.threads * ms):3.0f}%) | loss {lv:.4f}", flush=True)
    meas = times[args.warmup:]
    med = statistics.median(meas)
    env = " ".join(f"{k}={os.environ.get(k, 'unset')}" for k in
                   ("OMP_NUM_THREADS", "OMP_WAIT_POLICY", "OPENBLAS_NUM_THREADS", "OPENBLAS_CORETYPE"))
    rss_peak = proc_mib("VmHWM") if hwm_reset else -1
    print(f"PEER case={args.case} tag={args.tag or 'default'} torch={torch.__version__} threads={torch.get_num_threads()} "
          f"mkldnn={int(torch.backends.mkldnn.enabled)} flush_denormal={args.flush_denormal} attention={args.attention} "
          f"B={B} T={T} dtype={args.dtype} "
          f"ms_median={med:.2f} ms_min={min(meas):.2f} ms_max={max(meas):.2f} tok_s={B * T / (med / 1e3):.2f} "
          f"cpu_share_pct={100 * cpu_sum / (args.threads * sum(meas)):.0f} "
          f"loss_check={check:.6f} rss_base_mb={rss_base:.0f} rss_peak_mb={rss_peak:.0f} {env}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
