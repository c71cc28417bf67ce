#!/bin/bash
# ctest driver: seq_train --distributed across two "hosts" (pair.sh: two network namespaces
# joined by a veth pair, ranks started by mpirun through the rsh agent), and one-host checks of
# the agreement before training.
#   netns_tests.sh CASE SEQ_TRAIN COMPARE WORK_DIR
# CASE: equal | resume | kill | link_down | mismatch (need root, ip netns and Open MPI; exit 77,
# which ctest reports as Skipped, with the reason, when they are missing) and threads_mismatch
# (one host). Every namespace made is removed on exit, whatever ends the script.
set -u
case_name=$1 seq_train=$2 compare=$3 work=$4
here=$(cd "$(dirname "$0")" && pwd)
skip() { echo "SKIPPED: $*"; exit 77; }
fail() { echo "FAIL ($case_name): $*"; exit 1; }

export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_btl_vader_single_copy_mechanism=none
# The same numerics on every rank and in every run compared (the agreement check insists).
export XGRAD_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
rm -rf "$work" && mkdir -p "$work" && cd "$work" || exit 1
model=(--warmup 5 --dropout 0 --batch 8 --hidden 16 --heads 2 --layers 1 --ffn 32 --held-out 20)
small=("${model[@]}" --steps 20 --eval-every 10 --log-every 5)
# Long enough to be stopped from outside mid-run (a few ms per step).
long=("${model[@]}" --steps 3000 --eval-every 0 --log-every 10)
one_host=(mpirun -np 2 --oversubscribe -x XGRAD_NUM_THREADS -x OPENBLAS_NUM_THREADS)

# run LOG SECONDS cmd...: the command's output in LOG (and echoed), its status in $rc, its time in $took.
run() {
    local log=$1 seconds=$2 start
    shift 2
    start=$(date +%s)
    timeout -s KILL "$seconds" "$@" > "$log" 2>&1
    rc=$? took=$(( $(date +%s) - start ))
    echo "--- $* (exit $rc after ${took}s)"; cat "$log"
}
same() {  # checkpoints $1 and $2: every loss and every parameter bit for bit
    "$compare" "$1" "$2" 0 || fail "$1 and $2 differ"
}

if [ "$case_name" = threads_mismatch ]; then
    # One host, each rank its own XGRAD_NUM_THREADS: both stop before step 1, each saying why.
    run mismatch.log 120 mpirun --oversubscribe -np 1 -x XGRAD_NUM_THREADS=1 "$seq_train" "${small[@]}" --distributed --out t : \
        -np 1 -x XGRAD_NUM_THREADS=2 "$seq_train" "${small[@]}" --distributed --out t
    [ $rc -ne 0 ] && [ $rc -ne 137 ] || fail "expected a failing exit, got $rc"
    for r in 0 1; do
        grep -q "error on rank $r of 2: the 2 ranks do not agree" mismatch.log || fail "rank $r did not report the disagreement"
    done
    grep -q "XGRAD_NUM_THREADS: rank 0 '1'; rank 1 '2'" mismatch.log || fail "the message does not name the values"
    grep -q "thread pool size: rank 0 '1'; rank 1 '2'" mismatch.log || fail "the message does not name the pool sizes"
    grep -q "^step " mismatch.log && fail "a step ran"
    exit 0
fi

[ "$(id -u)" = 0 ] || skip "needs root to create network namespaces"
command -v ip > /dev/null || skip "needs ip (iproute2)"
command -v unshare > /dev/null || skip "needs unshare (util-linux)"
mpirun --version 2>/dev/null | grep -q "Open MPI" || skip "needs Open MPI's mpirun (the rsh agent is Open MPI's)"
. "$here/pair.sh"
netns_reap_stale
trap 'netns_pair_down $$' EXIT
trap 'exit 143' TERM INT
netns_pair_up $$ > setup.log 2>&1 || { cat setup.log; skip "cannot create network namespaces here (ip netns add / veth failed)"; }

