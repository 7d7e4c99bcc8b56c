#!/usr/bin/python3
"""The PyTorch peer of examples/07_train_gpt.cpp: the same GPT, data, hyper-parameters and schedule.

Byte-level GPT (vocabulary 256) with learned positions, pre-norm blocks (separate Q, K, V, O linears
with bias, causal attention, MLP with exact GeLU), a final layer norm and a head tied to the token
embedding; AdamW, LAMB, LARS or SGD (--optimizer, as the C++ example's) with weight decay on the blocks'
linear weights only, linear warm-up then cosine to a tenth, global-norm clipping. Data: every regular file
of the corpus folder (no links, no .dat), in path order, the last tenth held out.

The initial weights and the samples are the C++ example's, element for element: both come from the
same counter-based hash (include/shardwise/core/counter_random.hpp) under the same seeds, so the two
programs start from one model and see the same bytes at every step; what differs is the arithmetic.
Prints progress lines and writes --json like the C++ example.

The optimizers take the C++ example's hyper-parameters (its hyper_parameters()): AdamW is torch.optim.AdamW
and SGD torch.optim.SGD (no momentum: the gradient plus λ w, times the rate), both of which compute what
shardwise's do. torch has neither LAMB nor LARS, so the classes below write them out from their papers, taking
the choices a paper leaves open as shardwise's headers (include/shardwise/optim/lamb.hpp, lars.hpp) document
them.

    /usr/bin/python3 bench/train_gpt_torch.py --steps 600 --threads 2 --json torch.json
"""
import argparse
import json
import math
import os
import time

from pytorch_peer import hashed_uniform, uniform_at  # first: it sets the thread counts

import numpy as np  # noqa: E402
import torch  # noqa: E402 (after the thread counts are set)
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402
import torch.utils.checkpoint  # noqa: E402


def read_corpus(path):
    if os.path.isfile(path):
        files = [path]
    else:
        files = sorted(
            os.path.join(folder, name)
            for folder, _, names in os.walk(path)
            for name in names
            if not name.endswith(".dat") and not os.path.islink(os.path.join(folder, name))
            and os.path.isfile(os.path.join(folder, name)))
    data = b"".join(open(name, "rb").read() for name in files)
    split = len(data) - int(len(data) * 0.1)
    return torch.frombuffer(bytearray(data), dtype=torch.uint8).long(), split


def core_attention(q, k, v):
    """softmax(q kᵀ / √d, causal) v per sample and head: what Megatron's selective recompute runs again."""
    length = q.shape[-2]
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    mask = torch.ones(length, length, dtype=torch.bool).tril()
    scores = scores.masked_fill(~mask, float("-inf"))
    return F.softmax(scores, dim=-1) @ v


