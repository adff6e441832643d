// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
/*
 * profcol's whole-system CPU profiler, kernel side.
 *
 * - on_cpu_sample (perf_event): attached by user space to one software
 *   cpu-clock event per online CPU, at the configured frequency. Each sample
 *   that passes the filters becomes one record on the `events` ring buffer:
 *   pid/tid/cpu/comm/cgroup/time and the kernel and user stacks (frame
 *   pointers, bpf_get_stack, up to MAX_FRAMES each).
 * - on_exec / on_fork / on_exit (tp_btf on sched/sched_process_{exec,fork,exit}):
 *   process lifecycle records on the same ring buffer, so user space can keep
 *   its per-process caches (maps, symbols) in step.
 *
 * Why a ring buffer of raw samples rather than aggregating in the kernel
 * (a stack-id map plus a counts hash map, as `profile.py` does):
 * - every sample keeps its own timestamp and thread id, which OTLP profiles
 *   carry and an aggregate loses;
 * - no hash map has to be sized up front for an unknown number of distinct
 *   stacks (a full map silently drops, and stack-id maps collide);
 * - at 19-99 Hz per CPU this is tens to a few hundred records per second,
 *   cheap to copy. To keep each record small it is variable length: the
 *   sample is built in a per-CPU scratch buffer and only the used bytes
 *   (header plus the frames actually present) go out with bpf_ringbuf_output.
 *
 * Layout of the records (native endian, all naturally aligned) is described
 * by struct sample_event / struct process_event below, mirrored in
 * bpf/src/event.rs. Change both together.
 *
 * Filters run before any stack is walked: pid include/exclude sets, cgroup
 * include/exclude sets and the profiler's own pid, driven by `filter_config`.
 * An include set applies only while its FILTER_* bit is set (user space sets
 * it when the set is non-empty), so an empty include set means "everything".
 */
#include "kernel_types.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>

char LICENSE[] SEC("license") = "Dual BSD/GPL";

#define MAX_FRAMES 127 /* per stack; kernel.perf_event_max_stack defaults to 127 */
#define COMM_LEN 16
#define FILENAME_LEN 256

enum event_kind {
	EVENT_SAMPLE = 1,
	EVENT_EXEC = 2,
	EVENT_FORK = 3,
	EVENT_EXIT = 4,
};

/* sample_event.flags */
#define SAMPLE_KERNEL_TRUNCATED (1U << 0) /* MAX_FRAMES kernel frames filled */
#define SAMPLE_USER_TRUNCATED (1U << 1)   /* MAX_FRAMES user frames filled */

struct sample_event {
	u32 kind;          /*  0: EVENT_SAMPLE */
	u32 flags;         /*  4: SAMPLE_* */
	u32 pid;           /*  8: tgid */
	u32 tid;           /* 12: thread id */
	u32 cpu;           /* 16 */
	u16 kernel_frames; /* 20: number of kernel frames in frames[] */
	u16 user_frames;   /* 22: number of user frames, after the kernel ones */
	u64 cgroup_id;     /* 24: bpf_get_current_cgroup_id (cgroup v2) */
	u64 time_ns;       /* 32: bpf_ktime_get_ns, CLOCK_MONOTONIC */
	char comm[COMM_LEN]; /* 40: NUL-padded */
	u64 frames[2 * MAX_FRAMES]; /* 56: kernel frames, then user frames */
};
#define SAMPLE_HEADER_LEN 56

struct process_event {
	u32 kind;         /*  0: EVENT_EXEC, EVENT_FORK or EVENT_EXIT */
	u32 pid;          /*  4: the process (tgid); for fork, the child */
	u32 parent_pid;   /*  8: fork: parent's tgid; else 0 */
	u32 filename_len; /* 12: exec: bytes of filename (no NUL); else 0 */
	char filename[FILENAME_LEN]; /* 16: exec: bprm->filename as passed to execve */
};
#define PROCESS_HEADER_LEN 16

/* filter_config.flags */
#define FILTER_INCLUDE_PIDS (1U << 0)
#define FILTER_EXCLUDE_PIDS (1U << 1)
#define FILTER_INCLUDE_CGROUPS (1U << 2)
#define FILTER_EXCLUDE_CGROUPS (1U << 3)

struct filter_config {
	u32 flags;     /* FILTER_*: which sets are non-empty */
	u32 self_tgid; /* the profiler's own pid to skip, 0 = none */
};

/* lost[] slots */
#define LOST_SAMPLES 0
#define LOST_PROCESS_EVENTS 1

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 256 * 1024); /* resized by user space before load */
} events SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 2);
	__type(key, u32);
	__type(value, u64);
} lost SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, u32);
	__type(value, struct filter_config);
} config SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 16384);
	__type(key, u32);
	__type(value, u8);
} include_pids SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 16384);
	__type(key, u32);
	__type(value, u8);
} exclude_pids SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__type(key, u64);
	__type(value, u8);
} include_cgroups SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__type(key, u64);
	__type(value, u8);
} exclude_cgroups SEC(".maps");

/* One maximal sample per CPU to build the record in (too big for the stack). */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, u32);
	__type(value, struct sample_event);
} scratch SEC(".maps");

static __always_inline void count_lost(u32 slot)
{
	u64 *n = bpf_map_lookup_elem(&lost, &slot);

	if (n)
		*n += 1; /* per-CPU slot: no other writer on this CPU */
}

