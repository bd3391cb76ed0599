#!/bin/bash
# SPDX-License-Identifier: BSD-3-Clause
# rocenante-probe --comm across network namespaces, one per rank, each with
# its own host name (a UTS namespace), bootstrapped over TCP from
# MASTER_ADDR:PORT. Every rank prints the probe's class and verdict, then
# builds a real communicator (rcnCommInitRank, the host backend: no GPU here,
# and ROCENANTE_BACKEND=host makes it so anywhere) and runs a checked
# all-reduce; the two must agree:
#   switch-4: four nodes on one bridge               -> any-to-any; host path
#             over the tcp wire, self-test passed, on every rank
#   ring-3:   three nodes, a veth pair per neighbour -> the same
#   ring-4:   four nodes in a ring                   -> partial; rocenante is
#             not used: with no NCCL behind the host backend, creation fails
#             on every rank with the same reason, naming the topology;
#             with the override that reason gives (ROCENANTE_TRANSPORT=host
#             and a slot size) both say the host path is taken, and it works
# The ring namespaces forward IP clockwise, so the bootstrap reaches rank 0
# over several hops while the class still sees that opposite nodes share no
# subnet (as on a real routed ring). No RDMA devices exist in a namespace, so
# the class comes from the IPv4 interfaces (the tcp wire).
# Needs root and `ip netns`; exits 77 (skipped) without them.
set -u
PROBE=${1:?usage: test_topology_netns.sh path/to/rocenante-probe}
PREFIX=rcnt$$
WORK=$(mktemp -d)
NAMESPACES=()

skip() { echo "SKIP: $*"; exit 77; }
fail() { echo "FAIL: $*"; FAILED=1; }

[ -x "$PROBE" ] || skip "rocenante-probe not built at $PROBE"
[ "$(id -u)" = 0 ] || skip "needs root for ip netns"
command -v ip >/dev/null || skip "no ip command (iproute2)"
command -v unshare >/dev/null || skip "no unshare"
ip netns add ${PREFIX}probe 2>/dev/null || skip "ip netns add is not permitted here"
ip netns exec ${PREFIX}probe unshare -u true 2>/dev/null ||
  { ip netns del ${PREFIX}probe; skip "unshare -u (a host name per rank) is not permitted here"; }
ip netns exec ${PREFIX}probe sysctl -qw net.ipv4.ip_forward=1 >/dev/null 2>&1 ||
  { ip netns del ${PREFIX}probe; skip "sysctl in a network namespace is not permitted (the ring needs forwarding)"; }
ip netns del ${PREFIX}probe

cleanup() {
  for ns in "${NAMESPACES[@]}"; do ip netns del "$ns" 2>/dev/null; done
  rm -rf "$WORK"
}
trap cleanup EXIT

newns() {
  ip netns add "$1" || return 1
  NAMESPACES+=("$1")
  ip -n "$1" link set lo up
}

# Starts rank i of n in namespace ns$i; the output goes to $WORK/$layout.$i.
# $5: extra environment for every rank (VAR=value ...).
run_layout() {
  local layout=$1 n=$2 master=$3 port=$4 extra=${5:-}
  local pids=()
  for ((i = 0; i < n; i++)); do
    ip netns exec ${PREFIX}n$i unshare -u sh -c \
      "hostname $layout-node$i; RANK=$i WORLD_SIZE=$n MASTER_ADDR=$master MASTER_PORT=$port \
       ROCENANTE_BOOTSTRAP_TIMEOUT_MS=20000 ROCENANTE_TIMEOUT_MS=20000 ROCENANTE_BACKEND=host $extra \
       exec timeout 50 $PROBE --comm" >"$WORK/$layout.$i" 2>&1 &
    pids+=($!)
  done
  local rc=0
  for p in "${pids[@]}"; do wait "$p" || rc=1; done
  return $rc
}