class Block(nn.Module):
    def __init__(self, hidden, heads, recompute_attention=False):
        super().__init__()
        self.heads = heads
        self.recompute_attention = recompute_attention  # the probabilities recomputed in backward (Megatron's selective)
        self.norm_1 = nn.LayerNorm(hidden, eps=1e-5)
        self.query, self.key, self.value, self.output = (nn.Linear(hidden, hidden) for _ in range(4))
        self.norm_2 = nn.LayerNorm(hidden, eps=1e-5)
        self.expand = nn.Linear(hidden, 4 * hidden)
        self.contract = nn.Linear(4 * hidden, hidden)

    def attention(self, x):
        batch, length, hidden = x.shape
        split = lambda t: t.view(batch, length, self.heads, hidden // self.heads).transpose(1, 2)
        q, k, v = split(self.query(x)), split(self.key(x)), split(self.value(x))
        if self.recompute_attention and torch.is_grad_enabled():
            out = torch.utils.checkpoint.checkpoint(core_attention, q, k, v, use_reentrant=False)
        else:
            out = core_attention(q, k, v)
        return self.output(out.transpose(1, 2).reshape(batch, length, hidden))

    def forward(self, x):
        x = x + self.attention(self.norm_1(x))
        return x + self.contract(F.gelu(self.expand(self.norm_2(x))))


class GPT(nn.Module):
    def __init__(self, vocabulary, context, hidden, heads, layers, recompute="none"):
        super().__init__()
        self.recompute_blocks = recompute == "block"  # each block's activations recomputed in backward
        self.token = nn.Embedding(vocabulary, hidden)
        self.position = nn.Embedding(context, hidden)
        self.blocks = nn.ModuleList(Block(hidden, heads, recompute == "attention") for _ in range(layers))
        self.final_norm = nn.LayerNorm(hidden, eps=1e-5)

    @torch.no_grad()
    def initialize(self, seed):
        """model::gpt's initial weights for `seed`: the same keys (seed, row, column) and the same seeds per
        layer. A shardwise linear's weight is inputs x outputs, the transpose of torch's."""
        bound = 0.02 * math.sqrt(3)
        self.token.weight.copy_(hashed_uniform(seed * 1000, *self.token.weight.shape, bound))
        self.position.weight.copy_(hashed_uniform(seed * 1000 + 1, *self.position.weight.shape, bound))
        for index, block in enumerate(self.blocks):
            block_seed = seed * 1000 + 1 + index
            attention, mlp = block_seed * 16, block_seed * 16 + 8
            linears = [(block.query, attention + 1), (block.key, attention + 2), (block.value, attention + 3),
                       (block.output, attention + 4), (block.expand, mlp + 1), (block.contract, mlp + 2)]
            for linear, linear_seed in linears:
                weight = hashed_uniform(linear_seed, linear.in_features, linear.out_features,
                                        1 / math.sqrt(linear.in_features))
                linear.weight.copy_(weight.t())
                linear.bias.zero_()

    def forward(self, tokens, targets):
        x = self.token(tokens) + self.position(torch.arange(tokens.shape[1]))
        for block in self.blocks:
            if self.recompute_blocks and torch.is_grad_enabled():
                x = torch.utils.checkpoint.checkpoint(block, x, use_reentrant=False)
            else:
                x = block(x)
        logits = self.final_norm(x) @ self.token.weight.t()
        return F.cross_entropy(logits.view(-1, logits.shape[-1]), targets.reshape(-1))


def global_norm(tensor):
    """‖tensor‖ over all its elements, summed in double as shardwise sums its statistics."""
    return tensor.double().square().sum().sqrt().item()


class LAMB(torch.optim.Optimizer):
    """LAMB, Algorithm 2 of You et al., "Large Batch Optimization for Deep Learning" (arXiv 1904.00962), with
    φ the identity, a layer being one tensor:
        m ← β1 m + (1 − β1) g;  v ← β2 v + (1 − β2) g²;  m̂ = m / (1 − β1^t);  v̂ = v / (1 − β2^t)
        r = m̂ / (√v̂ + ε);  x ← x − η (‖x‖ / ‖r + λ x‖) (r + λ x)
    As the algorithm gives it, with its bias corrections and ε outside the square root (shardwise's lamb.hpp
    likewise). The paper leaves the ratio open when a norm is zero (φ(0) = 0 would never move a tensor that
    starts at zero, the biases); shardwise takes 1 when either norm is zero, and so does this."""

    def __init__(self, params, lr, betas, eps, weight_decay=0.0):
        super().__init__(params, dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay))

    @torch.no_grad()
    def step(self):
        for group in self.param_groups:
            beta1, beta2 = group["betas"]
            for x in group["params"]:
                state = self.state[x]
                if not state:
                    state["step"], state["m"], state["v"] = 0, torch.zeros_like(x), torch.zeros_like(x)
                state["step"] += 1
                t, m, v, g = state["step"], state["m"], state["v"], x.grad
                m.mul_(beta1).add_(g, alpha=1 - beta1)
                v.mul_(beta2).addcmul_(g, g, value=1 - beta2)
                r = (m / (1 - beta1 ** t)) / ((v / (1 - beta2 ** t)).sqrt() + group["eps"])
                update = r + group["weight_decay"] * x
                x_norm, update_norm = global_norm(x), global_norm(update)
                trust_ratio = x_norm / update_norm if x_norm > 0 and update_norm > 0 else 1.0
                x.sub_(update, alpha=group["lr"] * trust_ratio)


