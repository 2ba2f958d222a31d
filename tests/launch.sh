#!/usr/bin/env bash
# chorusrun + chorusCommInitFromEnv: a clean run, and a failing rank that
# must bring the whole job down quickly with its exit status.
set -uo pipefail
bin=$1
# A rank started through a wrapper: its child is stopped with it (each rank
# leads a process group, which gets the signal; until 2026-12-06 only the
# wrapper got it, and the child, reparented, ran on), and --tag-output does
# not wait for that child to close the pipes.
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
start=$(date +%s)
timeout 30 "$bin/chorusrun" -n 2 --tag-output sh -c \
  "if [ \$CHORUS_RANK = 1 ]; then while [ ! -s $tmp/child ]; do sleep 0.05; done; exit 3; fi; \
   sleep 20 & echo \$! > $tmp/child.new; mv $tmp/child.new $tmp/child; wait" >/dev/null 2>&1
rc=$?
took=$(( $(date +%s) - start ))
[ $rc -eq 3 ] && [ $took -le 8 ] || { echo "a wrapped rank's job returned $rc after $took s (want 3, quickly)"; exit 1; }
child=$(cat "$tmp/child")
sleep 0.2
if [ -n "$child" ] && kill -0 "$child" 2>/dev/null && ! grep -q '^State:.*Z' "/proc/$child/status" 2>/dev/null; then
  kill "$child"
  echo "rank 0's child $child outlived the job"
  exit 1
fi
# The failed rank's own children are stopped too (until 2026-12-06 only the
# other ranks' groups were).
timeout 30 "$bin/chorusrun" -n 2 sh -c \
  "sleep 20 & echo \$! > $tmp/own.\$CHORUS_RANK.new; mv $tmp/own.\$CHORUS_RANK.new $tmp/own.\$CHORUS_RANK; \
   if [ \$CHORUS_RANK = 1 ]; then while [ ! -s $tmp/own.0 ]; do sleep 0.05; done; exit 3; fi; wait" >/dev/null 2>&1
sleep 0.2
own=$(cat "$tmp/own.1")
if [ -n "$own" ] && kill -0 "$own" 2>/dev/null && ! grep -q '^State:.*Z' "/proc/$own/status" 2>/dev/null; then
  kill "$own"
  echo "the failed rank's child $own outlived the job"
  exit 1
fi
# Ctrl-C at a terminal signals the foreground process group: chorusrun, and
# not the ranks (sessions of their own), which get the one SIGINT it
# forwards (until 2026-12-06 each rank got two, the terminal's and
# chorusrun's). The terminal is played by kill -INT -PGID.
setsid "$bin/chorusrun" -n 2 sh -c "n=0; trap 'n=\$((n + 1))' INT; touch $tmp/ready.\$CHORUS_RANK; \
  while [ ! -e $tmp/go ]; do sleep 0.05; done; sleep 0.3; echo \$n > $tmp/ints.\$CHORUS_RANK" &
launcher=$!
for i in $(seq 100); do [ -e "$tmp/ready.0" ] && [ -e "$tmp/ready.1" ] && break; sleep 0.05; done
kill -INT -- -"$launcher"
touch "$tmp/go"
wait "$launcher"
for r in 0 1; do
  [ "$(cat "$tmp/ints.$r" 2>/dev/null)" = 1 ] || { echo "rank $r got '$(cat "$tmp/ints.$r" 2>/dev/null)' SIGINTs for one Ctrl-C"; exit 1; }
done
# A rank whose chorusrun is killed outright dies with it.
"$bin/chorusrun" -n 1 sh -c "echo \$\$ > $tmp/orphan; exec sleep 20" &
launcher=$!
for i in $(seq 100); do [ -s "$tmp/orphan" ] && break; sleep 0.05; done
kill -KILL "$launcher"
sleep 0.3
orphan=$(cat "$tmp/orphan")
if kill -0 "$orphan" 2>/dev/null && ! grep -q '^State:.*Z' "/proc/$orphan/status" 2>/dev/null; then
  kill "$orphan"
  echo "a rank outlived its chorusrun (SIGKILL)"
  exit 1
fi
out=$("$bin/chorusrun" -n 3 --tag-output "$bin/test_launch") || { echo "clean run failed: $out"; exit 1; }
for r in 0 1 2; do grep -qx "\[$r\] rank $r of 3: ok" <<<"$out" || { echo "rank $r missing: $out"; exit 1; }; done
start=$(date +%s)
"$bin/chorusrun" -n 3 "$bin/test_launch" fail; rc=$?
took=$(( $(date +%s) - start ))
[ $rc -eq 3 ] || { echo "chorusrun returned $rc, expected 3"; exit 1; }
[ $took -lt 10 ] || { echo "chorusrun took $took s to stop the job"; exit 1; }
# A rank that ignores SIGTERM gets SIGKILL, and a stopped one is woken to
# die: chorusrun returns the failed rank's status once every rank is gone.
for how in 'trap "" TERM; exec sleep 30' 'kill -STOP $$; exec sleep 30'; do
  start=$(date +%s)
  timeout 30 "$bin/chorusrun" -n 2 sh -c "if [ \$CHORUS_RANK = 1 ]; then sleep 0.5; exit 3; fi; $how" 2>/dev/null
  rc=$?
  took=$(( $(date +%s) - start ))
  [ $rc -eq 3 ] || { echo "chorusrun over a rank that does '$how' returned $rc, expected 3"; exit 1; }
  [ $took -le 8 ] || { echo "chorusrun over a rank that does '$how' took $took s"; exit 1; }
