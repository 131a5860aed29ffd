"""A tiny deterministic trainer that checkpoints through fault_responder_checkpoint and resumes from RESUME_FROM.

SGD with momentum on a synthetic linear regression, in pure Python. Everything the rest of the run depends on
is in the checkpoint (parameters, momentum buffers, the data RNG's state, the step and the loss history), so a
run that crashes and resumes from its newest complete checkpoint ends bit-for-bit where an uninterrupted run
ends. JSON keeps floats exact: Python writes the shortest repr that reads back to the same double.

    python training/example_trainer.py --steps 100 --checkpoint-every 10 \\
        --checkpoint-uri s3://bucket/runs/demo/ [--fail-at-step 37] [--output final.json]

With --check-requests-every N it looks for a checkpoint request (`<checkpoint-uri>_CHECKPOINT_NOW`) every N steps
and answers it at that step boundary: one save, whose manifest names the request, then a hold if the request asks
for one. On SIGTERM (ECS's StopTask) it saves at the next step boundary and exits 0. At most one save per
boundary: a request or a stop at a boundary whose periodic save is due is answered by that save.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import fault_responder_checkpoint as checkpoint

TRUE_WEIGHTS = (2.0, -3.5, 0.5, 1.25)
TRUE_BIAS = 0.75
NOISE = 0.1
BATCH_SIZE = 8


class SimulatedCrash(RuntimeError):
    """The fault injected by --fail-at-step / --fail-before-commit-at-step."""


class Stopped(Exception):
    """The run was asked to stop (SIGTERM) and saved its state at a step boundary: it exits 0, unfinished."""

    def __init__(self, step: int, folder: str) -> None:
        super().__init__(f"stopped at step {step}: {folder}")
        self.step, self.folder = step, folder


@dataclass(frozen=True)
class Hyperparameters:
    seed: int
    learning_rate: float
    momentum: float


@dataclass
class TrainerState:
    step: int
    weights: list[float]
    bias: float
    velocity: list[float]
    """Momentum buffers: one per weight, then the bias's."""
    losses: list[float]
    rng: random.Random
    """Draws the training batches; its state is part of the checkpoint."""


def initial_state(hp: Hyperparameters) -> TrainerState:
    rng = random.Random(hp.seed)  # noqa: S311  # nosec B311  # reproducible training data, not security
    weights = [rng.uniform(-0.1, 0.1) for _ in TRUE_WEIGHTS]
    return TrainerState(0, weights, 0.0, [0.0] * (len(weights) + 1), [], rng)


def train_step(state: TrainerState, hp: Hyperparameters) -> None:
    rng = state.rng
    batch = [[rng.uniform(-1.0, 1.0) for _ in TRUE_WEIGHTS] for _ in range(BATCH_SIZE)]
    targets = [_dot(TRUE_WEIGHTS, x) + TRUE_BIAS + rng.gauss(0.0, NOISE) for x in batch]
    errors = [_dot(state.weights, x) + state.bias - y for x, y in zip(batch, targets, strict=True)]
    gradient = [
        2.0 * sum(e * x[j] for e, x in zip(errors, batch, strict=True)) / BATCH_SIZE for j in range(len(state.weights))
    ]
    gradient.append(2.0 * sum(errors) / BATCH_SIZE)
    state.velocity = [hp.momentum * v + g for v, g in zip(state.velocity, gradient, strict=True)]
    parameters = [*state.weights, state.bias]
    parameters = [p - hp.learning_rate * v for p, v in zip(parameters, state.velocity, strict=True)]
    state.weights, state.bias = parameters[:-1], parameters[-1]
    state.losses.append(sum(e * e for e in errors) / BATCH_SIZE)
    state.step += 1


def to_files(state: TrainerState, hp: Hyperparameters) -> dict[str, bytes]:
    version, internal, gauss_next = state.rng.getstate()
    documents: dict[str, Any] = {
        "model.json": {"weights": state.weights, "bias": state.bias},
        "optimizer.json": {"velocity": state.velocity, "learning_rate": hp.learning_rate, "momentum": hp.momentum},
        "trainer.json": {
            "step": state.step,
            "seed": hp.seed,
            "losses": state.losses,
            "rng": {"version": version, "internal": list(internal), "gauss_next": gauss_next},
        },
    }
    return {name: json.dumps(document).encode() for name, document in documents.items()}


def from_files(files: dict[str, bytes], hp: Hyperparameters) -> TrainerState:
    model, optimizer, trainer = (json.loads(files[name]) for name in ("model.json", "optimizer.json", "trainer.json"))
    saved = Hyperparameters(trainer["seed"], optimizer["learning_rate"], optimizer["momentum"])
    if saved != hp:
        # Resuming with other hyperparameters would not continue the same run (Megatron asserts the same).
        raise ValueError(f"the checkpoint was written with {saved}, this run has {hp}")
    rng = random.Random()  # noqa: S311  # nosec B311  # reproducible training data, not security
    saved_rng = trainer["rng"]
    rng.setstate((saved_rng["version"], tuple(saved_rng["internal"]), saved_rng["gauss_next"]))
    return TrainerState(trainer["step"], model["weights"], model["bias"], optimizer["velocity"], trainer["losses"], rng)


