#!/bin/bash
# gridnn-train as a cluster job meets it: preemption signals, a stalled rank, a full disk, a
# checkpoint of another format version. Each case runs real jobs under mpiexec and checks
# exit statuses, messages and files.
#
#   cluster_runs.sh GRIDNN_TRAIN MPIEXEC WORKDIR CASE
#
# CASE:
#   signal-one   kill -TERM one rank of a 2x2 job: one checkpoint, exit 75 on every rank, and
#                --resume ends bitwise where an uninterrupted run ends
#   signal-all   the same with SIGTERM to every rank
#   hang-2       SIGSTOP one rank of a 1x2 job with --comm-timeout 3: the job ends within
#                3 + 10 s with exit 124, naming the operation and the stopped rank; no
#                process of the job is left
#   hang-4       the same on a 2x2 job
#   full-disk    a save on a full disk (GRIDNN_TEST_DISK_FULL_AFTER, gridnn-train's test hook:
#                file writes fail with ENOSPC after a few KB): a clear error, exit 1, the
#                previous checkpoint intact and nothing half-written; with --save-errors warn
#                the run trains on
#   read-only    the same with a read-only checkpoint folder (chmod when not root; as root a
#                read-only bind mount in a private mount namespace; exit 77, skipped, when
#                neither is possible)
#   version      a checkpoint of another format version is refused with a message
set -u
TRAIN=$1 MPIEXEC=$2 WORK=$3 CASE=$4
rm -rf "$WORK" && mkdir -p "$WORK" && cd "$WORK" || exit 1

fail() { echo "FAIL ($CASE): $*"; exit 1; }
# A small 2x2 job: ~30 ms a step on 2 cores; --steps is far away so a signal lands mid-run.
FLAGS=(--width 2 --input 8x8x8 --batch 4 --train-samples 16 --val-samples 4 --no-progress --seed 7)

# The PIDs of this case's gridnn-train ranks (their command lines name $WORK), "rank pid"
# per line.
rank_pids() {
  local p
  for p in $(pgrep -f "^$TRAIN .*$WORK/"); do
    local r
    r=$(tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null | sed -n 's/^PMI_RANK=//p')
    [ -n "$r" ] && echo "$r $p"
  done
}
# Waits until the metrics file $1 has at least $2 train lines (at most 60 s).
wait_steps() {
  local i
  for i in $(seq 600); do
    [ -f "$1" ] && [ "$(grep -c '"event":"train"' "$1")" -ge "$2" ] && return 0
    sleep 0.1
  done
  fail "the job did not reach step $2"
}
# Fails when a gridnn-train process is still there 10 s from now.
no_leftovers() {
  local i
  for i in $(seq 100); do
    [ -z "$(pgrep -f "^$TRAIN .*$WORK/")" ] && return 0
    sleep 0.1
  done
  pgrep -fl "^$TRAIN .*$WORK/"
  fail "processes of the job are left over"
}

signal_case() {  # $1: "one" or "all"
  local steps=150
  "$MPIEXEC" -n 4 "$TRAIN" --grid 2x2 "${FLAGS[@]}" --steps $steps --checkpoint-dir stopped \
    --metrics "$WORK/stopped.jsonl" >stopped.log 2>&1 &
  local job=$!
  wait_steps stopped.jsonl 5
  if [ "$1" = one ]; then
    kill -TERM "$(rank_pids | awk '$1 == 2 {print $2}')"
  else
    kill -TERM $(rank_pids | awk '{print $2}')
  fi
  wait $job
  local status=$?
  cat stopped.log | grep -v validation
  [ $status -eq 75 ] || fail "exit status $status, expected 75 (--requeue-exit-code)"
  grep -q "SIGTERM reached rank" stopped.log || fail "no stop message"
  local saved
  saved=$(ls stopped/step-*.safetensors 2>/dev/null)
  [ "$(echo "$saved" | wc -w)" -eq 1 ] || fail "expected one checkpoint, found: $saved"
  local at
  at=$(grep -c '"event":"train"' stopped.jsonl)
  [ "$at" -lt $steps ] || fail "the run was not interrupted (it reached step $at)"
  no_leftovers

  "$MPIEXEC" -n 4 "$TRAIN" --grid 2x2 "${FLAGS[@]}" --steps $steps --checkpoint-dir stopped --resume \
    >resumed.log 2>&1 || { cat resumed.log; fail "the resumed run failed"; }
  grep -q "resumed from $saved" resumed.log || fail "the resumed run did not start from $saved"
  "$MPIEXEC" -n 4 "$TRAIN" --grid 2x2 "${FLAGS[@]}" --steps $steps --checkpoint-dir whole \
    >whole.log 2>&1 || { cat whole.log; fail "the uninterrupted run failed"; }
  local last
  last=$(printf 'step-%08d.safetensors' $steps)
  cmp "stopped/$last" "whole/$last" || fail "the resumed run does not end bitwise where the uninterrupted one ends"
  echo "ok: stopped at step $at, one checkpoint, exit 75, resumed run bitwise equal at step $steps"
}

