#!/usr/bin/env bash
# A cluster of "hosts" on one machine, for multi-host tests: each host is a network namespace
# with its own hostname and one link-local address (169.254.X.i/24, never an address that could
# leave the machine) on a bridge. OpenMPI starts ranks across them as across machines: an rsh
# agent enters the host's namespace (as ssh would log in), and the MCA settings keep every
# byte on TCP over the bridge (btl tcp,self: no shared memory between hosts).
#
#   netns-cluster.sh up N [SLOTS]     make hosts 1..N (SLOTS ranks each, default 2), print
#                                     the hostfile's path
#   netns-cluster.sh down             remove the hosts, the bridge and the state
#   netns-cluster.sh exec HOST CMD... run CMD on HOST (its namespace and hostname)
#   netns-cluster.sh mpirun ARGS...   mpirun across the hosts (hostfile, agent, MCA set)
#   netns-cluster.sh cut HOST         cut HOST's link (packets dropped, as a pulled cable)
#   netns-cluster.sh heal HOST        restore it
#   netns-cluster.sh loss HOST P      drop P% of the packets on HOST's link, both ways (tc netem,
#                                     or nftables where the kernel has no netem)
#   netns-cluster.sh delay HOST MS    delay every packet on HOST's link by MS ms, both ways (tc
#                                     netem, or where the kernel has none $NETNS_CLUSTER_SHAPER:
#                                     tests/support/nfq_shaper; exit 3 with neither)
#   netns-cluster.sh clear HOST       take loss and delay off HOST's link
#   netns-cluster.sh kill HOST        SIGKILL every process on HOST
#   netns-cluster.sh pids [HOST]      the processes still running on HOST (or on any node)
#   netns-cluster.sh tcp_retries2 N   every node's net.ipv4.tcp_retries2 (how soon TCP gives up)
#   netns-cluster.sh check            exit 0 if namespaces can be made here, else say why
#
# Hosts are named $NETNS_CLUSTER (default "itc") + "h" + i, so two clusters with different
# names can exist at once (tests running in parallel). mpirun runs on a head node of its own
# ($NETNS_CLUSTER + "head", .254, no ranks), as on a cluster's login node; the machine's own
# network namespace is not on the cluster's bridge. Needs root, iproute2 and unshare.
#
# Failure detection: every node's TCP gives up on a peer after $NETNS_CLUSTER_TCP_RETRIES2
# retransmissions (net.ipv4.tcp_retries2, default 5 here: about 13 s; Linux's 15 is about 15
# minutes), and OpenMPI's daemons send keepalives after 5 s idle, so a cut link ends the
# launcher's own connections in seconds too. docs/cluster.md says what a real cluster needs.
set -euo pipefail

name=${NETNS_CLUSTER:-itc}
state=/run/netns-cluster/$name
# the bridge's /24: a name's own third octet (1..250), so two clusters never share a subnet
octet=$(($(printf '%s' "$name" | cksum | cut -d' ' -f1) % 250 + 1))
subnet=169.254.$octet
bridge=${name}br

host_ns() { printf '%sh%s' "$name" "$1"; }
head=${name}head
retries2=${NETNS_CLUSTER_TCP_RETRIES2:-5}
die() {
  echo "netns-cluster: $*" >&2
  exit 2
}
# HOST may be given as the host's name (itch2) or its number (2)
ns_of() {
  case $1 in
  "$name"h[0-9]* | "$head") printf '%s' "$1" ;;
  head) printf '%s' "$head" ;;
  [0-9]*) host_ns "$1" ;;
  *) die "no host '$1' in cluster '$name'" ;;
  esac
  return 0
}
num_of() { local ns; ns=$(ns_of "$1") && printf '%s' "${ns#"$name"h}"; }

check() {
  [[ $(id -u) -eq 0 ]] || {
    echo "not root (network namespaces need CAP_SYS_ADMIN)"
    return 1
  }
  command -v ip >/dev/null && command -v unshare >/dev/null || {
    echo "iproute2 or unshare missing"
    return 1
  }
  local probe=${name}probe$$
  if ! ip netns add "$probe" 2>/dev/null; then
    echo "ip netns add fails here (no CAP_SYS_ADMIN in this container?)"
    return 1
  fi
  local ok=0
  ip link add "${probe:0:10}v" type veth peer name "${probe:0:10}p" 2>/dev/null || ok=1
  ip link del "${probe:0:10}v" 2>/dev/null || true
  ip netns del "$probe"
  [[ $ok -eq 0 ]] || echo "veth pairs cannot be made here"
  return $ok
}

