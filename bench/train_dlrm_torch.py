#!/usr/bin/python3
"""The PyTorch peer of examples/09_train_dlrm.cpp: the same DLRM, click data, hyper-parameters and updates.

DLRM (Naumov et al.): a bottom MLP (dense features -> hidden -> dimension, ReLU after each layer), an
embedding bag per table (sum or mean), the pairwise dot interaction [x, F_i . F_j for i > j] of
F = [x; e_1; ...; e_T] in DLRM's order (1,0), (2,0), (2,1), (3,0), ..., a top MLP (-> hidden -> one logit,
ReLU between) and binary cross-entropy, the mean over the global batch. The MLPs are updated with Adam
(torch.optim.Adam: betas 0.9 and 0.999, epsilon 1e-8 added to the bias-corrected root, no weight decay),
the tables with row-wise Adagrad written out as shardwise's (include/shardwise/optim/rowwise_adagrad.hpp):
each row the batch looked up, from its gradient summed over its lookups, G += the mean over the row of
the squared gradient, w -= lr * g / (sqrt(G) + 1e-8); the other rows and their G stay as they were.

The initial weights, the tables and the samples are the C++ example's, element for element: the weights
come from the same counter-based hash (include/shardwise/core/counter_random.hpp) under the same seeds,
and data::dlrm_generator (include/shardwise/data/dlrm_generator.hpp) is written again here in numpy, so
the two programs start from one model and train on the same samples; what differs is the arithmetic.

The whole global batch runs here at once, every table whole. shardwise's ranks, its paths and its tables
cut by rows change nothing but the rounding: a row-wise table's pieces each pool the lookups in their
rows, a mean dividing by the whole bag's length, and the pieces' sums are added, which is the whole
table's pooling; so --row-wise is taken, as the example takes it, and changes nothing. As in shardwise,
the mean of an empty bag is zero (09's bags hold 1 to --bag-length lookups). Prints progress lines like
the C++ example's (samples/s over the training steps alone, the batches made outside them) and writes
--json as it does, with the per-step training loss ("train_curve") and the held-out losses
("held_out_curve").

    /usr/bin/python3 bench/train_dlrm_torch.py --steps 200 --threads 2 --json torch.json
"""
import argparse
import itertools
import json
import math
import time

from pytorch_peer import hashed_uniform, splitmix64, uniform_at  # first: it sets the thread counts

import numpy as np  # noqa: E402
import torch  # noqa: E402 (after the thread counts are set)
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

STREAMS = {"training": 1, "held_out": 2}


class ClickData:
    """data::dlrm_generator as 09 sets it up (bags of 1 to max_bag_length lookups), value for value: each value
    a hash of (seed, stream, sample, what, which); labels drawn from a planted model."""

    def __init__(self, seed, dense_features, tables, rows, max_bag_length, zipf_exponent=1.05, signal=4.0):
        self.seed, self.dense_features, self.tables, self.rows = seed, dense_features, tables, rows
        self.max_bag_length, self.signal = max_bag_length, signal
        # The Zipf distribution's CDF summed in order in double, with C's pow (numpy's may round otherwise).
        cumulative = np.fromiter(itertools.accumulate(math.pow(k + 1, -zipf_exponent) for k in range(rows)),
                                 dtype=np.float64, count=rows)
        self.cdf = cumulative / cumulative[-1]
        planted = splitmix64(np.uint64(seed)) ^ np.uint64(0x706C616E74)
        self.dense_weights = 2 * uniform_at(planted, 0, np.arange(dense_features)) - 1
        self.row_scores = 2 * uniform_at(planted, 1 + np.arange(tables)[:, None], np.arange(rows)[None, :]) - 1

    def batch(self, stream, first_sample, size):
        """Samples [first_sample, first_sample + size) of a stream: dense features, labels, and per table the
        bags as offsets (size + 1) and indices."""
        key = splitmix64(np.uint64(self.seed) ^ splitmix64(np.uint64(STREAMS[stream])))
        samples = splitmix64(key ^ np.arange(first_sample, first_sample + size, dtype=np.uint64))[:, None]
        dense = uniform_at(samples, 0, np.arange(self.dense_features)[None, :])
        z = np.zeros(size)
        for f in range(self.dense_features):  # in C++'s order, each step rounded as there
            z = z + self.dense_weights[f] * (dense[:, f] - 0.5) * math.sqrt(12.0)
        bags = []
        for t in range(self.tables):
            lengths = 1 + (uniform_at(samples[:, 0], 1 + t, -1) * self.max_bag_length).astype(np.int64)
            draws = uniform_at(samples, 1 + t, np.arange(self.max_bag_length)[None, :])
            ranks = np.searchsorted(self.cdf[:-1], draws, side="right").astype(np.uint64)  # std::upper_bound's
            rows = (ranks * np.uint64(2654435761) % np.uint64(self.rows)).astype(np.int64)
            looked_up = np.arange(self.max_bag_length)[None, :] < lengths[:, None]
            scores = np.where(looked_up, self.row_scores[t][rows], 0.0)
            total = np.zeros(size)
            for i in range(self.max_bag_length):
                total = total + scores[:, i]
            z = z + total / lengths
            bags.append((np.concatenate([[0], np.cumsum(lengths)]), rows[looked_up]))
        z = z * (self.signal / math.sqrt((1.0 + self.tables) / 3.0))
        probabilities = np.array([1 / (1 + math.exp(-v)) for v in z])  # C's exp, as the label's threshold
        labels = uniform_at(samples[:, 0], -1, -1) < probabilities
        return (torch.from_numpy(dense.astype(np.float32)), torch.from_numpy(labels.astype(np.float32)),
                [(torch.from_numpy(offsets), torch.from_numpy(indices)) for offsets, indices in bags])