def train(args: argparse.Namespace, stop: checkpoint.StopSignal | None = None) -> TrainerState:
    """Train to --steps; raises Stopped once `stop` is requested, after saving at that step boundary."""
    hp = Hyperparameters(args.seed, args.learning_rate, args.momentum)
    resume_uri = checkpoint.resume_from()
    if resume_uri is None:
        state = initial_state(hp)
    else:
        state = from_files(checkpoint.load_checkpoint(resume_uri), hp)
        print(f"resumed from {resume_uri} at step {state.step} (attempt {checkpoint.resume_attempt()})")
    requests = None
    if args.check_requests_every:
        # The request the resumed checkpoint answered is not answered again.
        answered = checkpoint.answered_request(resume_uri) if resume_uri is not None else None
        requests = checkpoint.CheckpointRequests(
            args.checkpoint_uri, every=args.check_requests_every, answered=answered
        )
    ignored: set[str] = set()

    def to_answer(request: checkpoint.CheckpointRequest | None) -> checkpoint.CheckpointRequest | None:
        if request is None or not args.ignore_checkpoint_requests:
            return request
        if request.id not in ignored:
            ignored.add(request.id)
            print(f"ignored checkpoint request {request.id} at step {state.step}")
        return None

    while state.step < args.steps:
        if state.step + 1 == args.fail_at_step:
            raise SimulatedCrash(f"simulated GPU fault during step {args.fail_at_step}")
        train_step(state, hp)
        time.sleep(args.step_seconds)
        request = to_answer(requests.pending(state.step)) if requests is not None else None
        saved = None
        if request is not None or state.step % args.checkpoint_every == 0 or state.step == args.steps:
            saved = _save(state, hp, args, requests, request)
        if requests is not None and request is not None and request.hold_until is not None:
            ended = requests.hold(request, stop=stop, poll_seconds=args.hold_poll_seconds)
            print(f"held at step {state.step} until {ended}")
        if stop is not None and stop.requested:
            if saved is None:
                # A request written since the last check is answered by this save too.
                saved = _save(state, hp, args, requests, to_answer(requests.check()) if requests is not None else None)
            raise Stopped(state.step, saved)
    return state


def _save(
    state: TrainerState,
    hp: Hyperparameters,
    args: argparse.Namespace,
    requests: checkpoint.CheckpointRequests | None,
    request: checkpoint.CheckpointRequest | None,
) -> str:
    """The step's checkpoint, answering `request` when there is one; returns its folder."""
    files = to_files(state, hp)
    if state.step == args.fail_before_commit_at_step:
        unfinished = checkpoint.prepare_checkpoint_folder(args.checkpoint_uri, state.step)
        checkpoint.write_checkpoint_files(unfinished, files)
        raise SimulatedCrash(f"simulated GPU fault while saving step {state.step}, before its manifest")
    if requests is not None and request is not None:
        folder: str = requests.answer(state.step, files, request)
        print(f"answered {request.id} at step {state.step}: {folder}")
    else:
        folder = checkpoint.save_checkpoint(args.checkpoint_uri, state.step, files)
        print(f"saved {folder}")
    return folder


def _dot(weights: Sequence[float], x: Sequence[float]) -> float:
    return sum(w * v for w, v in zip(weights, x, strict=True))


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, required=True)
    parser.add_argument("--checkpoint-every", type=int, required=True)
    parser.add_argument("--checkpoint-uri", required=True, help="s3://bucket/prefix/ holding one folder per step")
    parser.add_argument("--seed", type=int, default=1234)
    parser.add_argument("--learning-rate", type=float, default=0.05)
    parser.add_argument("--momentum", type=float, default=0.9)
    parser.add_argument("--fail-at-step", type=int, help="crash during this step, before anything of it is saved")
    parser.add_argument("--fail-before-commit-at-step", type=int, help="crash after writing this step's files")
    parser.add_argument("--output", type=Path, help="write the final state here as JSON")
    parser.add_argument(
        "--check-requests-every", type=int, default=0, help="look for a checkpoint request every N steps (0: never)"
    )
    parser.add_argument(
        "--ignore-checkpoint-requests", action="store_true", help="look for checkpoint requests, never answer them"
    )
    parser.add_argument(
        "--hold-poll-seconds", type=float, default=5.0, help="while holding, re-read the request this often"
    )
    parser.add_argument("--step-seconds", type=float, default=0.0, help="sleep this long in every step")
    args = parser.parse_args(argv)
    if args.steps < 1 or args.checkpoint_every < 1:
        parser.error("--steps and --checkpoint-every must be positive")
    if args.check_requests_every < 0 or args.step_seconds < 0 or args.hold_poll_seconds <= 0:
        parser.error("--check-requests-every and --step-seconds must not be negative, --hold-poll-seconds positive")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        # In the main thread, before training: the handler only sets a flag that the loop checks between steps.
        with checkpoint.stop_on_sigterm() as stop:
            state = train(args, stop)
    except SimulatedCrash as crash:
        print(f"crashed: {crash}", file=sys.stderr)
        return 1
    except Stopped as stopped:
        print(stopped)
        return 0
    if args.output:
        final = {"step": state.step, "weights": state.weights, "bias": state.bias, "losses": state.losses}
        args.output.write_text(json.dumps(final, indent=1))
    print(f"finished at step {state.step}, loss {state.losses[-1]:.6f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