case $case_name in
equal)
    run one_host.log 120 "${one_host[@]}" "$seq_train" "${small[@]}" --distributed --out one_host
    [ $rc = 0 ] || fail "the one-host run failed"
    rx_before=$(netns_rx_bytes "$NETNS_B")
    run two_hosts.log 120 "$here/mpirun-netns" -np 2 -x XGRAD_NUM_THREADS -x OPENBLAS_NUM_THREADS "$seq_train" "${small[@]}" --distributed --out two_hosts
    [ $rc = 0 ] || fail "the two-namespace run failed"
    grep -q "data-parallel over 2 ranks" two_hosts.log || fail "not 2 ranks"
    rx=$(( $(netns_rx_bytes "$NETNS_B") - rx_before ))
    echo "host B received $rx bytes over the link"
    # 20 steps of a 2-rank all-reduce of the gradients (about 10 kB each way) at least.
    [ "$rx" -gt 100000 ] || fail "only $rx bytes went over the veth: the ranks did not talk through it"
    same one_host/checkpoint.npz two_hosts/checkpoint.npz
    ;;
resume)
    run full.log 120 "$here/mpirun-netns" -np 2 -x XGRAD_NUM_THREADS -x OPENBLAS_NUM_THREADS "$seq_train" "${small[@]}" --distributed --out full
    [ $rc = 0 ] || fail "the full run failed"
    run first.log 120 "$here/mpirun-netns" -np 2 -x XGRAD_NUM_THREADS -x OPENBLAS_NUM_THREADS "$seq_train" "${small[@]}" --distributed --stop-after 7 --out resumed
    [ $rc = 0 ] || fail "the first half failed"
    run second.log 120 "$here/mpirun-netns" -np 2 -x XGRAD_NUM_THREADS -x OPENBLAS_NUM_THREADS "$seq_train" "${small[@]}" --distributed --resume --out resumed
    [ $rc = 0 ] || fail "the resumed run failed"
    grep -q "at step 7" second.log || fail "did not resume at step 7"
    same full/checkpoint.npz resumed/checkpoint.npz
    ;;
kill)
    long+=(--checkpoint-every 10)
    "$here/mpirun-netns" -np 2 -x XGRAD_NUM_THREADS -x OPENBLAS_NUM_THREADS "$seq_train" "${long[@]}" --distributed --out killed > killed.log 2>&1 &
    job=$!
    for _ in $(seq 600); do grep -q "^step *30/" killed.log && break; kill -0 $job 2>/dev/null || break; sleep 0.1; done
    grep -q "^step *30/" killed.log || { cat killed.log; fail "the run never reached step 30"; }
    victim=
    for pid in $(ip netns pids "$NETNS_B"); do
        [ "$(cat /proc/$pid/comm 2>/dev/null)" = seq_train ] && victim=$pid
    done
    [ -n "$victim" ] || fail "found no seq_train in $NETNS_B"
    start=$(date +%s)
    kill -KILL "$victim"
    # The job must end by itself; 60 s is far past Open MPI's few seconds.
    for _ in $(seq 600); do kill -0 $job 2>/dev/null || break; sleep 0.1; done
    if kill -0 $job 2>/dev/null; then cat killed.log; fail "the job still runs 60 s after rank 1 was killed"; fi
    wait $job; rc=$?
    echo "--- killed run (exit $rc, $(( $(date +%s) - start ))s after the kill)"; cat killed.log
    [ $rc -ne 0 ] || fail "the job exited 0 after a rank was killed"
    grep -Eqi "rank 1.*(signal 9|killed)" killed.log || fail "no message names rank 1 and the signal"
    run resumed.log 120 "$here/mpirun-netns" -np 2 -x XGRAD_NUM_THREADS -x OPENBLAS_NUM_THREADS "$seq_train" "${long[@]}" --distributed --resume --stop-after 5 --out killed
    [ $rc = 0 ] || fail "the checkpoint did not resume"
    at=$(sed -n 's/.*resumed from .* at step \([0-9]*\).*/\1/p' resumed.log)
    [ -n "$at" ] && [ "$at" -ge 10 ] || fail "resumed at step '$at', expected a checkpoint at step 10 or later"
    run reference.log 300 "${one_host[@]}" "$seq_train" "${long[@]}" --distributed --stop-after $((at + 5)) --out reference
    [ $rc = 0 ] || fail "the reference run failed"
    same reference/checkpoint.npz killed/checkpoint.npz
    ;;
