/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/*
 * The few kernel types profiler.bpf.c uses, written by hand instead of a
 * multi-megabyte vmlinux.h generated from one kernel's BTF.
 *
 * Structs that the program reads from kernel memory carry
 * __attribute__((preserve_access_index)): clang then records each field
 * access as a CO-RE relocation, and libbpf rewrites the offsets at load time
 * from the running kernel's BTF (/sys/kernel/btf/vmlinux). Only the fields we
 * read need to be declared, in any order; their offsets here are meaningless.
 *
 * UAPI constants (map types, helper flags) are part of the stable kernel ABI
 * and are copied by value, so the build needs no kernel or libc headers and
 * the object is the same on every build machine.
 */
#ifndef PROFCOL_KERNEL_TYPES_H
#define PROFCOL_KERNEL_TYPES_H

typedef signed char __s8;
typedef unsigned char __u8;
typedef short __s16;
typedef unsigned short __u16;
typedef int __s32;
typedef unsigned int __u32;
typedef long long __s64;
typedef unsigned long long __u64;
typedef __u16 __be16;
typedef __u32 __be32;
typedef __u32 __wsum;

typedef __u8 u8;
typedef __u16 u16;
typedef __u32 u32;
typedef __u64 u64;
typedef __s8 s8;
typedef __s32 s32;
typedef __s64 s64;
typedef int pid_t;
typedef _Bool bool;
#define true 1
#define false 0

/* include/uapi/linux/bpf.h: enum bpf_map_type */
enum {
	BPF_MAP_TYPE_HASH = 1,
	BPF_MAP_TYPE_ARRAY = 2,
	BPF_MAP_TYPE_PERCPU_ARRAY = 6,
	BPF_MAP_TYPE_ARRAY_OF_MAPS = 12,
	BPF_MAP_TYPE_LRU_HASH = 9,
	BPF_MAP_TYPE_RINGBUF = 27,
};

/* include/uapi/linux/bpf.h: map_flags */
#define BPF_F_NO_PREALLOC (1U << 0)
#define BPF_F_INNER_MAP (1U << 12)

/* include/uapi/linux/bpf.h: flags for BPF_FUNC_get_stack */
#define BPF_F_USER_STACK (1ULL << 8)
/* include/uapi/linux/bpf.h: map update flags */
#define BPF_ANY 0
/* include/uapi/linux/bpf.h: bpf_ringbuf_output flags and bpf_ringbuf_query keys */
#define BPF_RB_NO_WAKEUP (1ULL << 0)
#define BPF_RB_FORCE_WAKEUP (1ULL << 1)
#define BPF_RB_AVAIL_DATA 0
#define BPF_RB_RING_SIZE 1

/* include/linux/types.h */
typedef struct {
	int counter;
} __attribute__((preserve_access_index)) atomic_t;

/* include/linux/sched/signal.h: live = threads of the group not yet exiting */
struct signal_struct {
	atomic_t live;
} __attribute__((preserve_access_index));

/* include/linux/mm_types.h: only tested for NULL (kernel threads have no mm) */
struct mm_struct;

/* include/linux/sched.h */
/* arch/x86/include/asm/processor.h: the user fs base, which glibc's pthread_self()
 * is, and so CPython's PyThreadState.thread_id. */
struct thread_struct {
	unsigned long fsbase;
} __attribute__((preserve_access_index));

struct task_struct {
	struct thread_struct thread;
	unsigned int flags; /* PF_* */
	pid_t pid;  /* thread id */
	pid_t tgid; /* process id */
	struct signal_struct *signal;
	struct mm_struct *mm;
} __attribute__((preserve_access_index));

/* arch/x86/include/asm/ptrace.h: the registers saved on kernel entry; for a user
 * task, bpf_task_pt_regs() gives those of user mode. */
struct pt_regs {
	unsigned long bp;
	unsigned long sp;
	unsigned long ip;
	unsigned long orig_ax; /* the syscall number, for a task in a syscall */
} __attribute__((preserve_access_index));

/* include/linux/binfmts.h */
struct linux_binprm {
	const char *filename;
} __attribute__((preserve_access_index));

/* include/uapi/linux/bpf_perf_event.h: the perf_event program's context.
 * Opaque here: it is only handed to bpf_get_stack. */
struct bpf_perf_event_data;

#endif