class LARS(torch.optim.Optimizer):
    """LARS, Algorithm 1 of You, Gitman, Ginsburg, "Large Batch Training of Convolutional Networks" (arXiv
    1708.03888), a layer being one tensor: the local learning rate λ = η ‖w‖ / (‖g‖ + β ‖w‖) (the weight decay
    β enters as the norm of the weights, not inside the gradient's norm), then momentum on the decayed gradient
        v ← m v + γ λ (g + β w);  w ← w − v.
    ε is added to the local rate's denominator (0 in the C++ example, as in the paper). The paper leaves the
    rate open when a norm is zero (λ = 0 would never move a tensor that starts at zero, the biases); shardwise
    takes λ = 1 when either norm is zero, and so does this."""

    def __init__(self, params, lr, momentum, trust_coefficient, eps, weight_decay=0.0):
        super().__init__(params, dict(lr=lr, momentum=momentum, weight_decay=weight_decay,
                                      trust_coefficient=trust_coefficient, eps=eps))

    @torch.no_grad()
    def step(self):
        for group in self.param_groups:
            decay = group["weight_decay"]
            for w in group["params"]:
                state = self.state[w]
                if not state:
                    state["velocity"] = torch.zeros_like(w)
                g, velocity = w.grad, state["velocity"]
                w_norm, g_norm = global_norm(w), global_norm(g)
                local_rate = (group["trust_coefficient"] * w_norm / (g_norm + decay * w_norm + group["eps"])
                              if w_norm > 0 and g_norm > 0 else 1.0)
                velocity.mul_(group["momentum"]).add_(g + decay * w, alpha=group["lr"] * local_rate)
                w.sub_(velocity)


