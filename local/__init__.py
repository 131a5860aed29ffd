"""The functions in real Lambda containers, on this machine: `sam local invoke` and `sam local start-lambda` against
the local stack (`make local-invoke`, `make local-up`; README.md, "Replay events").

It builds on the sandbox (sandbox/: moto as the AWS account, the Slack and PagerDuty stand-ins, the stack's resources
created from the template, the samples' world seeded as `make smoke` seeds it) and adds what real containers need:

- `engine`: a Docker daemon of the run's own (Debian's docker.io, installed when missing), on a bridge the run
  creates, behind firewall rules that let the containers reach only moto and the stand-ins on this machine;
- `image`: the Lambda base image, AWS's where it can be pulled, otherwise an equivalent built from Debian and PyPI
  (lambda-image/) and cached;
- `stack`: the sandbox listening on the bridge's address, and the files `sam local` reads (.aws-sam/local/);
- `invoke`: one `sam local invoke`, then `sam local start-lambda` (warm containers) for the others;
- `__main__`: `python -m local invoke|up|serve|down|image`, which tear everything down when they end, however they
  end (Ctrl-C, SIGTERM, an error).
"""
