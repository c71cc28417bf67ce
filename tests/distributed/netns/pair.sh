# Two "hosts" on one machine for multi-host tests of seq_train --distributed: two network
# namespaces joined by a veth pair, each side named ddp0 and given its own address, each
# namespace its own host name (set in a UTS namespace when a command enters it) and an
# /etc/hosts that names both (ip netns exec bind-mounts /etc/netns/<ns>/hosts). The pair is
# created inside the first namespace with its peer in the second, so no interface ever appears
# in the host's own namespace, and deleting the namespaces deletes the link.
#
# Source this file (bash), then:
#   netns_pair_up ID            creates xgt-ID-a and xgt-ID-b; sets NETNS_A NETNS_B HOST_A HOST_B
#   netns_pair_down ID          kills what runs in them and removes them (safe to call twice)
#   netns_reap_stale            removes the pairs of runs that no longer exist
#   netns_shape NS --rate R --delay D   tc on NS's ddp0 (tbf rate, netem delay; either or both)
#   netns_mpirun [mpirun args]  mpirun started on host A with both hosts, through ./agent
#   netns_exec NS HOST cmd...   a command in namespace NS under host name HOST
# Names start with "xgt-" and include ID (use the caller's pid): runs never collide.

NETNS_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
NETNS_LINK=ddp0

netns_pair_up() {
    local id=$1
    NETNS_A=xgt-$id-a NETNS_B=xgt-$id-b HOST_A=xgt-$id-hosta HOST_B=xgt-$id-hostb
    export NETNS_A NETNS_B HOST_A HOST_B NETNS_LINK
    # The agent maps a host name to its namespace with this.
    export XGT_NETNS_MAP="$HOST_A=$NETNS_A $HOST_B=$NETNS_B"
    ip netns add "$NETNS_A" && ip netns add "$NETNS_B" || return 1
    ip -n "$NETNS_A" link add "$NETNS_LINK" type veth peer name "$NETNS_LINK" netns "$NETNS_B" || return 1
    ip -n "$NETNS_A" addr add 10.213.0.1/24 dev "$NETNS_LINK" && ip -n "$NETNS_B" addr add 10.213.0.2/24 dev "$NETNS_LINK" || return 1
    local ns
    for ns in "$NETNS_A" "$NETNS_B"; do
        ip -n "$ns" link set lo up && ip -n "$ns" link set "$NETNS_LINK" up || return 1
        mkdir -p "/etc/netns/$ns" || return 1
        printf '127.0.0.1 localhost\n10.213.0.1 %s\n10.213.0.2 %s\n' "$HOST_A" "$HOST_B" > "/etc/netns/$ns/hosts" || return 1
    done
}

netns_pair_down() {
    local id=$1 ns pids
    for ns in "xgt-$id-a" "xgt-$id-b"; do
        [ -e "/var/run/netns/$ns" ] || [ -e "/run/netns/$ns" ] || { rm -rf "/etc/netns/$ns"; continue; }
        # Whatever a test left running there (an orted, a rank waiting on a dead link).
        pids=$(ip netns pids "$ns" 2>/dev/null)
        [ -n "$pids" ] && kill -9 $pids 2>/dev/null
        ip netns del "$ns" 2>/dev/null
        rm -rf "/etc/netns/$ns"
    done
}

# Pairs left by a run that was killed outright (SIGKILL, as a ctest timeout may send, runs no
# trap): xgt-PID-* whose PID is no longer alive.
netns_reap_stale() {
    local ns id
    for ns in $(ip netns list 2>/dev/null | awk '{print $1}' | grep -E '^xgt-[0-9]+-a$'); do
        id=${ns#xgt-}
        id=${id%-a}
        kill -0 "$id" 2>/dev/null || netns_pair_down "$id"
    done
}

netns_shape() {
    local ns=$1 rate= delay=
    shift
    while [ $# -gt 0 ]; do
        case $1 in
            --rate) rate=$2; shift 2 ;;
            --delay) delay=$2; shift 2 ;;
            *) echo "netns_shape: unknown argument $1" >&2; return 2 ;;
        esac
    done
    if [ -n "$delay" ] && ! ip netns exec "$ns" tc qdisc add dev "$NETNS_LINK" root netem delay 0ms 2>/dev/null; then
        echo "netns_shape: tc has no netem here (the kernel lacks sch_netem: modprobe sch_netem), so no --delay" >&2
        return 1
    fi
    [ -n "$delay" ] && ip netns exec "$ns" tc qdisc del dev "$NETNS_LINK" root
    if [ -n "$delay" ] && [ -n "$rate" ]; then
        ip netns exec "$ns" tc qdisc add dev "$NETNS_LINK" root handle 1: netem delay "$delay" &&
        ip netns exec "$ns" tc qdisc add dev "$NETNS_LINK" parent 1:1 handle 10: tbf rate "$rate" burst 64kb latency 1s
    elif [ -n "$delay" ]; then
        ip netns exec "$ns" tc qdisc add dev "$NETNS_LINK" root netem delay "$delay"
    elif [ -n "$rate" ]; then
        ip netns exec "$ns" tc qdisc add dev "$NETNS_LINK" root tbf rate "$rate" burst 64kb latency 1s
    fi
}

netns_exec() {
    local ns=$1 host=$2
    shift 2
    ip netns exec "$ns" unshare --uts sh -c 'hostname "$0" && exec "$@"' "$host" "$@"
}

# mpirun on host A with both hosts (see mpirun-netns); an executable, so `timeout` can run it.
netns_mpirun() {
    "$NETNS_DIR/mpirun-netns" "$@"
}

# The bytes received on ddp0 in namespace $1 (checks that traffic went over the link).
netns_rx_bytes() {
    ip netns exec "$1" cat "/sys/class/net/$NETNS_LINK/statistics/rx_bytes"
}