hang_case() {  # $1: ranks
  local grid=1x2
  [ "$1" = 4 ] && grid=2x2
  local start=$SECONDS
  "$MPIEXEC" -n "$1" "$TRAIN" --grid $grid "${FLAGS[@]}" --steps 100000 --comm-timeout 3 \
    --metrics "$WORK/hang.jsonl" >hang.log 2>&1 &
  local job=$!
  wait_steps hang.jsonl 3
  kill -STOP "$(rank_pids | awk '$1 == 1 {print $2}')"
  local stopped_at=$SECONDS
  wait $job
  local status=$?
  local took=$((SECONDS - stopped_at))
  grep "gridnn: rank" hang.log
  [ $status -eq 124 ] || fail "exit status $status, expected 124"
  [ $took -le 13 ] || fail "the job took $took s to end after the stop (limit 3 + 10 s)"
  grep -q "communication timeout: waited .* in .* on communicator .*layer .*step " hang.log ||
    fail "the message does not name the operation, communicator, layer and step"
  grep -q "NOT RESPONDING: rank 1 (pid [0-9]*) is stopped" hang.log || fail "the message does not name rank 1"
  no_leftovers
  echo "ok: ended $took s after the stop, exit 124, rank 1 named"
}

full_disk_case() {
  "$TRAIN" "${FLAGS[@]}" --steps 2 --checkpoint-dir ck >first.log 2>&1 || { cat first.log; fail "first run"; }
  local good=ck/step-00000002.safetensors
  local sum
  sum=$(md5sum <"$good")
  # Room for a few KB only: the next checkpoint (~0.5 MB) cannot be written.
  (export GRIDNN_TEST_DISK_FULL_AFTER=16384; "$TRAIN" "${FLAGS[@]}" --steps 4 --checkpoint-dir ck --resume) >full.log 2>&1
  local status=$?
  cat full.log | grep -v validation
  [ $status -eq 1 ] || fail "exit status $status, expected 1"
  grep -q "could not save the checkpoint of step 4: .*The checkpoints saved before are untouched" full.log ||
    fail "no clear message"
  [ "$(md5sum <"$good")" = "$sum" ] || fail "the previous checkpoint changed"
  [ "$(ls -A ck)" = "step-00000002.safetensors" ] || fail "the folder holds more than the previous checkpoint: $(ls -A ck)"
  (export GRIDNN_TEST_DISK_FULL_AFTER=16384; "$TRAIN" "${FLAGS[@]}" --steps 4 --checkpoint-dir ck --resume --save-errors warn) >warn.log 2>&1 ||
    { cat warn.log; fail "--save-errors warn stopped the run"; }
  grep -q "gridnn: warning: could not save the checkpoint of step 4" warn.log || fail "no warning"
  grep -q '"event":"done","step":4' warn.log || fail "the run did not train on to step 4"
  [ "$(md5sum <"$good")" = "$sum" ] || fail "the previous checkpoint changed"
  echo "ok: a failed save stops with a message (or warns), the previous checkpoint intact"
}

# Runs "$@" with ck/ read-only.
read_only() {
  if [ "$(id -u)" != 0 ]; then
    chmod a-w ck && "$@"
    local status=$?
    chmod u+w ck
    return $status
  fi
  unshare -m bash -c 'mount --bind ck ck && mount -o remount,bind,ro ck && exec "$@"' _ "$@"
}

read_only_case() {
  "$TRAIN" "${FLAGS[@]}" --steps 2 --checkpoint-dir ck >first.log 2>&1 || { cat first.log; fail "first run"; }
  if ! read_only bash -c '! touch ck/probe 2>/dev/null'; then
    echo "skipped: cannot make a read-only folder here (not root: chmod; root: unshare -m and mount)"
    exit 77
  fi
  rm -f ck/probe
  local good=ck/step-00000002.safetensors
  local sum
  sum=$(md5sum <"$good")
  read_only "$TRAIN" "${FLAGS[@]}" --steps 4 --checkpoint-dir ck --resume >ro.log 2>&1
  local status=$?
  grep -v validation ro.log
  [ $status -eq 1 ] || fail "exit status $status, expected 1"
  grep -q "could not save the checkpoint of step 4: .*cannot create temporary file.*The checkpoints saved before are untouched" ro.log ||
    fail "no clear message"
  read_only "$TRAIN" "${FLAGS[@]}" --steps 4 --checkpoint-dir ck --resume --save-errors warn >warn.log 2>&1 ||
    { cat warn.log; fail "--save-errors warn stopped the run"; }
  grep -q '"event":"done","step":4' warn.log || fail "the run did not train on to step 4"
  [ "$(md5sum <"$good")" = "$sum" ] || fail "the previous checkpoint changed"
  [ "$(ls -A ck)" = "step-00000002.safetensors" ] || fail "the folder holds more than the previous checkpoint: $(ls -A ck)"
  echo "ok: a read-only folder stops the run with a message (or warns), the previous checkpoint intact"
}

version_case() {
  "$TRAIN" "${FLAGS[@]}" --steps 2 --checkpoint-dir ck >first.log 2>&1 || { cat first.log; fail "first run"; }
  # Another version of the format: the same length, one digit changed in the header.
  sed -i '0,/gridnn-checkpoint-1/s//gridnn-checkpoint-9/' ck/step-00000002.safetensors
  "$TRAIN" "${FLAGS[@]}" --steps 4 --checkpoint-dir ck --resume >resume.log 2>&1
  local status=$?
  cat resume.log
  [ $status -ne 0 ] || fail "a checkpoint of another format version was accepted"
  grep -q "checkpoint format 'gridnn-checkpoint-9' is another version" resume.log || fail "no clear message"
  echo "ok: refused"
}

case "$CASE" in
  signal-one) signal_case one ;;
  signal-all) signal_case all ;;
  hang-2) hang_case 2 ;;
  hang-4) hang_case 4 ;;
  full-disk) full_disk_case ;;
  read-only) read_only_case ;;
  version) version_case ;;
  *) fail "unknown case" ;;
esac
