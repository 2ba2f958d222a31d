#!/usr/bin/env bash
# Several "hosts" on one machine, for tests and benchmarks (sourced by
# tests/netns.sh and bench/): each host is a network namespace ${tag}h0,
# ${tag}h1, ... (NETNS_HOSTS of them, default 3) with its own eth0 (a veth
# pair into a bridge in the switch namespace ${tag}sw, port p<h>) at
# 10.77.0.(h+1)/24 and fd77::(h+1)/64.
# Calls skip (exit 77: ctest's "skipped") when namespaces cannot be made
# here, never a silent pass; everything made is removed on exit.
tag=ch$$
netnsHosts=$(seq 0 $((${NETNS_HOSTS:-3} - 1)))
skip() {
  echo "SKIP: $*"
  exit 77
}
[ "$(id -u)" = 0 ] || skip "network namespaces need root"
command -v ip >/dev/null || skip "iproute2 (ip) is not installed"
err=$(ip netns add ${tag}sw 2>&1) || skip "cannot create a network namespace: $err"

cleanup() {
  for ns in $(ip netns list | awk '{print $1}' | grep "^${tag}"); do
    ip netns pids "$ns" 2>/dev/null | xargs -r kill -9 2>/dev/null
    ip netns del "$ns" 2>/dev/null
  done
  rm -rf "$logs"
}
logs=$(mktemp -d /tmp/chorus-netns-XXXXXX)
trap cleanup EXIT
trap 'exit 1' INT TERM

ip -n ${tag}sw link add br0 type bridge || skip "cannot create a bridge"
ip -n ${tag}sw link set br0 up
# host h: namespace ${tag}h$h, eth0 = 10.77.0.(h+1)/24 and fd77::(h+1)/64.
for h in $netnsHosts; do
  ns=${tag}h$h
  ip netns add $ns
  ip -n $ns link add eth0 type veth peer name p$h netns ${tag}sw || skip "cannot create veth pairs"
  ip -n ${tag}sw link set p$h master br0 up
  ip -n $ns addr add 10.77.0.$((h + 1))/24 dev eth0
  ip -n $ns addr add fd77::$((h + 1))/64 dev eth0 nodad
  ip -n $ns link set eth0 up
  ip -n $ns link set lo up
done
# A second interface that sorts first: the automatic choice must still take
# the one on NCCL_COMM_ID's subnet (eth0), not this one, which leads nowhere.
for h in $netnsHosts; do
  if ip -n ${tag}h$h link add aa0 type dummy 2>/dev/null; then
    ip -n ${tag}h$h addr add 10.99.0.$((h + 1))/24 dev aa0
    ip -n ${tag}h$h link set aa0 up
  fi
done
# The bridge forwards once its ports are up; wait until host 0 reaches the others.
if command -v ping >/dev/null; then
  for h in $netnsHosts; do
    [ "$h" = 0 ] && continue
    for i in $(seq 50); do
      ip netns exec ${tag}h0 ping -c1 -W1 10.77.0.$((h + 1)) >/dev/null 2>&1 && break
      sleep 0.1
    done
  done
else
  sleep 1
fi
# Each host gets its own hostname too where UTS namespaces can be made.
uts=0
unshare --uts true 2>/dev/null && uts=1


fail=0
port=29500

# hostrun H CMD...: CMD on host H, in its own network and UTS namespaces
# (hostname hostH, as a real host would have its own name).
hostrun() {
  local h=$1
  shift
  if ((uts)); then
    ip netns exec ${tag}h$h unshare --uts sh -c 'hostname "$0"; exec "$@"' host$h "$@"
  else
    ip netns exec ${tag}h$h "$@"
  fi
}

# launch HOSTS RANKS_PER_HOST ROOT_ADDR DEADLINE CMD...: one process per rank,
# rank r on host r / RANKS_PER_HOST (PLACE=alternate: on host r % HOSTS);
# every rank must exit 0.
launch() {
  local hosts=$1 rph=$2 root=$3 deadline=$4
  shift 4
  local n=$((hosts * rph)) pids=() r t0=$SECONDS
  port=$((port + 1))
  for ((r = 0; r < n; r++)); do
    local h=$((r / rph))
    [ "${PLACE:-}" = alternate ] && h=$((r % hosts))
    hostrun $h env NCCL_HOSTID=host$h NCCL_COMM_ID=$root:$port CHORUS_RANK=$r CHORUS_NRANKS=$n \
      CHORUS_TEST_LAUNCHED=1 NCCL_DEBUG=${NCCL_DEBUG:-WARN} NCCL_DEBUG_SUBSYS=INIT,NET CHORUS_TIMEOUT=${CHORUS_TIMEOUT:-60} timeout $deadline "$@" >"$logs/rank$r" 2>&1 &
    pids+=($!)
  done
  local bad=0
  for ((r = 0; r < n; r++)); do
    wait ${pids[$r]} || { bad=1; echo "  rank $r exited with $?"; tail -5 "$logs/rank$r"; }
  done
  echo "$( ((bad)) && echo FAILED || echo ok): $hosts hosts x $rph ranks, $((SECONDS - t0)) s: $*"
  ((bad)) && fail=1
  return $bad
}


# openmpiTcp PROGRAM ARGS...: PROGRAM under Open MPI over TCP on hosts 0 and
# 1, one process each; mpirun starts its daemon in host 1's namespace
# through an agent written to $logs instead of ssh (bench/compare_net,
# bench/net_ab).
openmpiTcp() {
  cat >"$logs/netns-rsh" <<EOR
#!/bin/sh
while [ "\${1#-}" != "\$1" ]; do shift; done
host=\$1; shift
case \$host in 10.77.0.1) ns=${tag}h0 ;; *) ns=${tag}h1 ;; esac
exec ip netns exec \$ns sh -c "\$*"
EOR
  chmod +x "$logs/netns-rsh"
  ip netns exec ${tag}h0 mpirun.openmpi --allow-run-as-root --host 10.77.0.1,10.77.0.2 -np 2 --bind-to none \
    --mca plm_rsh_agent "$logs/netns-rsh" --mca btl tcp,self --mca btl_tcp_if_include eth0 \
    --mca oob_tcp_if_include eth0 "$@"
}
