#!/usr/bin/env bash
# Reruns a training job after it dies, from its newest complete checkpoint.
#
#   scripts/run-resilient.sh [--retries N] [--delay SECONDS] [--] mpirun -np 8 build/trainer config.toml ...
#
# The command runs as given; the trainer's checkpoint.resume = "auto" (the default) makes each
# rerun continue from the newest complete checkpoint in checkpoint.dir. An abnormal exit (a
# crashed or killed rank, the watchdog ending a hung job) is retried up to N times (default 3),
# after SECONDS (default 5); one line per restart says why. Exit codes that mean "stop" are
# passed through at once: 0 (finished, or training.exit_at_step / exit_after_minutes),
# 75 (stopped by SIGTERM or SIGUSR1 after saving: the scheduler is ending the job; requeue it)
# and 130 (interrupted with Ctrl-C). The attempt number is exported as FEAST_ATTEMPT (1, 2, ...):
# fault injection ([fault] in the config) acts on attempt 1 only. mpirun passes it to the ranks
# on its own node; add `-x FEAST_ATTEMPT` to the mpirun line for other nodes.
set -uo pipefail

retries=3
delay=5
while [[ $# -gt 0 ]]; do
  case "$1" in
    --retries) retries="$2"; shift 2 ;;
    --delay) delay="$2"; shift 2 ;;
    --) shift; break ;;
    -h|--help) sed -n '2,17p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) break ;;
  esac
done
if [[ $# -eq 0 ]]; then
  echo "run-resilient: no command given; see --help" >&2
  exit 2
fi
if ! [[ "$retries" =~ ^[0-9]+$ && "$delay" =~ ^[0-9]+([.][0-9]+)?$ ]]; then
  echo "run-resilient: --retries needs a whole number and --delay a number of seconds" >&2
  exit 2
fi

attempt=1
while :; do
  export FEAST_ATTEMPT=$attempt
  start=$(date +%s)
  "$@"
  code=$?
  elapsed=$(( $(date +%s) - start ))
  case $code in
    0|75|130) exit $code ;;
  esac
  if (( attempt > retries )); then
    echo "run-resilient: attempt $attempt exited with code $code after ${elapsed} s; no retries left ($retries)" >&2
    exit $code
  fi
  echo "run-resilient: attempt $attempt exited with code $code after ${elapsed} s; restarting (retry $attempt of $retries) from the newest complete checkpoint" >&2
  sleep "$delay"
  attempt=$((attempt + 1))
done
