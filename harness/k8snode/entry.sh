#!/bin/sh
# The node's init (tini via `docker run --init` forwards signals): make the
# node's cgroups writable and its mounts shared, then run containerd. The
# cluster starts kubelet, kube-proxy (and on the control plane etcd and the
# apiserver...) with `docker exec`; they die with the container.
set -eu
# cgroup v1 is mounted read-only in a container that is not --privileged;
# mounted again in the node's private cgroup namespace, each hierarchy is
# rooted at the node's own cgroup: pods' cgroups stay inside the node's.
if [ ! -f /sys/fs/cgroup/cgroup.controllers ]; then
    awk '$3 == "cgroup" {print $2, $4}' /proc/self/mounts | while read -r path opts; do
        keep=$(echo "$opts" | tr , '\n' | grep -v -x -E 'ro|rw|nosuid|nodev|noexec|relatime' | paste -sd,)
        umount "$path" && mount -t cgroup -o "rw,nosuid,nodev,noexec,$keep" cgroup "$path"
    done
fi
# kubelet's volume mounts must propagate into the pods' containers
mount --make-rshared /
# the OOM watcher reads the kernel log
[ -e /dev/kmsg ] || ln -s /dev/console /dev/kmsg
# kube-proxy's Services for pods on the same node's bridge
sysctl -qw net.bridge.bridge-nf-call-iptables=1 2>/dev/null || true
sysctl -qw net.ipv4.ip_forward=1
mkdir -p /var/log/k8s /etc/cni/net.d
exec containerd --config /etc/k8snode/containerd.toml >/var/log/k8s/containerd.log 2>&1
