"""Trains one model with a training example and with its PyTorch peer, and fails unless the two give the
same training loss at every step and the same held-out losses, within a tolerance.

Both programs start from the same weights and read the same samples (the peers, bench/train_gpt_torch.py
for the GPT of examples/07_train_gpt.cpp and bench/train_dlrm_torch.py for the DLRM of
examples/09_train_dlrm.cpp, say how), so their losses differ by float rounding alone: after 40 steps
of a small model, the GPT's by about 6e-7 (9e-7 with LAMB, which the GPT's peer takes, as LARS and SGD,
from --optimizer in --model) and the DLRM's by 4e-8, on any mesh. The tests between meshes
cannot see a bug that every mesh of shardwise shares (an optimizer's formula, the schedule, how the
weights are drawn, the data); against PyTorch it moves the losses by far more: for the GPT, weight
decay 0.2 for 0.1 moves them by 2e-4, a learning rate 0.3% off by 3e-3; for the DLRM, row-wise Adagrad
adding the squared gradient's sum for its mean by 1e-2.

Each program writes --json with its curves of [step, tokens or samples, loss] rows, the training curve
and the held-out one under the keys --curves names. Run it with a Python that imports torch:

    python3 same_losses_as_pytorch.py --peer bench/train_gpt_torch.py --work-dir DIR \
        --model "--layers 2 --hidden 64 ..." --example-options "--sample 0" \
        -- build/examples/07_train_gpt --dp 2 --tp 1d:2

The peer is serial, so its losses depend on --model alone, and many meshes can share one run of it:
without an example's launch the script runs the peer alone and leaves its JSON in DIR/pytorch.json,
and --peer-json FILE in place of --peer compares the example with that file instead of running the peer:

    python3 same_losses_as_pytorch.py --peer bench/train_gpt_torch.py --work-dir PEER_DIR --model "..."
    python3 same_losses_as_pytorch.py --peer-json PEER_DIR/pytorch.json --work-dir DIR --model "..." \
        -- build/examples/07_train_gpt --dp 2 --tp 1d:2

An example resumed from a checkpoint of step N (--resumed-from N, with its --resume in the launch or
--example-options) is compared with the peer's steps after N: it must give each of them, and the same
losses, as a run that had not stopped.
"""
import argparse
import json
import os
import shlex
import subprocess
import sys


def train(command, json_path, what):
    """Runs one training to its end, which writes its JSON to json_path (an earlier run's removed first,
    so that nothing reads it if this one fails)."""
    if os.path.exists(json_path):
        os.remove(json_path)
    run = subprocess.run(command + ["--json", json_path], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if run.returncode != 0:
        sys.exit(f"{what} failed with exit code {run.returncode}: {shlex.join(command)}\n{run.stdout}")


def curves(json_path, keys):
    """The curves a training wrote to json_path under `keys`."""
    with open(json_path) as source:
        result = json.load(source)
    return [result[key] for key in keys]


def after(curve, step):
    """The rows of a curve after `step`."""
    return [row for row in curve if row[0] > step]


def largest_difference(ours, theirs, name):
    """(difference, step) of the largest difference between two curves of [step, tokens or samples, loss]
    rows."""
    if [row[0] for row in ours] != [row[0] for row in theirs]:
        sys.exit(f"the {name} curves hold different steps: {[row[0] for row in ours]} and "
                 f"{[row[0] for row in theirs]}")
    return max((abs(a[2] - b[2]), int(a[0])) for a, b in zip(ours, theirs))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    peer = parser.add_mutually_exclusive_group(required=True)
    peer.add_argument("--peer", help="bench/train_gpt_torch.py or bench/train_dlrm_torch.py")
    peer.add_argument("--peer-json", help="the JSON of a run of the peer alone on --model, in place of running it")
    parser.add_argument("--model", required=True, help="the options both programs take, in one string")
    parser.add_argument("--example-options", default="", help="options for the example alone, in one string")
    parser.add_argument("--curves", nargs=2, default=["train_curve", "val_curve"], metavar=("TRAINING", "HELD_OUT"),
                        help="the JSON keys of the training and the held-out curves")
    parser.add_argument("--work-dir", required=True, help="where the two programs write their JSON")
    parser.add_argument("--tolerance", type=float, default=1e-5, help="the largest difference of a loss")
    parser.add_argument("--resumed-from", type=int, default=0, metavar="STEP",
                        help="the step of the checkpoint the example resumes from: the peer's later steps compared")
    parser.add_argument("program", nargs="*", help="the example's launch, with its mesh options; without it, "
                        "the peer runs alone")
    args = parser.parse_args()
    if not args.program and not args.peer:
        parser.error("--peer-json needs the example's launch to compare with it")

    model = shlex.split(args.model)
    os.makedirs(args.work_dir, exist_ok=True)
    peer_json = args.peer_json
    if args.peer:
        peer_json = os.path.join(args.work_dir, "pytorch.json")
        train([sys.executable, args.peer] + model + ["--threads", "1"], peer_json, "PyTorch")
    if not args.program:
        return
    shardwise_json = os.path.join(args.work_dir, "shardwise.json")
    train(args.program + model + shlex.split(args.example_options), shardwise_json, "shardwise")
    ours, theirs = curves(shardwise_json, args.curves), curves(peer_json, args.curves)
    theirs = [after(curve, args.resumed_from) for curve in theirs]

    training = largest_difference(ours[0], theirs[0], "training")
    held_out = largest_difference(ours[1], theirs[1], "held-out")
    resumed = f" after a resume from step {args.resumed_from}" if args.resumed_from else ""
    print(f"{len(ours[0])} steps{resumed}: training losses differ from PyTorch's by at most {training[0]:.1e} (step "
          f"{training[1]}), held-out losses by {held_out[0]:.1e} (step {held_out[1]}); tolerance "
          f"{args.tolerance:.0e}")
    if max(training[0], held_out[0]) > args.tolerance:
        print("step  shardwise  PyTorch  difference")
        for a, b in zip(ours[0], theirs[0]):
            print(f"{int(a[0]):4d}  {a[2]:.7f}  {b[2]:.7f}  {a[2] - b[2]:+.1e}")
        sys.exit(f"the losses are not PyTorch's: {shlex.join(args.program)}")


if __name__ == "__main__":
    main()
