#!/usr/bin/env python3
"""Stops a training example with a signal part-way, as Ctrl-C, mpiexec or a batch scheduler would, and
checks that it stopped after one step with that step saved, and that a resume goes on from it.

  stop_by_signal.py --signal INT|TERM --checkpoint DIR [--exit-status N] -- COMMAND...

COMMAND is the example's launch (behind mpiexec for MPI) with options for a run far longer than the
test: the signal goes to COMMAND's process once it prints its first progress line. The run must then
print "stopped by signal N after step K" after "saved step K", end by itself within a minute (with
--exit-status, with that status: a shell's 128 + N; mpiexec reports its own), and COMMAND --resume DIR
--steps K+1 must start from step K.
"""
import argparse
import re
import signal
import subprocess
import sys
import time


def fail(message, output=""):
    sys.stderr.write(output)
    sys.exit("stop_by_signal: " + message)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--signal", choices=["INT", "TERM"], required=True)
    parser.add_argument("--checkpoint", required=True)
    parser.add_argument("--exit-status", type=int)
    parser.add_argument("command", nargs="+")
    args = parser.parse_args()
    number = int(getattr(signal, "SIG" + args.signal))

    subprocess.run(["rm", "-rf", args.checkpoint], check=True)
    run = subprocess.Popen(args.command + ["--checkpoint", args.checkpoint], stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True)
    output = ""
    deadline = time.monotonic() + 120
    for line in run.stdout:
        output += line
        if re.match(r"step +\d+/", line):
            run.send_signal(number)
            break
        if time.monotonic() > deadline:
            run.kill()
            fail("no progress line within two minutes", output)
    else:
        run.wait()
        fail(f"the run ended (exit {run.returncode}) before its first progress line", output)
    try:
        output += run.communicate(timeout=60)[0]
    except subprocess.TimeoutExpired:
        run.kill()
        output += run.communicate()[0]
        fail(f"the run did not end within a minute of SIG{args.signal}", output)
    sys.stdout.write(output)

    stopped = re.search(r"saved step (\d+) in [^\n]*\nstopped by signal (\d+) after step (\d+)", output)
    if not stopped:
        fail(f"no 'saved step K' then 'stopped by signal {number} after step K' (exit {run.returncode})")
    step = int(stopped.group(1))
    if int(stopped.group(2)) != number or int(stopped.group(3)) != step:
        fail(f"saved step {step}, but then: {stopped.group(0).splitlines()[-1]}")
    if args.exit_status is not None and run.returncode != args.exit_status:
        fail(f"exit status {run.returncode}, not {args.exit_status}")
    print(f"stop_by_signal: SIG{args.signal} stopped the run after step {step}, saved; exit {run.returncode}")

    resumed = subprocess.run(args.command + ["--resume", args.checkpoint, "--steps", str(step + 1)],
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=120)
    sys.stdout.write(resumed.stdout)
    if resumed.returncode != 0 or not re.search(rf"resumed from [^\n]* at step {step} ", resumed.stdout):
        fail(f"the resume did not go on from step {step} (exit {resumed.returncode})")
    print(f"stop_by_signal: resumed from step {step}")


if __name__ == "__main__":
    main()
