/*
 * Runs a program with RLIMIT_MEMLOCK changes made no-ops that succeed.
 *
 * The OTel eBPF profiler raises RLIMIT_MEMLOCK to infinity before it loads BPF and exits
 * if it cannot. On kernels since 5.11 BPF memory is charged to the memory cgroup and the
 * limit no longer matters, but a container without CAP_SYS_RESOURCE (this project's
 * machines) cannot raise its hard limit, so the profiler would not start at all. A seccomp
 * filter answers its prlimit64/setrlimit(RLIMIT_MEMLOCK) with success instead; every other
 * call runs as usual.
 *
 *   gcc -O2 -o no-memlock no-memlock.c
 *   ./no-memlock PROGRAM ARGS...
 */
#include <errno.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#define ARG(n) offsetof(struct seccomp_data, args[n])

int main(int argc, char **argv) {
	if (argc < 2) {
		fprintf(stderr, "usage: no-memlock PROGRAM ARGS...\n");
		return 2;
	}
	struct sock_filter filter[] = {
		BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, arch)),
		BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, AUDIT_ARCH_X86_64, 1, 0),
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
		BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
		/* prlimit64(pid, resource, new, old): resource is the second argument. */
		BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_prlimit64, 0, 3),
		BPF_STMT(BPF_LD | BPF_W | BPF_ABS, ARG(1)),
		BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, RLIMIT_MEMLOCK, 4, 5),
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
		/* setrlimit(resource, limit). */
		BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_setrlimit, 0, 3),
		BPF_STMT(BPF_LD | BPF_W | BPF_ABS, ARG(0)),
		BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, RLIMIT_MEMLOCK, 0, 1),
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | 0),
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
	};
	struct sock_fprog prog = {.len = sizeof filter / sizeof filter[0], .filter = filter};
	if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) || prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog)) {
		fprintf(stderr, "no-memlock: cannot install the seccomp filter: %s\n", strerror(errno));
		return 1;
	}
	execvp(argv[1], argv + 1);
	fprintf(stderr, "no-memlock: %s: %s\n", argv[1], strerror(errno));
	return 127;
}