# Every rank's summary line must name the expected class and agree on the reason.
check_layout() {
  local layout=$1 n=$2 class=$3 used=$4
  local first=""
  for ((i = 0; i < n; i++)); do
    local line
    line=$(grep "^rank $i/$n:" "$WORK/$layout.$i")
    if [ -z "$line" ]; then
      fail "$layout: rank $i printed no summary:"; cat "$WORK/$layout.$i"; continue
    fi
    echo "$layout: $line"
    [[ "$line" == *"class=$class "* ]] || fail "$layout: rank $i: expected class=$class"
    [[ "$line" == *"rocenante=$used "* ]] || fail "$layout: rank $i: expected rocenante=$used"
    local verdict=${line#*: }
    if [ -z "$first" ]; then first=$verdict
    elif [ "$verdict" != "$first" ]; then fail "$layout: rank $i disagrees with rank 0"; fi
  done
}

# Every rank's communicator line: on "ok" the host path over tcp with the
# self-test passed and the all-reduce right; on "failed" creation failed with
# one reason on every rank, naming the topology reason the probe gave.
check_comm() {
  local layout=$1 n=$2 expect=$3
  local first=""
  for ((i = 0; i < n; i++)); do
    local line probe
    line=$(grep "^rank $i/$n comm:" "$WORK/$layout.$i")
    probe=$(grep "^rank $i/$n:" "$WORK/$layout.$i")
    if [ -z "$line" ]; then
      fail "$layout: rank $i printed no communicator line:"; cat "$WORK/$layout.$i"; continue
    fi
    echo "$layout: $line"
    local reason=${line#*reason: }
    if [ "$expect" = ok ]; then
      [[ "$line" == *"init=ok path=host transport=host-tcp selftest=passed allreduce=ok "* ]] ||
        fail "$layout: rank $i: expected the host path over tcp, self-test passed, a right all-reduce"
    else
      [[ "$line" == *"init=failed "* ]] || fail "$layout: rank $i: expected communicator creation to fail"
      local topo=${probe#*reason: }
      topo=${topo%%; without a GPU*}
      [[ "$reason" == *"no fast path (topology: $topo)"*"no NCCL to fall back to"* ]] ||
        fail "$layout: rank $i: the failure does not name the probe's topology reason"
      if [ -z "$first" ]; then first=$reason
      elif [ "$reason" != "$first" ]; then fail "$layout: rank $i's reason differs from rank 0's"; fi
    fi
  done
}

teardown_nodes() {
  for ((i = 0; i < $1; i++)); do ip netns del ${PREFIX}n$i; done
  ip netns del ${PREFIX}sw 2>/dev/null
  NAMESPACES=()
}

setup_switch() {
  local n=$1
  newns ${PREFIX}sw || return 1
  ip -n ${PREFIX}sw link add br0 type bridge && ip -n ${PREFIX}sw link set br0 up || return 1
  for ((i = 0; i < n; i++)); do
    newns ${PREFIX}n$i || return 1
    ip link add ${PREFIX}a$i type veth peer name ${PREFIX}b$i || return 1
    ip link set ${PREFIX}a$i netns ${PREFIX}n$i && ip link set ${PREFIX}b$i netns ${PREFIX}sw || return 1
    ip -n ${PREFIX}n$i link set ${PREFIX}a$i name eth0
    ip -n ${PREFIX}n$i addr add 10.77.0.$((i + 1))/24 dev eth0
    ip -n ${PREFIX}n$i link set eth0 up
    ip -n ${PREFIX}sw link set ${PREFIX}b$i master br0
    ip -n ${PREFIX}sw link set ${PREFIX}b$i up
  done
}

# Node i and i+1 share 10.78.<i+1>.0/24 (i on .1, i+1 on .2). Each node routes
# every other ring subnet through its clockwise neighbour.
setup_ring() {
  local n=$1
  for ((i = 0; i < n; i++)); do newns ${PREFIX}n$i || return 1; done
  for ((i = 0; i < n; i++)); do
    local j=$(((i + 1) % n)) s=$((i + 1))
    ip link add ${PREFIX}r$i type veth peer name ${PREFIX}l$j || return 1
    ip link set ${PREFIX}r$i netns ${PREFIX}n$i && ip link set ${PREFIX}l$j netns ${PREFIX}n$j || return 1
    ip -n ${PREFIX}n$i addr add 10.78.$s.1/24 dev ${PREFIX}r$i
    ip -n ${PREFIX}n$j addr add 10.78.$s.2/24 dev ${PREFIX}l$j
    ip -n ${PREFIX}n$i link set ${PREFIX}r$i up
    ip -n ${PREFIX}n$j link set ${PREFIX}l$j up
  done
  for ((i = 0; i < n; i++)); do
    ip netns exec ${PREFIX}n$i sysctl -qw net.ipv4.ip_forward=1 net.ipv4.conf.all.rp_filter=0 \
      net.ipv4.conf.default.rp_filter=0 >/dev/null 2>&1
    local own=$((i + 1)) left=$(((i - 1 + n) % n + 1))
    for ((s = 1; s <= n; s++)); do
      [ $s = $own ] || [ $s = $left ] && continue
      ip -n ${PREFIX}n$i route add 10.78.$s.0/24 via 10.78.$own.2
    done
  done
}

FAILED=0
PORT=$((20000 + $$ % 20000))

setup_switch 4 || skip "could not build the bridge namespaces"
run_layout switch-4 4 10.77.0.1 $PORT || fail "switch-4: a rank failed"
check_layout switch-4 4 multi_node_any_to_any yes
check_comm switch-4 4 ok
teardown_nodes 4

setup_ring 3 || skip "could not build the ring namespaces"
run_layout ring-3 3 10.78.1.1 $((PORT + 1)) || fail "ring-3: a rank failed"
check_layout ring-3 3 multi_node_any_to_any yes
check_comm ring-3 3 ok
teardown_nodes 3

setup_ring 4 || skip "could not build the ring namespaces"
run_layout ring-4 4 10.78.1.1 $((PORT + 2)) || fail "ring-4: a rank failed"
check_layout ring-4 4 multi_node_partial no
check_comm ring-4 4 failed
grep -q "share no IPv4 subnet" "$WORK/ring-4.0" || fail "ring-4: the reason does not name the pair without a path"
run_layout ring-4-forced 4 10.78.1.1 $((PORT + 3)) "ROCENANTE_TRANSPORT=host" ||
  fail "ring-4-forced: a rank failed"
check_layout ring-4-forced 4 multi_node_partial yes
check_comm ring-4-forced 4 ok
teardown_nodes 4

if [ $FAILED != 0 ]; then
  for f in "$WORK"/*; do echo "== $f"; cat "$f"; done
  echo "test_topology_netns: FAILED"
  exit 1
fi
echo "test_topology_netns: all layouts classified as expected; the communicators agree"
