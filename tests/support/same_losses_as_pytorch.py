"""Trains one GPT with the main example and with its PyTorch peer, and fails unless the two give the same
training loss at every step and the same validation losses, within a tolerance.

Both programs start from the same weights and read the same samples (bench/train_gpt_torch.py says how),
so their losses differ by float rounding alone: by about 6e-7 after 40 steps of a small model, on any
mesh. The tests between meshes cannot see a bug that every mesh of shardwise shares (an optimizer's
formula, the schedule, how the weights are drawn); against PyTorch it moves the losses by far more:
weight decay 0.2 for 0.1 moves them by 2e-4, a learning rate 0.3% off by 3e-3.

Run it with a Python that imports torch:

    python3 same_losses_as_pytorch.py --peer bench/train_gpt_torch.py --work-dir DIR \
        --model "--layers 2 --hidden 64 ..." -- build/examples/07_train_gpt --dp 2 --tp 1d:2
"""
import argparse
import json
import os
import shlex
import subprocess
import sys


def train(command, json_path, what):
    """Runs one training to its end and returns the curves it wrote to json_path."""
    run = subprocess.run(command + ["--json", json_path], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if run.returncode != 0:
        sys.exit(f"{what} failed with exit code {run.returncode}: {shlex.join(command)}\n{run.stdout}")
    with open(json_path) as source:
        result = json.load(source)
    return result["train_curve"], result["val_curve"]


def largest_difference(ours, theirs, name):
    """(difference, step) of the largest difference between two curves of [step, tokens, loss] rows."""
    if [row[0] for row in ours] != [row[0] for row in theirs]:
        sys.exit(f"the {name} curves hold different steps: {[row[0] for row in ours]} and "
                 f"{[row[0] for row in theirs]}")
    return max((abs(a[2] - b[2]), int(a[0])) for a, b in zip(ours, theirs))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--peer", required=True, help="bench/train_gpt_torch.py")
    parser.add_argument("--model", required=True, help="the options both programs take, in one string")
    parser.add_argument("--work-dir", required=True, help="where the two programs write their JSON")
    parser.add_argument("--tolerance", type=float, default=1e-5, help="the largest difference of a loss")
    parser.add_argument("program", nargs="+", help="the main example's launch, with its mesh options")
    args = parser.parse_args()

    model = shlex.split(args.model)
    os.makedirs(args.work_dir, exist_ok=True)
    ours = train(args.program + model + ["--sample", "0"], os.path.join(args.work_dir, "shardwise.json"), "shardwise")
    theirs = train([sys.executable, args.peer] + model + ["--threads", "1"], os.path.join(args.work_dir, "pytorch.json"),
                   "PyTorch")

    training = largest_difference(ours[0], theirs[0], "training")
    validation = largest_difference(ours[1], theirs[1], "validation")
    print(f"{len(ours[0])} steps: training losses differ from PyTorch's by at most {training[0]:.1e} (step "
          f"{training[1]}), validation losses by {validation[0]:.1e} (step {validation[1]}); tolerance "
          f"{args.tolerance:.0e}")
    if max(training[0], validation[0]) > args.tolerance:
        print("step  shardwise  PyTorch  difference")
        for a, b in zip(ours[0], theirs[0]):
            print(f"{int(a[0]):4d}  {a[2]:.7f}  {b[2]:.7f}  {a[2] - b[2]:+.1e}")
        sys.exit(f"the losses are not PyTorch's: {shlex.join(args.program)}")


if __name__ == "__main__":
    main()