down() {
  local ns
  for ns in $(ip netns list 2>/dev/null | awk '{print $1}' | grep -E "^${name}h[0-9]+$" || true); do
    ip netns pids "$ns" 2>/dev/null | xargs -r kill -9 2>/dev/null || true
    nft delete table netdev "${ns}loss" 2>/dev/null || true
    ip link del "${ns}v" 2>/dev/null || true
    ip netns del "$ns" 2>/dev/null || true
  done
  if [[ -e /run/netns/$head ]]; then
    ip netns pids "$head" 2>/dev/null | xargs -r kill -9 2>/dev/null || true
    ip link del "${head}v" 2>/dev/null || true
    ip netns del "$head" 2>/dev/null || true
  fi
  ip link del "$bridge" 2>/dev/null || true
  rm -rf "$state"
}

# node NS I: namespace NS on the bridge at $subnet.I
node() {
  local ns=$1
  ip netns add "$ns"
  ip link add "${ns}v" type veth peer name eth0 netns "$ns"
  ip link set "${ns}v" master "$bridge" up
  ip -n "$ns" addr add "$subnet.$2/24" dev eth0
  ip -n "$ns" link set eth0 up
  ip -n "$ns" link set lo up
  ip netns exec "$ns" sysctl -qw net.ipv4.tcp_retries2="$retries2"
}

up() {
  local n=${1:?up N [SLOTS]} slots=${2:-2}
  [[ $n =~ ^[0-9]+$ && $n -ge 1 && $n -le 200 ]] || die "up: N must be 1..200, got '$n'"
  local why
  why=$(check) || die "cannot make namespaces: $why"
  down
  mkdir -p "$state"
  ip link add "$bridge" type bridge
  ip link set "$bridge" up
  : >"$state/hostfile"
  node "$head" 254
  local i
  for ((i = 1; i <= n; i++)); do
    node "$(host_ns "$i")" "$i"
    echo "$(host_ns "$i") slots=$slots" >>"$state/hostfile"
  done
  # the agent mpirun calls as it would call ssh: HOST, then the command as shell words
  cat >"$state/agent" <<EOF
#!/bin/sh
host=\$1
shift
exec "$(readlink -f "$0")" exec "\$host" sh -c "\$*"
EOF
  chmod +x "$state/agent"
  echo "$state/hostfile"
}

# CMD runs in the host's network namespace with the host's name as its hostname (its own UTS
# namespace), so gethostname() and MPI's node names tell the hosts apart.
host_exec() {
  local ns
  ns=$(ns_of "${1:?exec HOST CMD...}")
  shift
  [[ -e /run/netns/$ns ]] || die "host $ns is not up (netns-cluster.sh up N)"
  exec ip netns exec "$ns" unshare --uts sh -c 'hostname "$0" && exec "$@"' "$ns" "$@"
}

run_mpirun() {
  [[ -s $state/hostfile ]] || die "cluster '$name' is not up (netns-cluster.sh up N)"
  host_exec "$head" mpirun --allow-run-as-root --hostfile "$state/hostfile" \
    --mca plm_rsh_agent "$state/agent" \
    --mca btl tcp,self --mca btl_tcp_if_include "$subnet.0/24" \
    --mca oob_tcp_if_include "$subnet.0/24" \
    --mca oob_tcp_keepalive_time 5 --mca oob_tcp_keepalive_intvl 2 --mca oob_tcp_keepalive_probes 3 \
    "$@"
}

# whether this kernel has tc netem (CONFIG_NET_SCH_NETEM)
has_netem() {
  local probe=${name}nq$$
  ip link add "$probe" type dummy 2>/dev/null || return 1
  local rc=0
  tc qdisc add dev "$probe" root netem delay 1ms 2>/dev/null || rc=1
  ip link del "$probe"
  return $rc
}

