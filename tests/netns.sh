#!/usr/bin/env bash
# Several "hosts" on one machine: each host is a network namespace with its
# own eth0 (a veth pair into a bridge in a switch namespace), its own
# address and its own NCCL_HOSTID, so ranks on different hosts talk over
# the socket transport and ranks on one host over shared memory.
#
#   netns.sh BIN suite     the correctness suites (test_coll, test_p2p,
#                          test_alltoall, every perf tool with -c) on 2 and 3
#                          hosts with 1 and 2 ranks each, IPv4 and IPv6;
#                          NCCL_ALGO=Tree across hosts (chains inside)
#   netns.sh BIN shaped    the same AllReduce check over a 1 Gbit/s tbf link
#   netns.sh BIN linkdown  eth0 of one host goes down mid-run: every rank
#                          must fail (not hang) within the timeout
#   netns.sh BIN ifname    one rank's NCCL_SOCKET_IFNAME picks an interface the
#                          other hosts cannot reach: every rank fails soon
#                          (not at the timeout), the rank named by those
#                          that cannot reach it
#   netns.sh BIN drain     an AllReduce, then destroy at once, over a 10 Mbit/s
#                          link: every rank succeeds (the goodbye never
#                          overtakes the last bytes)
#
# Exit 77 (ctest: skipped) when namespaces cannot be made here: never a
# silent pass. Everything made is removed on exit, failure included.
set -uo pipefail
bin=$1
mode=${2:-suite}
. "$(dirname "$0")/netns_lib.sh"