link_down)
    "$seq_train" --help | grep -q -- --collective-timeout || skip "this seq_train has no --collective-timeout"
    timeout=5
    # A host that dies mid-send is noticed by TCP's retransmission limit, not by keepalives:
    # Linux's default (tcp_retries2 = 15) is about 15 minutes, 5 is a few seconds. README's
    # several-machines advice names both; the namespaces have their own TCP settings.
    for ns in "$NETNS_A" "$NETNS_B"; do
        ip netns exec "$ns" sysctl -qw net.ipv4.tcp_retries2=5 || skip "no per-namespace net.ipv4.tcp_retries2"
    done
    "$here/mpirun-netns" -np 2 -x XGRAD_NUM_THREADS -x OPENBLAS_NUM_THREADS "$seq_train" "${long[@]}" --distributed \
        --collective-timeout $timeout --out link > link.log 2>&1 &
    job=$!
    for _ in $(seq 600); do grep -q "^step *20/" link.log && break; kill -0 $job 2>/dev/null || break; sleep 0.1; done
    grep -q "^step *20/" link.log || { cat link.log; fail "the run never reached step 20"; }
    start=$(date +%s)
    ip -n "$NETNS_B" link set "$NETNS_LINK" down
    slack=30
    for _ in $(seq $(( (timeout + slack) * 10 ))); do kill -0 $job 2>/dev/null || break; sleep 0.1; done
    if kill -0 $job 2>/dev/null; then cat link.log; fail "the job still runs $((timeout + slack)) s after the link went down"; fi
    wait $job; rc=$?
    echo "--- link down (exit $rc, $(( $(date +%s) - start ))s after the link went down)"; cat link.log
    [ $rc -ne 0 ] || fail "the job exited 0"
    grep -Eq "rank [01].*(timed out|waiting)" link.log || fail "no message names the rank that timed out"
    grep -Eqi "all.?reduce|broadcast|collective" link.log || fail "no message names the collective"
    # The far host's rank ends by its own deadline, and its daemon with it.
    for _ in $(seq 300); do [ -z "$(ip netns pids "$NETNS_B")" ] && break; sleep 0.1; done
    [ -z "$(ip netns pids "$NETNS_B")" ] || { ps -o pid,args -p "$(ip netns pids "$NETNS_B" | tr '\n' ,)"; fail "processes still run on host B"; }
    ;;
mismatch)
    # Each rank its own --out, rank 1's an older checkpoint of the same run.
    for d in a b; do
        stop=$([ $d = a ] && echo 10 || echo 5)
        run make_$d.log 120 "${one_host[@]}" "$seq_train" "${small[@]}" --distributed --stop-after $stop --out $d
        [ $rc = 0 ] || fail "making checkpoint $d failed"
    done
    run mismatch.log 120 "$here/mpirun-netns" -x XGRAD_NUM_THREADS -x OPENBLAS_NUM_THREADS \
        -np 1 "$seq_train" "${small[@]}" --distributed --resume --out a : -np 1 "$seq_train" "${small[@]}" --distributed --resume --out b
    [ $rc -ne 0 ] && [ $rc -ne 137 ] || fail "expected a failing exit (not the timeout), got $rc"
    for r in 0 1; do
        [ "$(grep -c "error on rank $r of 2: the 2 ranks do not agree" mismatch.log)" = 1 ] ||
            fail "rank $r did not report the disagreement exactly once"
    done
    grep -q "start: rank 0 'checkpoint at step 10'; rank 1 'checkpoint at step 5'" mismatch.log || fail "the steps are not named"
    grep -q "start state hash: rank 0 '[0-9a-f]*'; rank 1 '[0-9a-f]*'" mismatch.log || fail "the hashes are not named"
    grep -Eq "^step|held-out" mismatch.log && fail "something ran"
    ;;
*) echo "unknown case '$case_name'"; exit 2 ;;
esac
echo "OK ($case_name)"