def optimizer_for(name, decay, rest, args):
    """The C++ example's optimizer `name` with its hyper-parameters (07's hyper_parameters(), the defaults of
    the shardwise optimizer where it sets none): weight decay on `decay`, none on `rest`."""
    groups = [{"params": decay, "weight_decay": args.weight_decay}, {"params": rest, "weight_decay": 0.0}]
    if name == "adamw":
        return torch.optim.AdamW(groups, lr=args.lr, betas=(0.9, 0.95), eps=1e-8)
    if name == "lamb":
        return LAMB(groups, lr=args.lr, betas=(0.9, 0.95), eps=1e-6)
    if name == "lars":  # shardwise::optim::lars's defaults: momentum 0.9, η 0.001, ε 0
        return LARS(groups, lr=args.lr, momentum=0.9, trust_coefficient=0.001, eps=0.0)
    return torch.optim.SGD(groups, lr=args.lr)  # no momentum: w ← w − lr (g + λ w), as shardwise::optim::sgd


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    for name, default in [("steps", 2500), ("batch", 8), ("context", 128), ("hidden", 128), ("heads", 4), ("layers", 4),
                          ("seed", 1), ("eval_every", 250), ("eval_batches", 8), ("threads", 2), ("warmup", 30)]:
        parser.add_argument("--" + name.replace("_", "-"), type=int, default=default)
    parser.add_argument("--lr", type=float,
                        help="the peak rate; by default the optimizer's, as the C++ example's: AdamW 3e-3, LAMB "
                        "1e-2, LARS 10, SGD 0.2")
    parser.add_argument("--weight-decay", type=float, default=0.1)
    parser.add_argument("--clip", type=float, default=1.0)
    parser.add_argument("--optimizer", choices=["adamw", "lamb", "lars", "sgd"], default="adamw",
                        help="the update, with the C++ example's hyper-parameters: AdamW and SGD are torch's, LAMB "
                        "and LARS written out from their papers")
    parser.add_argument("--data", default="/usr/share/games/fortunes")
    parser.add_argument("--json")
    parser.add_argument("--recompute", choices=["none", "attention", "block"], default="none",
                        help="what backward recomputes (torch.utils.checkpoint): attention's probabilities, as "
                        "Megatron's selective recompute, or each block's activations")
    args = parser.parse_args()
    if args.lr is None:
        args.lr = {"adamw": 3e-3, "lamb": 1e-2, "lars": 10.0, "sgd": 0.2}[args.optimizer]
    torch.set_num_threads(args.threads)
    torch.set_num_interop_threads(1)

    data, split = read_corpus(args.data)
    train, validation = data[:split], data[split:]
    model = GPT(256, args.context, args.hidden, args.heads, args.layers, args.recompute)
    model.initialize(args.seed)
    params = sum(p.numel() for p in model.parameters())
    decay = [p for name, p in model.named_parameters() if name.startswith("blocks.") and name.endswith(".weight")
             and "norm" not in name]
    rest = [p for name, p in model.named_parameters() if not any(p is d for d in decay)]
    optimizer = optimizer_for(args.optimizer, decay, rest, args)

    def rate(step):  # steps from 1, as the C++ schedule
        if step <= args.warmup:
            return args.lr * step / args.warmup
        progress = min(1.0, (step - args.warmup) / max(1, args.steps - args.warmup))
        return args.lr / 10 + 0.5 * (1 + math.cos(math.pi * progress)) * (args.lr - args.lr / 10)

    def batch(source, seed, key):
        """data::byte_corpus's batch `key`: sample s starts at uniform_at(seed, key, s) of the offsets."""
        offsets = (uniform_at(seed, key, np.arange(args.batch)) * (len(source) - args.context)).astype(np.int64)
        tokens = torch.stack([source[o:o + args.context] for o in offsets])
        targets = torch.stack([source[o + 1:o + args.context + 1] for o in offsets])
        return tokens, targets

    validation_seed = 0x5EED5EED
    evaluation = [batch(validation, validation_seed, b) for b in range(args.eval_batches)]

    @torch.no_grad()
    def validation_loss():
        model.eval()
        loss = sum(model(*batch).item() for batch in evaluation) / len(evaluation)
        model.train()
        return loss

    print(f"torch {torch.__version__}: GPT of {params / 1e6:.2f}M parameters, {args.threads} threads; "
          f"{len(train)} training bytes, {len(validation)} validation bytes", flush=True)
    train_curve, val_curve, step_seconds, seconds = [], [], [], 0.0
    tokens_per_step = args.batch * args.context
    for step in range(1, args.steps + 1):
        start = time.perf_counter()
        for group in optimizer.param_groups:
            group["lr"] = rate(step)
        tokens, targets = batch(train, args.seed, step)
        loss = model(tokens, targets)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        norm = torch.nn.utils.clip_grad_norm_(model.parameters(), args.clip)
        optimizer.step()
        step_seconds.append(time.perf_counter() - start)
        seconds += step_seconds[-1]
        train_curve.append([step, step * tokens_per_step, loss.item()])
        line = f"step {step:5d}/{args.steps}  loss {loss.item():.4f}"
        if step % args.eval_every == 0 or step == args.steps:
            val_curve.append([step, step * tokens_per_step, validation_loss()])
            line += f"  val {val_curve[-1][2]:.4f}"
        if step % 10 == 0 or step == 1 or step == args.steps:
            print(f"{line}  grad norm {norm:.3f}  {step * tokens_per_step / seconds:7.0f} tokens/s", flush=True)

    result = {"params": params, "steps": args.steps, "tokens": args.steps * tokens_per_step,
              "tokens_per_s": args.steps * tokens_per_step / seconds, "final_train_loss": train_curve[-1][2],
              "final_val_loss": val_curve[-1][2], "val_curve": val_curve, "train_curve": train_curve,
              "wall_s": seconds, "step_seconds": step_seconds, "threads": args.threads}
    print(f"final: validation loss {result['final_val_loss']:.4f}, {result['tokens_per_s']:.0f} tokens/s")
    if args.json:
        with open(args.json, "w") as out:
            json.dump(result, out)


if __name__ == "__main__":
    main()