# HOST's link as its state files say: tc netem on both ends; where the kernel has no netem, a
# delay goes through $NETNS_CLUSTER_SHAPER (tests/support/nfq_shaper: the host's packets, in
# and out, held in a netfilter queue), and loss alone through nftables, dropping packets on both
# ends' ingress (into the host, and out of it into the bridge)
shape() {
  local ns=$1 loss delay
  loss=$(cat "$state/$ns.loss" 2>/dev/null || echo 0)
  delay=$(cat "$state/$ns.delay" 2>/dev/null || echo 0)
  if has_netem; then
    local args=(delay "${delay}ms" loss "${loss}%")
    tc qdisc replace dev "${ns}v" root netem "${args[@]}"
    ip netns exec "$ns" tc qdisc replace dev eth0 root netem "${args[@]}"
    return
  fi
  unshape "$ns"
  if [[ $delay != 0 ]]; then
    ip netns exec "$ns" "$NETNS_CLUSTER_SHAPER" 0 "$delay" "$loss" </dev/null >/dev/null 2>"$state/$ns.shaper.err" &
    echo $! >"$state/$ns.shaper"
    ip netns exec "$ns" iptables -A INPUT -j NFQUEUE --queue-num 0 --queue-bypass
    ip netns exec "$ns" iptables -A OUTPUT -j NFQUEUE --queue-num 0 --queue-bypass
    return
  fi
  [[ $loss == 0 ]] && return
  command -v nft >/dev/null || die "loss: this kernel has no tc netem, and nft (nftables) is not installed"
  nft -f - <<EOF
table netdev ${ns}loss {
  chain in { type filter hook ingress device "${ns}v" priority 0; numgen random mod 100 < $loss drop; }
}
EOF
  ip netns exec "$ns" nft -f - <<EOF
table netdev loss {
  chain in { type filter hook ingress device "eth0" priority 0; numgen random mod 100 < $loss drop; }
}
EOF
}

# the fallbacks' rules and shaper off HOST's link
unshape() {
  local ns=$1
  nft delete table netdev "${ns}loss" 2>/dev/null || true
  ip netns exec "$ns" nft delete table netdev loss 2>/dev/null || true
  if [[ -s $state/$ns.shaper ]]; then
    ip netns exec "$ns" iptables -F INPUT 2>/dev/null || true
    ip netns exec "$ns" iptables -F OUTPUT 2>/dev/null || true
    kill "$(cat "$state/$ns.shaper")" 2>/dev/null || true
    rm -f "$state/$ns.shaper"
  fi
}

set_loss() {
  local ns
  ns=$(ns_of "${1:?loss HOST P}")
  [[ ${2:-} =~ ^[0-9]+$ && $2 -le 100 ]] || die "loss: P must be 0..100, got '${2:-}'"
  echo "$2" >"$state/$ns.loss"
  shape "$ns"
}

set_delay() {
  local ns
  ns=$(ns_of "${1:?delay HOST MS}")
  [[ ${2:-} =~ ^[0-9]+$ ]] || die "delay: MS must be a whole number, got '${2:-}'"
  if ! has_netem && { ! [[ -x ${NETNS_CLUSTER_SHAPER:-} ]] || ! command -v iptables >/dev/null; }; then
    echo "netns-cluster: this kernel has no tc netem (CONFIG_NET_SCH_NETEM), and no shaper in its place" \
      "(NETNS_CLUSTER_SHAPER=tests/support/nfq_shaper, built with libnetfilter-queue-dev, and iptables):" \
      "no delay can be set" >&2
    exit 3
  fi
  echo "$2" >"$state/$ns.delay"
  shape "$ns"
}

clear_link() {
  local ns
  ns=$(ns_of "${1:?clear HOST}")
  rm -f "$state/$ns.loss" "$state/$ns.delay"
  tc qdisc del dev "${ns}v" root 2>/dev/null || true
  ip netns exec "$ns" tc qdisc del dev eth0 root 2>/dev/null || true
  unshape "$ns"
}

pids() {
  if [[ $# -gt 0 ]]; then
    ip netns pids "$(ns_of "$1")"
    return
  fi
  local ns
  for ns in $(ip netns list 2>/dev/null | awk '{print $1}' | grep -E "^${name}(h[0-9]+|head)$" || true); do
    ip netns pids "$ns"
  done
}

cmd=${1:-}
shift || true
case $cmd in
up) up "$@" ;;
down) down ;;
exec) host_exec "$@" ;;
mpirun) run_mpirun "$@" ;;
cut) ip link set "$(ns_of "${1:?cut HOST}")v" down ;;
heal) ip link set "$(ns_of "${1:?heal HOST}")v" up ;;
loss) set_loss "$@" ;;
delay) set_delay "$@" ;;
clear) clear_link "$@" ;;
kill) ip netns pids "$(ns_of "${1:?kill HOST}")" | xargs -r kill -9 ;;
pids) pids "$@" ;;
check) check ;;
tcp_retries2)
  [[ ${1:-} =~ ^[0-9]+$ ]] || die "tcp_retries2: N must be a whole number, got '${1:-}'"
  for ns in $(ip netns list 2>/dev/null | awk '{print $1}' | grep -E "^${name}(h[0-9]+|head)$" || true); do
    ip netns exec "$ns" sysctl -qw net.ipv4.tcp_retries2="$1"
  done
  ;;
num) num_of "${1:?num HOST}" ;;
*)
  sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'
  [[ -z $cmd ]] || exit 2
  ;;
esac