case $mode in
suite)
  # Logs show the transports and the interface picked: eth0 on every host
  # (not aa0, which sorts first), sockets across hosts, memory within one.
  NCCL_DEBUG=INFO launch 2 2 10.77.0.1 120 "$bin/all_reduce_perf" -b 8 -e 64K -f 8 -n 1 -c 1
  for r in 0 1 2 3; do
    # The ring 0 1 2 3: ranks 1 and 3 send to the next host, 0 and 2 within theirs.
    for want in "NET/Socket : Using \[0\]eth0:10.77.0.$((r / 2 + 1))<0>" "Bootstrap : Using eth0:10.77.0.$((r / 2 + 1))<0>" \
      "Channel 00/0 : $r\[0\] -> $(((r + 1) % 4))\[0\] via $([ $((r % 2)) = 1 ] && echo NET/Socket || echo SHM)"; do
      grep -q "$want" "$logs/rank$r" || { echo "FAILED: rank $r's log lacks '$want'"; fail=1; }
    done
    # The 2 hosts share this machine's kernel, so its CPUs: with fewer than
    # 4, each rank knows that its peers wait for its core.
    if [ "$(nproc)" -lt 4 ] && ! grep -q "4 ranks on this machine's .* CPUs (2 on this host): waits yield" "$logs/rank$r"; then
      echo "FAILED: rank $r did not count the other host's ranks on this machine's $(nproc) CPUs"
      fail=1
    fi
  done
  for cfg in "2 1" "2 2" "3 1" "3 2"; do
    set -- $cfg
    n=$(($1 * $2))
    launch $1 $2 10.77.0.1 300 "$bin/test_coll" $n fork $([ $n -gt 4 ] && echo quick)
    launch $1 $2 10.77.0.1 120 "$bin/test_p2p" $n
    launch $1 $2 10.77.0.1 120 "$bin/test_alltoall" $n
  done
  # Every perf tool with validation: every root on 3 hosts x 2 ranks; every
  # datatype on 2 hosts (test_coll above covers every dtype x op as well).
  for t in all_reduce all_gather broadcast reduce reduce_scatter sendrecv alltoall gather scatter; do
    launch 3 2 10.77.0.1 120 "$bin/${t}_perf" -b 8 -e 1M -f 8 -n 2 -w 1 -c 1 -r -1
    launch 2 1 10.77.0.1 120 "$bin/${t}_perf" -b 8 -e 256K -f 32 -n 1 -w 1 -c 1 -d all
  done
  launch 2 2 10.77.0.1 120 "$bin/hypercube_perf" -b 64 -e 64K -f 32 -n 2
  # Ranks placed alternately (0 and 2 on host 0, 1 and 3 on host 1): the
  # rings visit a host's ranks together, 0 2 1 3, crossing between hosts
  # twice, not four times; and in rank order with CHORUS_RING_ORDER=rank.
  PLACE=alternate NCCL_DEBUG=INFO launch 2 2 10.77.0.1 120 "$bin/all_reduce_perf" -b 8 -e 1M -f 8 -n 1 -c 1
  grep -q "Channel 00/02 : 0 2 1 3" "$logs/rank0" || { echo "FAILED: rank 0's ring is not 0 2 1 3"; fail=1; }
  for pair in "0 2 SHM" "2 1 NET/Socket" "1 3 SHM" "3 0 NET/Socket"; do
    set -- $pair
    grep -q "Channel 00/0 : $1\[0\] -> $2\[0\] via $3" "$logs/rank$1" ||
      { echo "FAILED: rank $1 does not send to $2 via $3 on the host-aware ring"; fail=1; }
  done
  PLACE=alternate launch 2 2 10.77.0.1 300 "$bin/test_coll" 4 fork quick
  # chorus-info --topo across the namespaces: SHM within a host, NET/eth0 between.
  PLACE=alternate launch 2 2 10.77.0.1 60 "$bin/chorus-info" --topo
  grep -q "^rank0 *SELF *NET/eth0 *SHM *NET/eth0 " "$logs/rank0" &&
    grep -q "^rank1 *NET/eth0 *SELF *NET/eth0 *SHM " "$logs/rank0" &&
    [ "$(grep -c '^# host ' "$logs/rank0")" = 2 ] ||
    { echo "FAILED: chorus-info --topo across hosts"; cat "$logs/rank0"; fail=1; }
  PLACE=alternate launch 3 2 10.77.0.1 120 "$bin/broadcast_perf" -b 8 -e 1M -f 8 -n 2 -w 1 -c 1 -r -1
  PLACE=alternate CHORUS_RING_ORDER=rank NCCL_DEBUG=INFO launch 2 2 10.77.0.1 120 "$bin/all_reduce_perf" -b 8 -e 1M -f 8 -n 1 -c 1
  grep -q "Channel 00/02 : 0 1 2 3" "$logs/rank0" || { echo "FAILED: CHORUS_RING_ORDER=rank's ring is not 0 1 2 3"; fail=1; }
  # Trees across hosts, each host's ranks a chain (a head with up to three children).
  NCCL_ALGO="allreduce,broadcast,reduce:tree" launch 2 3 10.77.0.1 300 "$bin/test_coll" 6 fork quick
  NCCL_ALGO="allreduce,broadcast,reduce:tree" launch 3 2 10.77.0.1 120 "$bin/reduce_perf" -b 8 -e 1M -f 8 -n 2 -w 1 -c 1 -r -1
  # Recursive doubling AllReduce among the hosts' first ranks, each adding its host's
  # inputs and handing back the result; hosts of consecutive and of alternate ranks.
  NCCL_ALGO="allreduce:recdoubling" launch 2 3 10.77.0.1 300 "$bin/test_coll" 6 fork quick
  PLACE=alternate NCCL_ALGO="allreduce:recdoubling" launch 3 2 10.77.0.1 300 "$bin/test_coll" 6 fork quick
  # IPv6 all the way: rendezvous, bootstrap mesh and transport.
  NCCL_SOCKET_FAMILY=AF_INET6 launch 2 1 "[fd77::1]" 120 "$bin/all_reduce_perf" -b 8 -e 4M -f 8 -n 2 -c 1 -o all
  NCCL_SOCKET_FAMILY=AF_INET6 launch 3 1 "[fd77::1]" 120 "$bin/test_p2p" 3
  # Several data sockets per connection across hosts.
  NCCL_NSOCKS_PERTHREAD=4 launch 2 1 10.77.0.1 120 "$bin/all_reduce_perf" -b 8 -e 16M -f 8 -n 2 -c 1
  # Helper threads moving the data sockets' pieces.
  NCCL_SOCKET_NTHREADS=2 NCCL_NSOCKS_PERTHREAD=2 launch 2 2 10.77.0.1 120 "$bin/all_reduce_perf" -b 8 -e 16M -f 8 -n 2 -c 1
  NCCL_SOCKET_NTHREADS=2 NCCL_NSOCKS_PERTHREAD=2 launch 3 1 10.77.0.1 120 "$bin/sendrecv_perf" -b 8 -e 16M -f 8 -n 2 -c 1
  ;;
shaped)
  # tbf on both directions of host 1's link: 1 Gbit/s, nothing assumes loopback speed.
  ip netns exec ${tag}h1 tc qdisc add dev eth0 root tbf rate 1gbit burst 64kb latency 50ms ||
    skip "tc tbf is not available"
  ip netns exec ${tag}sw tc qdisc add dev p1 root tbf rate 1gbit burst 64kb latency 50ms
  launch 2 1 10.77.0.1 300 "$bin/all_reduce_perf" -b 8 -e 32M -f 4 -n 3 -w 1 -c 1
  cat "$logs/rank0"
  launch 2 2 10.77.0.1 300 "$bin/test_coll" 4 fork quick
  ;;
