// Package kernel holds moat's kernel confinement layers for the host process
// and its native children: Landlock (filesystem, TCP and IPC scoping),
// seccomp, cgroups, namespaces and per-cgroup iptables egress rules.
//
// [Probe] reports which of those layers this machine offers, and for a
// missing one why (the errno or the reason) and what moat loses without it.
// It is what `moat doctor` prints. Probe tests each layer for real (a
// Landlock ABI query, seccomp action queries, a trial cgroup directory, a
// child in a new user or network namespace, a scratch iptables chain with a
// cgroup match) and removes anything it creates. It never installs a filter or
// a Landlock domain in the calling process, and it is safe to run as non-root:
// the layers that need privilege are then reported missing with the errno.
//
// The layer names, stable for `moat doctor --require` and the JSON report:
//
//	landlock        Landlock filesystem rules (any ABI)
//	landlock-net    Landlock TCP bind/connect rules (ABI 4+); TCP only, UDP
//	                needs ABI 10, and MPTCP is blocked with seccomp instead
//	landlock-scope  Landlock IPC scoping: signals, abstract unix sockets (ABI 6+)
//	seccomp         seccomp filters that can return an errno
//	cgroup          cgroup mode and the controllers moat can create groups in
//	userns          user namespaces (a child can be made)
//	netns           network namespaces (zero egress by construction)
//	iptables        the iptables binary, its backend and `-m cgroup --path`
//	root            whether moat runs as euid 0
package kernel
