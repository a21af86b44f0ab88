#!/bin/sh
# The node's dockerd, as the container's main process (tini, `docker run --init`,
# forwards SIGTERM). overlay2 on the node's own volume; its log to stderr, so
# `docker logs NODE` shows it.
set -eu
# Docker mounts the cgroup v1 hierarchies read-only in a container that is not
# --privileged, so this dockerd could not make its containers' cgroups. The node
# runs in a private cgroup namespace (--cgroupns private): mounted again here,
# each hierarchy is rooted at the node's own cgroup, writable, and the node's
# containers stay inside it (nothing of theirs lands in the host's tree).
if [ ! -f /sys/fs/cgroup/cgroup.controllers ]; then   # v1 (v2 is already namespaced)
    awk '$3 == "cgroup" {print $2, $4}' /proc/self/mounts | while read -r path opts; do
        keep=$(echo "$opts" | tr , '\n' | grep -v -x -E 'ro|rw|nosuid|nodev|noexec|relatime' | paste -sd,)
        umount "$path" && mount -t cgroup -o "rw,nosuid,nodev,noexec,$keep" cgroup "$path"
    done
fi
# a node restarted after `docker kill` keeps its volume: a stale pid file would stop dockerd
rm -f /var/run/docker.pid /var/run/docker/containerd/containerd.pid
exec dockerd --storage-driver overlay2 --log-level warn