ifname)
  # Host 1 gets eth1 on 10.89.0.0/24, a veth left off the bridge: a subnet
  # no other host has a route to. NCCL_SOCKET_IFNAME=eth1 (or lo) on one
  # rank, CHORUS_TIMEOUT=30: every rank must fail within 15 s, and some
  # rank must say it cannot reach that one, naming it.
  ip -n ${tag}h1 link add eth1 type veth peer name q1 netns ${tag}sw || skip "cannot create a second veth"
  ip -n ${tag}h1 addr add 10.89.0.2/24 dev eth1
  ip -n ${tag}h1 link set eth1 up
  ip -n ${tag}sw link set q1 up
  misconfigured() { # misconfigured HOSTS RANKS_PER_HOST BAD_RANK IFNAME
    local n=$(($1 * $2)) pids=() r t0=$SECONDS named=0
    port=$((port + 1))
    for ((r = 0; r < n; r++)); do
      local h=$((r / $2)) ifn=
      [ $r = "$3" ] && ifn="NCCL_SOCKET_IFNAME=$4"
      hostrun $h env $ifn NCCL_HOSTID=host$h NCCL_COMM_ID=10.77.0.1:$port CHORUS_RANK=$r CHORUS_NRANKS=$n \
        NCCL_DEBUG=WARN CHORUS_TIMEOUT=30 timeout 60 "$bin/all_reduce_perf" -b 8 -e 8 -n 1 >"$logs/rank$r" 2>&1 &
      pids+=($!)
    done
    for ((r = 0; r < n; r++)); do
      if wait ${pids[$r]}; then
        echo "FAILED: rank $r succeeded with rank $3 on $4"
        fail=1
      fi
      grep -qE "cannot (reach|connect to) rank $3 " "$logs/rank$r" && named=1
      # and every rank's error names a rank (host and pid), never just "remote process exited"
      if ! grep -qE "NCCL WARN.*rank [0-9]+ \(host [^ ]+, pid [0-9]+\)" "$logs/rank$r"; then
        echo "FAILED: rank $r's error names no rank ($1 hosts x $2 ranks, rank $3 on $4):"
        grep -h 'NCCL WARN' "$logs/rank$r"
        fail=1
      fi
    done
    if [ $((SECONDS - t0)) -gt 15 ] || [ $named = 0 ]; then
      echo "FAILED: rank $3 on $4 ($1 hosts x $2 ranks): $((SECONDS - t0)) s, named: $named"
      grep -h -m1 'NCCL WARN' "$logs"/rank*
      fail=1
    else
      echo "ok: rank $3 on $4 ($1 hosts x $2 ranks): every rank failed within $((SECONDS - t0)) s, $4's rank named"
    fi
  }
  misconfigured 3 1 1 eth1 # the bootstrap mesh
  misconfigured 2 2 2 eth1 # the socket transport (the bootstrap's own interface reaches the others)
  misconfigured 2 1 1 lo
  ;;
drain)
  # A rank returns from its last AllReduce with bytes still queued for the
  # slow link and destroys at once; its goodbye, on another connection,
  # must not reach the peer before them (before, 2 runs in 4 failed the
  # peer with "destroyed its communicator while rank 0 waited": the short
  # tbf queue drops, and retransmissions leave the link quiet for a while).
  ip netns exec ${tag}h1 tc qdisc add dev eth0 root tbf rate 10mbit burst 16kb latency 20ms ||
    skip "tc tbf is not available"
  ip netns exec ${tag}sw tc qdisc add dev p1 root tbf rate 10mbit burst 16kb latency 20ms
  for run in 1 2; do
    launch 2 2 10.77.0.1 120 "$bin/test_lastcall" 2097152
  done
  launch 2 2 10.77.0.1 120 "$bin/test_lastcall" 1048576 finalize
  ;;
linkdown)
  # Host 1's link goes down while AllReduce runs: every rank must end with
  # an error within CHORUS_TIMEOUT (+ margin), none may hang or pass.
  export CHORUS_TIMEOUT=3
  port=$((port + 1))
  pids=()
  start=$(date +%s.%N)
  for r in 0 1 2 3; do
    h=$((r / 2))
    hostrun $h env NCCL_HOSTID=host$h NCCL_COMM_ID=10.77.0.1:$port CHORUS_RANK=$r CHORUS_NRANKS=4 NCCL_DEBUG=WARN \
      timeout 60 "$bin/all_reduce_perf" -b 64M -e 64M -n 1000000 -w 0 -c 0 >"$logs/rank$r" 2>&1 &
    pids+=($!)
  done
  sleep 2
  ip -n ${tag}h1 link set eth0 down
  down=$(date +%s.%N)
  for r in 0 1 2 3; do
    wait ${pids[$r]}
    rc=$?
    end=$(date +%s.%N)
    t=$(awk "BEGIN{printf \"%.1f\", $end - $down}")
    if [ $rc -eq 0 ] || [ $rc -eq 124 ] || [ $rc -eq 137 ]; then
      echo "FAILED: rank $r exited with $rc (0: no error; 124/137: hung until killed)"
      tail -5 "$logs/rank$r"
      fail=1
    else
      echo "ok: rank $r failed with exit $rc, $t s after the link went down: $(grep -m1 -o 'NCCL WARN.*' "$logs/rank$r" | cut -c1-160)"
    fi
  done
  ;;
exec) # netns.sh BIN exec 'commands': a shell with the hosts set up, for experiments
  eval "$3"
  ;;
*)
  echo "unknown mode $mode"
  exit 2
  ;;
esac
exit $fail