class DLRM(nn.Module):
    def __init__(self, dense_features, hidden, dimension, tables, rows, pooling):
        super().__init__()
        self.pooling = pooling
        pairs = (tables + 1) * tables // 2
        self.bottom = nn.ModuleList([nn.Linear(dense_features, hidden), nn.Linear(hidden, dimension)])
        self.tables = nn.ParameterList(nn.Parameter(torch.empty(rows, dimension)) for _ in range(tables))
        self.top = nn.ModuleList([nn.Linear(dimension + pairs, hidden), nn.Linear(hidden, 1)])

    @torch.no_grad()
    def initialize(self, seed):
        """model::dlrm's initial weights for `seed`: the MLPs' layers seeded seed * 1000 + l (bottom) and
        seed * 1000 + 200 + l (top), uniform in +-1/sqrt(inputs), biases zero (a shardwise linear's weight is
        inputs x outputs, the transpose of torch's); table t's rows uniform in +-sqrt(1/rows) keyed by
        splitmix64(seed * 1000 + 100 + t) (fused::initial_embedding)."""
        for layers, first_seed in ((self.bottom, seed * 1000), (self.top, seed * 1000 + 200)):
            for index, linear in enumerate(layers):
                weight = hashed_uniform(first_seed + index, linear.in_features, linear.out_features,
                                        1 / math.sqrt(linear.in_features))
                linear.weight.copy_(weight.t())
                linear.bias.zero_()
        for index, table in enumerate(self.tables):
            rows, columns = table.shape
            u = uniform_at(splitmix64(np.uint64(seed * 1000 + 100 + index)), np.arange(rows)[:, None],
                           np.arange(columns)[None, :])
            table.copy_(torch.from_numpy(((2 * u - 1) * math.sqrt(1.0 / rows)).astype(np.float32)))

    def forward(self, dense, bags):
        """The logits of a batch."""
        x = dense
        for linear in self.bottom:
            x = F.relu(linear(x))
        pooled = [F.embedding_bag(indices, table, offsets, mode=self.pooling, sparse=True, include_last_offset=True)
                  for table, (offsets, indices) in zip(self.tables, bags)]
        features = torch.stack([x] + pooled, dim=1)
        i, j = torch.tril_indices(len(pooled) + 1, len(pooled) + 1, offset=-1)  # (1,0), (2,0), (2,1), ...
        y = torch.cat([x, (features @ features.transpose(1, 2))[:, i, j]], dim=1)
        for index, linear in enumerate(self.top):
            y = linear(y)
            if index + 1 < len(self.top):
                y = F.relu(y)
        return y.squeeze(1)


@torch.no_grad()
def rowwise_adagrad(tables, accumulators, learning_rate, epsilon=1e-8):
    """optim::rowwise_adagrad on the rows the batch looked up, each from its summed gradient; one accumulator
    per row, the mean of the row's squared gradient added to it."""
    for table, accumulator in zip(tables, accumulators):
        gradient = table.grad.coalesce()  # duplicate lookups summed
        rows, g = gradient.indices()[0], gradient.values()
        accumulator[rows] += (g * g).mean(dim=1)
        table[rows] -= (learning_rate / (accumulator[rows].sqrt() + epsilon))[:, None] * g


def mean_loss(logits, labels):
    """Binary cross-entropy's mean over the batch, and its value summed in double as shardwise sums it,
    which rounds the float32 samples' losses once, not each partial sum."""
    losses = F.binary_cross_entropy_with_logits(logits, labels, reduction="none")
    return losses.mean(), losses.detach().double().mean().item()


