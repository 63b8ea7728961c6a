#!/usr/bin/env bash
# LongMedia: one long command on a GPU machine without network, outliving the remote command that starts it.
#
# Where each command you run on the machine is stopped after a time limit (10 minutes, say), a process started in
# its own session (setsid) keeps running between commands, so a run longer than the limit starts in one command
# and is polled by the next ones (the machine must not be reset in between):
#
#     bash tools/gpu/hold.sh start 'python -m bench.long_job --stages sampler hires refiner decode'
#     bash tools/gpu/hold.sh poll 540 /tmp/longmedia_long_job/long_job.jsonl   # again in each later command
#
# start   runs COMMAND with bash in its own session, with this shell's environment (source tools/gpu/bootstrap.sh
#         first), its output in $HOLD_DIR/log; refuses while an earlier one still runs.
# poll    waits up to SECONDS for it to end, prints what the log gained since the last poll (its last 8000
#         characters), copies the log and the FILEs (globs; at most 7, flattened) to $OUT when it is set, and exits
#         0 when the command ended with 0, 3 while it runs, and the command's own exit status otherwise.
# status  the same as `poll 0`.
# stop    ends the command and everything in its session (exit status 143 for a later poll).
# HOLD_DIR defaults to /tmp/longmedia_hold (kept until the machine is reset).

set -u
dir="${HOLD_DIR:-/tmp/longmedia_hold}"
mkdir -p "$dir"

running() {
    [ -f "$dir/pid" ] && [ ! -f "$dir/rc" ] && kill -0 "$(cat "$dir/pid")" 2>/dev/null
}

case "${1:-}" in
start)
    [ $# -eq 2 ] || { echo "hold: start takes one command (quote it)" >&2; exit 2; }
    if running; then
        echo "hold: pid $(cat "$dir/pid") still runs; poll it first" >&2
        exit 2
    fi
    rm -f "$dir/rc" "$dir/pid" "$dir/offset" "$dir/log"
    printf '%s\n' "$2" > "$dir/command"
    setsid bash -c 'bash -c "$1" > "$2/log" 2>&1 < /dev/null; echo $? > "$2/rc"' hold "$2" "$dir" \
        > /dev/null 2>&1 < /dev/null &
    echo $! > "$dir/pid"
    echo "hold: started pid $(cat "$dir/pid"): $2"
    ;;
poll|status)
    wait_s="${2:-0}"
    [ "$1" = status ] && wait_s=0
    [ -f "$dir/pid" ] || { echo "hold: nothing was started in $dir" >&2; exit 2; }
    start_t=$(date +%s)
    while running && [ $(( $(date +%s) - start_t )) -lt "$wait_s" ]; do
        sleep 2
    done
    sleep 0.2   # the wrapper writes rc right after the command ends
    offset=$(cat "$dir/offset" 2>/dev/null || echo 0)
    size=$(stat -c %s "$dir/log" 2>/dev/null || echo 0)
    echo "hold: log bytes $offset..$size"
    tail -c +$((offset + 1)) "$dir/log" 2>/dev/null | tail -c 8000
    echo "$size" > "$dir/offset"
    if [ -n "${OUT:-}" ]; then
        cp -f "$dir/log" "$OUT/hold.log" 2>/dev/null
        n=0
        shift $(( $# >= 2 ? 2 : $# ))
        for pattern in "$@"; do
            for f in $pattern; do
                [ -f "$f" ] && [ "$n" -lt 7 ] && cp -f "$f" "$OUT/" && n=$((n + 1))
            done
        done
    fi
    if [ -f "$dir/rc" ]; then
        rc=$(cat "$dir/rc")
        echo "hold: ended with exit $rc after the command: $(cat "$dir/command")"
        exit "$rc"
    elif running; then
        echo "hold: still running (pid $(cat "$dir/pid")), $(( $(date +%s) - $(stat -c %Y "$dir/command") )) s since start"
        exit 3
    else
        echo "hold: pid $(cat "$dir/pid") is gone without an exit status (killed?)"
        exit 1
    fi
    ;;
stop)
    # the whole session the command runs in (its children included: a stage process, the ballast), so that the
    # device is free for the next command; never `pkill -f PATTERN` from a remote command, which matches the command's
    # own command line when the pattern is in it
    [ -f "$dir/pid" ] || { echo "hold: nothing was started in $dir" >&2; exit 2; }
    pid=$(cat "$dir/pid")
    if running; then
        kill -TERM -- "-$pid" 2>/dev/null
        for _ in 1 2 3 4 5 6 7 8 9 10; do running || break; sleep 0.5; done
        running && kill -KILL -- "-$pid" 2>/dev/null
        echo 143 > "$dir/rc"
        echo "hold: stopped pid $pid and its session"
    else
        echo "hold: pid $pid no longer runs"
    fi
    ;;
*)
    echo "usage: bash tools/gpu/hold.sh start 'COMMAND' | poll SECONDS [FILE ...] | status | stop" >&2
    exit 2
    ;;
esac
