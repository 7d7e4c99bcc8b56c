"""What the PyTorch peers of the training examples share (bench/train_gpt_torch.py, bench/train_dlrm_torch.py):
--threads, read before numpy and torch size their thread pools, and shardwise's counter-based random numbers
(include/shardwise/core/counter_random.hpp) in numpy, so that a peer draws the weights and the samples its
example draws. Import it before numpy and torch.
"""
import os
import sys


def threads_option():
    """--threads, read before torch is imported: its BLAS and OpenMP pools size themselves on import."""
    for i, argument in enumerate(sys.argv):
        if argument == "--threads" and i + 1 < len(sys.argv):
            return sys.argv[i + 1]
        if argument.startswith("--threads="):
            return argument.split("=", 1)[1]
    return "2"


for variable in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[variable] = threads_option()

import numpy as np  # noqa: E402 (after the thread counts are set)
import torch  # noqa: E402


def splitmix64(z):
    """splitmix64's finaliser on arrays of uint64, wrapping as C++ does."""
    with np.errstate(over="ignore"):
        z = np.asarray(z, dtype=np.uint64) + np.uint64(0x9E3779B97F4A7C15)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return z ^ (z >> np.uint64(31))


def uniform_at(seeds, rows, columns):
    """shardwise::uniform_at: a uniform double in [0, 1) keyed by (seed, row, column), all three broadcast;
    negative rows and columns wrap to uint64 as C++ casts them."""
    seeds = np.asarray(seeds, dtype=np.uint64)
    rows = np.asarray(rows, dtype=np.int64).astype(np.uint64)
    columns = np.asarray(columns, dtype=np.int64).astype(np.uint64)
    return (splitmix64(splitmix64(splitmix64(seeds) ^ rows) ^ columns) >> np.uint64(11)).astype(np.float64) * 2.0**-53


def hashed_uniform(seed, rows, columns, bound):
    """nn::parameter<float>'s initial values: a rows x columns matrix uniform in [-bound, bound), the bound
    rounded to float first."""
    u = uniform_at(seed, np.arange(rows)[:, None], np.arange(columns)[None, :])
    return torch.from_numpy(((2 * u - 1) * float(np.float32(bound))).astype(np.float32))