def area_under_curve(scores, labels):
    """The chance that a random click scores above a random non-click, ties counting half."""
    _, tie, counts = np.unique(scores, return_inverse=True, return_counts=True)
    ranks = (np.cumsum(counts) - (counts - 1) / 2)[tie]  # each tie's mean rank, from 1
    positives = labels.sum()
    negatives = len(labels) - positives
    if positives == 0 or negatives == 0:
        return 0.5
    return (ranks[labels > 0.5].sum() - positives * (positives + 1) / 2) / (positives * negatives)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    for name, default in [("steps", 400), ("batch", 512), ("tables", 8), ("rows", 20000), ("row_wise", 2),
                          ("dimension", 16), ("dense_features", 13), ("hidden", 64), ("bag_length", 10),
                          ("eval_every", 100), ("eval_batches", 8), ("seed", 1), ("threads", 2)]:
        parser.add_argument("--" + name.replace("_", "-"), type=int, default=default)
    parser.add_argument("--pooling", choices=["sum", "mean"], default="mean")
    parser.add_argument("--dense-lr", type=float, default=3e-3)
    parser.add_argument("--sparse-lr", type=float, default=0.05)
    parser.add_argument("--json")
    args = parser.parse_args()
    if not 0 <= args.row_wise <= args.tables:
        parser.error(f"--row-wise, how many tables are cut by rows, is between 0 and --tables ({args.tables})")
    torch.set_num_threads(args.threads)
    torch.set_num_interop_threads(1)

    data = ClickData(args.seed, args.dense_features, args.tables, args.rows, args.bag_length)
    model = DLRM(args.dense_features, args.hidden, args.dimension, args.tables, args.rows, args.pooling)
    model.initialize(args.seed)
    dense_optimizer = torch.optim.Adam([p for name, p in model.named_parameters() if not name.startswith("tables.")],
                                       lr=args.dense_lr, betas=(0.9, 0.999), eps=1e-8)
    accumulators = [torch.zeros(args.rows) for _ in range(args.tables)]
    held_out_batches = [data.batch("held_out", b * args.batch, args.batch) for b in range(args.eval_batches)]

    @torch.no_grad()
    def evaluate():
        """The held-out loss, the constant predictor's, AUC and accuracy."""
        losses, scores, labels = [], [], []
        for dense, label, bags in held_out_batches:
            logits = model(dense, bags)
            losses.append(mean_loss(logits, label)[1])
            scores.append(torch.sigmoid(logits).double().numpy())
            labels.append(label.double().numpy())
        scores, labels = np.concatenate(scores), np.concatenate(labels)
        rate = labels.mean()
        constant = 0.0 if rate <= 0 or rate >= 1 else -(rate * math.log(rate) + (1 - rate) * math.log(1 - rate))
        accuracy = ((scores > 0.5) == (labels > 0.5)).mean()
        return sum(losses) / len(losses), constant, area_under_curve(scores, labels), accuracy

    print(f"torch {torch.__version__} 09: DLRM on {args.threads} threads: {args.tables} tables of {args.rows} x "
          f"{args.dimension}, {args.dense_features} dense features, {args.pooling} pooling, batch {args.batch}",
          flush=True)
    train_curve, held_out_curve, seconds, last_line = [], [], 0.0, (0, 0.0)
    for step in range(1, args.steps + 1):
        dense, labels, bags = data.batch("training", step * args.batch, args.batch)
        start = time.perf_counter()
        loss, reported = mean_loss(model(dense, bags), labels)
        dense_optimizer.zero_grad(set_to_none=True)
        for table in model.tables:
            table.grad = None
        loss.backward()
        dense_optimizer.step()
        rowwise_adagrad(model.tables, accumulators, args.sparse_lr)
        seconds += time.perf_counter() - start
        samples = step * args.batch
        train_curve.append([step, samples, reported])
        evaluates = step % args.eval_every == 0 or step == args.steps
        if evaluates:
            held_out = evaluate()
            held_out_curve.append([step, samples, held_out[0]])
        if evaluates or step == 1 or step % 20 == 0:
            rate = (samples - last_line[0]) / (seconds - last_line[1])
            last_line = (samples, seconds)
            print(f"step {step:5d}/{args.steps}  loss {reported:.4f}  {rate:8.0f} samples/s", flush=True)
        if evaluates:
            print("      held-out loss {:.4f} (a constant predictor's {:.4f}), AUC {:.3f}, accuracy {:.3f}".format(
                *held_out), flush=True)

    loss, constant, auc, accuracy = held_out
    below = 1 - loss / constant
    result = {"threads": args.threads, "steps": args.steps, "batch": args.batch, "held_out_loss": loss,
              "constant_predictor_loss": constant, "auc": auc, "accuracy": accuracy,
              "samples_per_s": args.steps * args.batch / seconds, "train_curve": train_curve,
              "held_out_curve": held_out_curve, "wall_s": seconds}
    print(f"final: held-out loss {loss:.4f}, {100 * abs(below):.0f}% {'below' if below >= 0 else 'above'} the "
          f"constant predictor's {constant:.4f}; AUC {auc:.3f}, accuracy {accuracy:.3f}; "
          f"{result['samples_per_s']:.0f} samples/s")
    if args.json:
        with open(args.json, "w") as out:
            json.dump(result, out)


if __name__ == "__main__":
    main()