done
# -n takes a whole number, nothing else (until 2026-12-06: atoi, so 2x ran 2 ranks).
for n in 2x 1e3 4294967298 0 -1 '' ' 2' +2; do
  msg=$("$bin/chorusrun" -n "$n" true 2>&1)
  rc=$?
  [ $rc -eq 2 ] && grep -q "chorusrun: -n wants a number of ranks" <<<"$msg" ||
    { echo "chorusrun -n '$n' returned $rc: $msg"; exit 1; }
done
# No launcher environment: a clear error, not a hang.
msg=$(env -u CHORUS_RANK -u RANK NCCL_DEBUG=WARN "$bin/test_launch" 2>&1)
grep -q "no launcher environment: set CHORUS_RANK" <<<"$msg" || { echo "no error without a launcher: $msg"; exit 1; }
# A perf tool run alone asks whether a launcher is there: no WARN for that.
msg=$(env -u CHORUS_RANK -u RANK NCCL_DEBUG=WARN "$bin/all_reduce_perf" -b 8 -e 8 2>&1) || { echo "all_reduce_perf alone failed: $msg"; exit 1; }
! grep -q "NCCL WARN" <<<"$msg" || { echo "all_reduce_perf alone warned: $msg"; exit 1; }
# NCCL's version line: once, rank 0's, at WARN (not each rank's, nor
# ncclGetUniqueId's, nor a split child's rank 0's); each rank's at INFO.
for level in WARN:1 INFO:3; do
  got=$(NCCL_DEBUG=${level%:*} "$bin/chorusrun" -n 3 "$bin/test_launch" split 2>&1 | grep -c "NCCL version") || true
  [ "$got" = "${level#*:}" ] || { echo "NCCL_DEBUG=${level%:*}: $got version lines from 3 ranks, expected ${level#*:}"; exit 1; }
done
# A random secret per job, the same on every rank; one given is kept.
# The rendezvous (NCCL_COMM_ID) and torch's store (MASTER_PORT) on two ports:
# on one, rank 0's store held the port its chorus root needs.
ports=$("$bin/chorusrun" -n 1 sh -c 'echo "${NCCL_COMM_ID##*:} $MASTER_PORT"')
read -r idPort masterPort <<<"$ports"
[[ $idPort =~ ^[0-9]+$ && $masterPort =~ ^[0-9]+$ && $idPort != "$masterPort" ]] ||
  { echo "chorusrun gave NCCL_COMM_ID and MASTER_PORT ports '$ports' (want two different ones)"; exit 1; }
# Both ports stay taken from chorusrun's pick on: nothing else binds them
# before rank 0 listens (another job beside this one once took one there).
taken=$("$bin/chorusrun" -n 1 sh -c 'for p in "${NCCL_COMM_ID##*:}" "$MASTER_PORT"; do python3 -c "
import socket, sys
try: socket.socket().bind((\"127.0.0.1\", int(sys.argv[1]))); print(\"free\")
except OSError: print(\"taken\")" "$p"; done' | sort -u)
[ "$taken" = taken ] || { echo "chorusrun's ports were free for others to bind while its job ran: '$taken'"; exit 1; }
secrets=$("$bin/chorusrun" -n 2 sh -c 'echo "$CHORUS_SECRET"' | sort -u)
[[ $secrets =~ ^[0-9a-f]{32}$ ]] || { echo "chorusrun's ranks got CHORUS_SECRET '$secrets'"; exit 1; }
again=$("$bin/chorusrun" -n 1 sh -c 'echo "$CHORUS_SECRET"')
[ "$again" != "$secrets" ] || { echo "two jobs got the same secret $again"; exit 1; }
kept=$(CHORUS_SECRET=mine "$bin/chorusrun" -n 1 sh -c 'echo "$CHORUS_SECRET"')
[ "$kept" = mine ] || { echo "a given CHORUS_SECRET became '$kept'"; exit 1; }
# The secret is never logged.
msg=$(CHORUS_SECRET=hush NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=ENV "$bin/chorusrun" -n 2 "$bin/test_launch" 2>&1) ||
  { echo "run with a secret failed: $msg"; exit 1; }
grep -q "CHORUS_SECRET set by environment to (a value not logged)" <<<"$msg" || { echo "secret not said: $msg"; exit 1; }
! grep -q hush <<<"$msg" || { echo "the secret was logged: $msg"; exit 1; }
# Without one, the well-known secret is said once at INFO.
msg=$(env -u CHORUS_SECRET CHORUS_RANK=0 CHORUS_NRANKS=1 NCCL_COMM_ID=127.0.0.1:$((20000 + RANDOM % 20000)) \
  NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=BOOTSTRAP "$bin/test_launch" 2>&1)
[ "$(grep -c "uses the well-known secret" <<<"$msg")" -eq 1 ] || { echo "well-known secret not said once: $msg"; exit 1; }
# A rendezvous set for a job across hosts is not the one chorusrun's ranks
# use (they form a job of this host alone): it says so, and the job runs.
msg=$(NCCL_COMM_ID=10.1.2.3:29500 "$bin/chorusrun" -n 2 "$bin/test_launch" 2>&1) ||
  { echo "chorusrun with NCCL_COMM_ID set failed: $msg"; exit 1; }
grep -q "chorusrun: NCCL_COMM_ID=10.1.2.3:29500 is replaced by this job's own rendezvous" <<<"$msg" ||
  { echo "chorusrun did not say it replaced NCCL_COMM_ID: $msg"; exit 1; }
echo "launch: passed"
