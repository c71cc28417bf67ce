#!/bin/sh
# ctest driver: `seq_train --distributed --collective-timeout 6` on 2 ranks, rank 1 stopped with
# SIGSTOP mid-training. Rank 0 must print a progress line naming rank 1, give up at the deadline
# with the error naming itself, the collective and rank 1, and the whole job (the stopped rank
# included) must end within the deadline plus a few seconds.
# Environment: MPIRUN (the launcher and its arguments, space separated), SEQ_TRAIN, WORK_DIR.
set -u
rm -rf "$WORK_DIR" && mkdir -p "$WORK_DIR" || exit 1
log="$WORK_DIR/log"
# shellcheck disable=SC2086
$MPIRUN "$SEQ_TRAIN" --distributed --collective-timeout 6 --steps 1000000 --warmup 0 --log-every 10 \
    --out "$WORK_DIR/out" >"$log" 2>&1 &
job=$!

# The pid of rank 1: a seq_train process whose environment says so.
rank1() {
    for d in /proc/[0-9]*; do
        case "$(tr '\0' ' ' <"$d/cmdline" 2>/dev/null)" in *seq_train*--distributed*) ;; *) continue ;; esac
        if tr '\0' '\n' <"$d/environ" 2>/dev/null | grep -qx 'OMPI_COMM_WORLD_RANK=1'; then
            echo "${d#/proc/}"
            return
        fi
    done
}
fail() {
    echo "FAIL: $1"
    cat "$log"
    # mpirun ends its ranks on SIGTERM; a stopped rank needs SIGKILL.
    [ -n "${pid:-}" ] && kill -KILL "$pid" 2>/dev/null
    kill -TERM "$job" 2>/dev/null
    sleep 2
    kill -KILL "$job" 2>/dev/null
    exit 1
}

# Wait until training runs (a progress line), at most 60 s.
i=0
until grep -Eq "step +20/" "$log" 2>/dev/null; do
    i=$((i + 1))
    [ $i -gt 1200 ] && fail "training did not start within 120 s"
    kill -0 "$job" 2>/dev/null || fail "the job ended early"
    sleep 0.1
done
pid=$(rank1)
[ -n "$pid" ] || fail "found no rank 1"
kill -STOP "$pid"
stopped=$(date +%s)

# The job must end by itself: deadline 6 s, then MPI_Abort (its watchdog: 5 s more at most).
i=0
while kill -0 "$job" 2>/dev/null; do
    i=$((i + 1))
    [ $i -gt 250 ] && fail "the job did not end within 25 s of stopping rank 1"
    sleep 0.1
done
ended=$(date +%s)
# Rank 1 (continued and terminated by mpirun's abort) may take a moment more to go.
alive() { [ -e "/proc/$1" ] && ! grep -q '^[0-9]* ([^)]*) Z' "/proc/$1/stat" 2>/dev/null; }
i=0
while alive "$pid"; do
    i=$((i + 1))
    [ $i -gt 50 ] && fail "the stopped rank 1 outlived the job by 5 s"
    sleep 0.1
done
grep -q "rank 0: waiting 5 s in [a-z_]* #[0-9]* (.*) for rank 1" "$log" || fail "no progress line naming rank 1"
grep -q "seq_train: error on rank 0 of 2: distributed: rank 0 of 2 gave up waiting in [a-z_]* #[0-9]* (.*) after 6\.[0-9] s (collective timeout 6 s): rank 1 did not reach it" "$log" ||
    fail "no deadline error naming rank 0, the collective and rank 1"
echo "job ended $((ended - stopped)) s after rank 1 was stopped"
grep "waiting\|error on rank" "$log"
exit 0