/* Returns true when the current task should be sampled. */
static __always_inline bool wanted(u32 tgid)
{
	u32 zero = 0;
	struct filter_config *cfg;
	u64 cgroup_id;

	if (tgid == 0) /* idle (swapper): nothing to attribute */
		return false;
	cfg = bpf_map_lookup_elem(&config, &zero);
	if (!cfg)
		return false;
	if (cfg->self_tgid != 0 && tgid == cfg->self_tgid)
		return false;
	if ((cfg->flags & FILTER_EXCLUDE_PIDS) && bpf_map_lookup_elem(&exclude_pids, &tgid))
		return false;
	if ((cfg->flags & FILTER_INCLUDE_PIDS) && !bpf_map_lookup_elem(&include_pids, &tgid))
		return false;
	if (cfg->flags & (FILTER_EXCLUDE_CGROUPS | FILTER_INCLUDE_CGROUPS)) {
		cgroup_id = bpf_get_current_cgroup_id();
		if ((cfg->flags & FILTER_EXCLUDE_CGROUPS) &&
		    bpf_map_lookup_elem(&exclude_cgroups, &cgroup_id))
			return false;
		if ((cfg->flags & FILTER_INCLUDE_CGROUPS) &&
		    !bpf_map_lookup_elem(&include_cgroups, &cgroup_id))
			return false;
	}
	return true;
}

SEC("perf_event")
int on_cpu_sample(struct bpf_perf_event_data *ctx)
{
	u64 pid_tgid = bpf_get_current_pid_tgid();
	u32 tgid = pid_tgid >> 32;
	u32 zero = 0;
	struct sample_event *e;
	long kernel_bytes, user_bytes;
	u32 nk, nu, len;

	if (!wanted(tgid))
		return 0;

	e = bpf_map_lookup_elem(&scratch, &zero);
	if (!e)
		return 0;

	e->kind = EVENT_SAMPLE;
	e->flags = 0;
	e->pid = tgid;
	e->tid = (u32)pid_tgid;
	e->cpu = bpf_get_smp_processor_id();
	e->cgroup_id = bpf_get_current_cgroup_id();
	e->time_ns = bpf_ktime_get_ns();
	bpf_get_current_comm(e->comm, sizeof(e->comm));

	/* Kernel stack of the interrupted context (empty if it was user mode). */
	kernel_bytes = bpf_get_stack(ctx, &e->frames[0], MAX_FRAMES * sizeof(u64), 0);
	nk = kernel_bytes > 0 ? (u32)kernel_bytes / sizeof(u64) : 0;
	if (nk > MAX_FRAMES)
		nk = MAX_FRAMES;
	if (nk == MAX_FRAMES)
		e->flags |= SAMPLE_KERNEL_TRUNCATED;

	/* User stack right after the kernel frames (frame pointers only). */
	nk &= 0x7f; /* no-op for 0..127; lets the verifier bound the offset */
	user_bytes = bpf_get_stack(ctx, &e->frames[nk], MAX_FRAMES * sizeof(u64), BPF_F_USER_STACK);
	nu = user_bytes > 0 ? (u32)user_bytes / sizeof(u64) : 0;
	if (nu > MAX_FRAMES)
		nu = MAX_FRAMES;
	if (nu == MAX_FRAMES)
		e->flags |= SAMPLE_USER_TRUNCATED;

	e->kernel_frames = nk;
	e->user_frames = nu;

	len = SAMPLE_HEADER_LEN + (nk + nu) * sizeof(u64);
	if (len > sizeof(*e))
		len = sizeof(*e);
	if (bpf_ringbuf_output(&events, e, len, 0) < 0)
		count_lost(LOST_SAMPLES);
	return 0;
}

static __always_inline void emit_process_event(u32 kind, u32 pid, u32 parent_pid)
{
	struct process_event ev = {};

	ev.kind = kind;
	ev.pid = pid;
	ev.parent_pid = parent_pid;
	if (bpf_ringbuf_output(&events, &ev, PROCESS_HEADER_LEN, 0) < 0)
		count_lost(LOST_PROCESS_EVENTS);
}

SEC("tp_btf/sched_process_exec")
int BPF_PROG(on_exec, struct task_struct *p, pid_t old_pid, struct linux_binprm *bprm)
{
	struct process_event ev = {};
	const char *filename;
	long n;
	u32 len;

	ev.kind = EVENT_EXEC;
	ev.pid = BPF_CORE_READ(p, tgid);
	filename = BPF_CORE_READ(bprm, filename);
	n = bpf_probe_read_kernel_str(ev.filename, sizeof(ev.filename), filename);
	ev.filename_len = n > 1 ? (u32)n - 1 : 0; /* n counts the NUL */

	len = PROCESS_HEADER_LEN + ev.filename_len;
	if (len > sizeof(ev))
		len = sizeof(ev);
	if (bpf_ringbuf_output(&events, &ev, len, 0) < 0)
		count_lost(LOST_PROCESS_EVENTS);
	return 0;
}

SEC("tp_btf/sched_process_fork")
int BPF_PROG(on_fork, struct task_struct *parent, struct task_struct *child)
{
	u32 child_tid = BPF_CORE_READ(child, pid);
	u32 child_tgid = BPF_CORE_READ(child, tgid);

	if (child_tid != child_tgid) /* a new thread, not a new process */
		return 0;
	emit_process_event(EVENT_FORK, child_tgid, BPF_CORE_READ(parent, tgid));
	return 0;
}

SEC("tp_btf/sched_process_exit")
int BPF_PROG(on_exit, struct task_struct *p)
{
	/*
	 * Fires for every exiting thread. do_exit() has already decremented
	 * signal->live, so 0 means this is the last thread: the process ends
	 * (also when the group leader exited earlier than its threads).
	 */
	if (BPF_CORE_READ(p, signal, live.counter) != 0)
		return 0;
	emit_process_event(EVENT_EXIT, BPF_CORE_READ(p, tgid), 0);
	return 0;
}
