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
 * - on_switch (tp_btf on sched/sched_switch, attached only when off_cpu_threshold > 0):
 *   off-CPU profiling. For a random share of the times a thread of a wanted process
 *   leaves the CPU, its sample (stacks, as it leaves) is built then, in its own
 *   context, and kept by thread id; when a later switch gives that thread a CPU again,
 *   the sample goes out with the time in between. (A kprobe on finish_task_switch,
 *   which runs in the thread coming back, could unwind there instead; kernels without
 *   kprobes have tracepoints all the same.)
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
 * include/exclude sets, the profiler's own pid, driven by `filter_config`, and the
 * processes user space's own filters refused (`refused_pids`).
 * An include set applies only while its FILTER_* bit is set (user space sets
 * it when the set is non-empty), so an empty include set means "everything".
 */
#include "kernel_types.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>

char LICENSE[] SEC("license") = "Dual BSD/GPL";

/* x86_64 syscall numbers, as the syscall's saved registers hold them (orig_ax). */
#define SYSCALL_EXECVE 59
#define SYSCALL_EXECVEAT 322
#define MAX_FRAMES 127 /* per stack; kernel.perf_event_max_stack defaults to 127 */
#define COMM_LEN 16
#define FILENAME_LEN 256
/* A process's first samples come before user space has given its mappings: they carry a
 * copy of the top of the user stack (at most this), which user space unwinds once it has. */
#define STACK_COPY_BYTES 8192
/* Python frames recorded per sample, at most. */
#define MAX_PYTHON_FRAMES 96
/* Words of sample_event.frames: both stacks, then the Python frames, three words each. */
#define FRAME_WORDS (2 * MAX_FRAMES + 3 * MAX_PYTHON_FRAMES)

enum event_kind {
	EVENT_SAMPLE = 1,
	EVENT_EXEC = 2,
	EVENT_FORK = 3,
	EVENT_EXIT = 4,
};

/* sample_event.flags */
#define SAMPLE_KERNEL_TRUNCATED (1U << 0) /* MAX_FRAMES kernel frames filled */
#define SAMPLE_USER_TRUNCATED (1U << 1)   /* the user walk did not reach the outermost frame */
#define SAMPLE_UNKNOWN_MAPPING (1U << 2)  /* a pc outside every mapping user space gave */
#define SAMPLE_MISSING_TABLE (1U << 3)    /* a mapping whose table is not loaded (any more) */
#define SAMPLE_STACK_COPY (1U << 4)       /* registers and a stack copy follow the frames */
#define SAMPLE_OFF_CPU (1U << 5)          /* off-CPU: off_cpu_ns says for how long */
#define SAMPLE_END_SHIFT 8                /* bits 8-11: enum unwind_end */

/* A user frame whose address is where the code was, not a return address (which points
 * after a call): a signal trampoline, and the instruction a signal interrupted. */
#define FRAME_EXACT (1ULL << 63)

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
	u32 stack_bytes;   /* 56: bytes of the stack copy (SAMPLE_STACK_COPY), else 0 */
	u16 python_frames; /* 60: Python frames, three words each, after the user frames */
	u16 python_end;    /* 62: enum python_end */
	u64 off_cpu_ns;    /* 64: SAMPLE_OFF_CPU: time between switch-out and switch-in */
	/* 72: kernel frames, then user frames, then Python frames (PYTHON_FRAME_WORDS) */
	u64 frames[FRAME_WORDS];
	/* After every frame slot (used or not), with SAMPLE_STACK_COPY: the user pc, sp
	 * and fp, then stack_bytes bytes of the user stack from sp. */
	u8 tail[24 + STACK_COPY_BYTES];
};
#define SAMPLE_HEADER_LEN 72

/* A Python frame is three words: the code object's address; its first line << 32 | the
 * instruction position (u32), with PYTHON_FRAME_ENTRY when the frame has the version's
 * entry mark (3.11 is_entry, 3.12+ a shim owned by the C stack); and the code object's
 * identity, from its file name and name objects (python_identity). */
#define PYTHON_FRAME_ENTRY (1ULL << 56)
#define PYTHON_FRAME_WORDS 3

/* Why the Python walk of a sample ended (sample_event.python_end). */
enum python_end {
	PYTHON_NONE = 0,      /* not a Python process, or the walk was not tried */
	PYTHON_COMPLETE = 1,  /* the first frame of the thread was reached */
	PYTHON_NO_THREAD = 2, /* no thread state for this thread found (it runs no Python,
			       * or the thread list could not be read) */
	PYTHON_READ_FAULT = 3,/* a frame or code object could not be read */
	PYTHON_DEPTH = 4,     /* MAX_PYTHON_FRAMES frames */
};

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
#define FILTER_SEND_IDLE (1U << 4) /* keep samples of the idle task (send_idle_frames) */

/* off_cpu_threshold: every switch-out is recorded. */
#define OFF_CPU_ALWAYS 0xffffffffU

struct filter_config {
	u32 flags;     /* FILTER_*: which sets are non-empty */
	u32 self_tgid; /* the profiler's own pid to skip, 0 = none */
	/* Share of switch-outs recorded, in 2^-32 (a random u32 below it is recorded):
	 * 0 = off-CPU off, OFF_CPU_ALWAYS = all. */
	u32 off_cpu_threshold;
	u32 reserved;
};

/* lost[] slots */
#define LOST_SAMPLES 0
#define LOST_PROCESS_EVENTS 1
#define LOST_OFF_CPU 2
#define LOST_SLOTS 3

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 256 * 1024); /* resized by user space before load */
} events SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, LOST_SLOTS);
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

/*
 * Processes user space refused by filters only it can judge (executable names,
 * containers): marked after their first sample, skipped from then on before any stack
 * is taken. An exec (a new name) or the exit removes the mark. LRU: when full, the
 * oldest marks go, which costs only their next sample being taken and refused again.
 */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 16384);
	__type(key, u32);
	__type(value, u8);
} refused_pids SEC(".maps");

/*
 * User stacks.
 *
 * User space builds one unwind table per file (from .eh_frame/.debug_frame:
 * sorted rows saying, from each address on, how to find the caller) and loads
 * it into its own array map, held in a slot of `unwind_tables`. Per process it
 * writes `process_mappings`: the executable mappings sorted by address, each
 * with the slot of its file's table and the bias that turns a pc into a row
 * address. Tables are shared by every process that maps the file.
 *
 * Per sample, starting from the user registers (bpf_task_pt_regs), each frame
 * is: find the mapping of pc (binary search), find the row (binary search in
 * the table), compute the CFA from sp or fp, read the return address and the
 * saved fp, and move up. A frame with no table (JIT code, a file without
 * .eh_frame, a table evicted or not loaded yet) takes one frame-pointer step.
 * A process with no mappings yet (user space loads them at its first sample)
 * gets the kernel's frame-pointer walk. Why a walk ended goes into the
 * record's flags and the per-CPU `unwind_stats`.
 */
#define MAX_MAPPINGS 256
#define MAX_TABLES 4096
#define ROW_SEARCH_STEPS 23    /* a table holds at most 4 Mi (2^22) rows */
#define MAPPING_SEARCH_STEPS 9 /* 256 mappings */
#define USER_ADDRESS_END 0x0000800000000000ULL

/* unwind_row.cfa_kind; unwind_row.rules: bits 0-3 fp kind, bits 4-7 ra kind */
#define CFA_NONE 0
#define CFA_SP 1
#define CFA_FP 2
#define CFA_UNSUPPORTED 3
#define CFA_SIGNAL_FRAME 4
#define FP_UNCHANGED 0
#define FP_AT_CFA 1
#define RA_AT_CFA 0
#define RA_UNDEFINED 2

/* Why a user stack walk ended: sample_event.flags bits 8-11, unwind_stats slots. */
enum unwind_end {
	END_OUTERMOST = 0,   /* the table marks the outermost frame, or the return address is 0 */
	END_FP_CHAIN = 1,    /* a frame-pointer step found the end of the chain (fp or return address 0) */
	END_NO_PROCESS = 2,  /* no mappings for the process yet: the kernel's frame-pointer walk */
	END_READ_FAULT = 3,  /* the stack could not be read where a rule pointed */
	END_DEPTH = 4,       /* MAX_FRAMES frames */
	END_BAD_FRAME = 5,   /* the CFA not above sp, or fp below sp: not a stack */
	END_UNSUPPORTED = 6, /* a rule the walker cannot follow past the leaf frame */
	END_NO_USER = 7,     /* a kernel thread: no user stack */
	END_IN_EXEC = 8,     /* in execve: the user registers and memory are an image being replaced */
	UNWIND_ENDS = 9,
};
#define STAT_FRAMES_TABLE (UNWIND_ENDS + 0) /* caller found with a table row */
#define STAT_FRAMES_FP (UNWIND_ENDS + 1)    /* caller found with the frame pointer */
#define STAT_SLOTS (UNWIND_ENDS + 2)

/* One row of a table, as user space encodes it (unwind/row.rs). */
struct unwind_row {
	u32 pc; /* file address minus the table's base */
	s32 cfa_offset;
	u8 cfa_kind;
	u8 rules;
	s8 fp_offset; /* in units of 8 bytes from the CFA */
	s8 ra_offset; /* in units of 8 bytes from the CFA */
};

struct table_info {
	u32 generation; /* changes whenever the slot gets another table */
	u32 rows;
};

struct mapping {
	u64 start;
	u64 end;
	u64 bias;       /* pc - bias = row address */
	u32 table;      /* slot in unwind_tables; 0 = none, use the frame pointer */
	u32 generation; /* the slot's table_info.generation when this was written */
};

struct process_mappings {
	u32 count;
	u32 reserved;
	struct mapping mappings[MAX_MAPPINGS]; /* sorted by start, not overlapping */
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY_OF_MAPS);
	__uint(max_entries, MAX_TABLES);
	__type(key, u32);
	/* Each table is an array of exactly its rows (BPF_F_INNER_MAP lets sizes differ). */
	__array(values, struct {
		__uint(type, BPF_MAP_TYPE_ARRAY);
		__uint(map_flags, BPF_F_INNER_MAP);
		__uint(max_entries, 1);
		__uint(key_size, sizeof(u32));
		/* By size: locals alone would not put struct unwind_row into BTF. */
		__uint(value_size, sizeof(struct unwind_row));
	});
} unwind_tables SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, MAX_TABLES);
	__type(key, u32);
	__type(value, struct table_info);
} table_infos SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(map_flags, BPF_F_NO_PREALLOC); /* 8 KiB each: only for processes sampled */
	__uint(max_entries, 4096);
	__type(key, u32);
	__type(value, struct process_mappings);
} process_mappings SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, STAT_SLOTS);
	__type(key, u32);
	__type(value, u64);
} unwind_stats SEC(".maps");

/*
 * Stack copies taken per process (exec starts it again). A process waits for its
 * tables for as long as user space takes to build them, which under load can be a
 * second or more. The first MAX_STACK_COPIES always carry one; past them, only while
 * the ring buffer is nearly empty (one process waiting on a busy machine), and never
 * more than MAX_STACK_COPIES_IDLE: a burst of new processes fills the ring a little and
 * their samples fall back to the frame-pointer walk alone.
 */
#define MAX_STACK_COPIES 32
#define MAX_STACK_COPIES_IDLE 512

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 8192);
	__type(key, u32);
	__type(value, u32);
} stack_copies SEC(".maps");

/* The state of one walk, between frames. */
struct walk {
	u64 pc;
	u64 sp;
	u64 fp;
	u32 pid;
	u32 first; /* index in frames[] of the first user frame */
	u32 n;     /* user frames written */
	u32 end;   /* enum unwind_end */
	u32 flags; /* SAMPLE_UNKNOWN_MAPPING, SAMPLE_MISSING_TABLE */
	u32 exact; /* pc is where the code was (leaf, or interrupted by a signal), not a return address */
	u32 copy;  /* the sample should carry a stack copy, for user space to walk again */
};

/* The most bytes of a frame and of a code object read at once: the fields a walk needs
 * lie within (PyFrameObject's f_lasti at 104 is the furthest). */
#define PYTHON_FRAME_READ_MAX 128
#define PYTHON_CODE_READ_MAX 128

/* The state of a Python walk: the thread-state search, then the frames. */
struct python_state {
	u64 fsbase; /* the thread's, which its thread state holds */
	u64 interp; /* the interpreter whose threads are being looked at */
	u64 tstate; /* the next thread state to look at; 0: the next interpreter's */
	u64 found;
	u64 frame;  /* the next frame to record */
	u32 at;     /* index in frames[] of its first word */
	u32 n;      /* Python frames recorded */
	u32 end;    /* enum python_end */
	u32 reserved;
	u8 frame_bytes[PYTHON_FRAME_READ_MAX]; /* the frame being recorded */
	u8 code_bytes[PYTHON_CODE_READ_MAX];   /* a part of its code object */
};

/* Per CPU: the record being built (too big for the stack) and the walks. */
struct scratch_space {
	struct sample_event event;
	struct walk walk;
	struct python_state python;
};

/* scratch slots: CPU samples (a perf_event program) and off-CPU samples (a kprobe),
 * each its own so that neither can overwrite a record the other is building. */
#define SCRATCH_CPU 0
#define SCRATCH_OFF_CPU 1

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 2);
	__type(key, u32);
	__type(value, struct scratch_space);
} scratch SEC(".maps");

/*
 * Off-CPU: the sample of each recorded thread that is off the CPU, by thread id, built
 * as it left (time_ns is then) without a stack copy. One map for all CPUs: a thread
 * often resumes on another CPU. Preallocated, as an update in the scheduler cannot wait
 * for memory: user space sizes it at load (one entry while off-CPU is off), about
 * 4.3 KiB per thread waiting at once (with room for Python frames). LRU: when full,
 * the longest-waiting recorded thread makes room and its wait goes unreported; a
 * thread that exits while waiting is removed by on_exit.
 */
#define MAX_OFF_CPU_WAITING 4096
#define OFF_CPU_RECORD_LEN (SAMPLE_HEADER_LEN + (2 * MAX_FRAMES + 3 * MAX_PYTHON_FRAMES) * 8)

struct off_cpu_record {
	u8 bytes[OFF_CPU_RECORD_LEN]; /* the start of a struct sample_event */
};

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, MAX_OFF_CPU_WAITING); /* resized by user space before load */
	__type(key, u32);
	__type(value, struct off_cpu_record);
} off_cpu_waiting SEC(".maps");

/*
 * Whether a thread may have a sample in off_cpu_waiting: one bit per thread id (ids are
 * below PID_MAX_LIMIT, 2^22, on 64-bit), 512 KiB, sized 1 while off-CPU is off. Every
 * switch of every thread on the machine asks: an array lookup is inlined by the
 * verifier, where a hash lookup or task storage measured 90 ns a switch here.
 */
#define MAX_THREAD_ID (1U << 22)
#define OFF_CPU_MARK_WORDS (MAX_THREAD_ID / 64)

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, OFF_CPU_MARK_WORDS); /* resized by user space before load */
	__type(key, u32);
	__type(value, u64);
} off_cpu_marks SEC(".maps");

/*
 * CPython: where a process's interpreter keeps its threads and frames, given by user
 * space when it finds libpython or a python executable in the process (offsets per
 * version; see the receiver's python module). Read memory is the process's own, so
 * every read may fail and every loop is bounded.
 */
#define PYTHON_NO_OFFSET 0xffff

struct python_proc {
	u64 runtime;           /*  0: address of _PyRuntime */
	u16 interp_head;       /*  8: _PyRuntime.interpreters.head */
	u16 interp_next;       /* 10: PyInterpreterState.next */
	u16 interp_threads;    /* 12: PyInterpreterState threads.head */
	u16 thread_next;       /* 14: PyThreadState.next */
	u16 thread_id;         /* 16: PyThreadState.thread_id (pthread_self = fs base) */
	u16 thread_frame;      /* 18: the current frame, or cframe (3.11/3.12) */
	u16 cframe_frame;      /* 20: _PyCFrame.current_frame, or PYTHON_NO_OFFSET */
	u16 frame_code;        /* 22 */
	u16 frame_back;        /* 24 */
	u16 frame_instruction; /* 26: int f_lasti, or the instruction pointer */
	u16 frame_marker;      /* 28: the entry mark's byte, or PYTHON_NO_OFFSET */
	u16 code_bytecode;     /* 30: where bytecode starts in a code object (3.11+) */
	u16 code_firstlineno;  /* 32 */
	u8 marker_value;       /* 34 */
	u8 instruction_is_pointer; /* 35 */
	u16 code_filename;     /* 36: co_filename */
	u16 code_name;         /* 38: co_name */
	u16 frame_read_len;    /* 40: bytes of a frame read at once (its fields all inside) */
	u16 code_read_start;   /* 42: the start of a code object's part read at once */
	u16 code_read_len;     /* 44: its bytes (first line, file name and name inside) */
	u16 reserved;          /* 46 */
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__type(key, u32); /* tgid */
	__type(value, struct python_proc);
} python_procs SEC(".maps");

/* Thread id -> its PyThreadState, found by a walk of the thread list and checked
 * again at each use. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 16384);
	__type(key, u32);
	__type(value, u64);
} python_threads SEC(".maps");

static __always_inline void count_stat(u32 slot)
{
	u64 *n = bpf_map_lookup_elem(&unwind_stats, &slot);

	if (n)
		*n += 1; /* per-CPU slot: no other writer on this CPU */
}

/*
 * The two binary searches run as bpf_loop callbacks: verified once, however
 * many steps they take (as plain loops the verifier follows every path).
 */
struct mapping_search {
	struct process_mappings *pm;
	u64 pc;
	u32 lo;
	u32 hi;
};

static long mapping_search_step(u32 index, struct mapping_search *q)
{
	u32 mid;

	if (q->lo >= q->hi)
		return 1;
	mid = (q->lo + (q->hi - q->lo) / 2) & (MAX_MAPPINGS - 1);
	if (q->pm->mappings[mid].start <= q->pc)
		q->lo = mid + 1;
	else
		q->hi = mid;
	return 0;
}

/* The mapping holding pc, or NULL. */
static __always_inline struct mapping *find_mapping(struct process_mappings *pm, u64 pc)
{
	struct mapping_search q = { .pm = pm, .pc = pc, .lo = 0, .hi = pm->count };
	u32 i;

	if (q.hi > MAX_MAPPINGS)
		q.hi = MAX_MAPPINGS;
	bpf_loop(MAPPING_SEARCH_STEPS, mapping_search_step, &q, 0);
	if (q.lo == 0 || q.lo < q.hi || q.lo > MAX_MAPPINGS)
		return NULL;
	i = (q.lo - 1) & (MAX_MAPPINGS - 1);
	if (pc >= pm->mappings[i].end)
		return NULL;
	return &pm->mappings[i];
}

struct row_search {
	void *rows;
	u32 pc;
	u32 lo;
	u32 hi;
	u32 failed;
};

static long row_search_step(u32 index, struct row_search *q)
{
	struct unwind_row *r;
	u32 mid;

	if (q->lo >= q->hi)
		return 1;
	mid = q->lo + (q->hi - q->lo) / 2;
	r = bpf_map_lookup_elem(q->rows, &mid);
	if (!r) {
		q->failed = 1;
		return 1;
	}
	if (r->pc <= q->pc)
		q->lo = mid + 1;
	else
		q->hi = mid;
	return 0;
}

/* The last row at or below pc: false when pc is before the first row. */
static __always_inline bool find_row(void *rows, u32 count, u32 pc, struct unwind_row *out)
{
	struct row_search q = { .rows = rows, .pc = pc, .lo = 0, .hi = count, .failed = 0 };
	struct unwind_row *r;
	u32 i;

	bpf_loop(ROW_SEARCH_STEPS, row_search_step, &q, 0);
	if (q.failed || q.lo < q.hi || q.lo == 0)
		return false;
	i = q.lo - 1;
	r = bpf_map_lookup_elem(rows, &i);
	if (!r)
		return false;
	*out = *r;
	return true;
}

static __always_inline long walk_end(struct walk *w, u32 end)
{
	w->end = end;
	return 1;
}

/* One step by the frame pointer: [fp] = caller's fp, [fp + 8] = return address. */
static __always_inline long frame_pointer_step(struct walk *w)
{
	u64 frame[2];

	if (w->fp == 0)
		return walk_end(w, END_FP_CHAIN);
	if (w->fp < w->sp || w->fp >= USER_ADDRESS_END - 16)
		return walk_end(w, END_BAD_FRAME);
	if (bpf_probe_read_user(frame, sizeof(frame), (void *)w->fp))
		return walk_end(w, END_READ_FAULT);
	if (frame[1] == 0)
		return walk_end(w, END_FP_CHAIN);
	w->sp = w->fp + 16;
	w->fp = frame[0];
	w->pc = frame[1];
	w->exact = 0;
	count_stat(STAT_FRAMES_FP);
	return 0;
}

/*
 * x86_64 signal trampoline (__restore_rt): sp points at the ucontext of the
 * kernel's rt_sigframe, whose sigcontext (at 40) holds the interrupted rbp,
 * rbx, rdx, rax, rcx, rsp and rip at 80..135.
 */
#define SIGFRAME_REGS_OFFSET (40 + 80)
static __always_inline long signal_frame_step(struct walk *w)
{
	u64 regs[7]; /* rbp rbx rdx rax rcx rsp rip */

	if (bpf_probe_read_user(regs, sizeof(regs), (void *)(w->sp + SIGFRAME_REGS_OFFSET)))
		return walk_end(w, END_READ_FAULT);
	if (regs[6] == 0)
		return walk_end(w, END_OUTERMOST);
	w->fp = regs[0];
	w->sp = regs[5];
	w->pc = regs[6];
	w->exact = 1; /* the interrupted instruction itself */
	count_stat(STAT_FRAMES_TABLE);
	return 0;
}

/* Finds the caller of the frame at w->pc. 0: found, 1: the walk ended. */
static __always_inline long step(struct walk *w, struct process_mappings *pm)
{
	struct mapping *m = find_mapping(pm, w->pc);
	struct table_info *info;
	struct unwind_row row;
	u64 rel, cfa, ra, fp;
	u32 table, ra_kind, fp_kind;
	void *rows;

	if (!m) {
		w->flags |= SAMPLE_UNKNOWN_MAPPING;
		return frame_pointer_step(w);
	}
	table = m->table;
	if (table == 0)
		return frame_pointer_step(w);
	info = bpf_map_lookup_elem(&table_infos, &table);
	rows = bpf_map_lookup_elem(&unwind_tables, &table);
	if (!info || !rows || info->generation != m->generation) {
		w->flags |= SAMPLE_MISSING_TABLE;
		return frame_pointer_step(w);
	}
	/* A return address points after the call: look up the call itself. */
	rel = w->pc - m->bias - (w->exact ? 0 : 1);
	if (rel > 0xffffffffULL || !find_row(rows, info->rows, (u32)rel, &row))
		return frame_pointer_step(w);

	switch (row.cfa_kind) {
	case CFA_SP:
		cfa = w->sp + (s64)row.cfa_offset;
		break;
	case CFA_FP:
		cfa = w->fp + (s64)row.cfa_offset;
		break;
	case CFA_SIGNAL_FRAME:
		return signal_frame_step(w);
	case CFA_UNSUPPORTED:
		/*
		 * An expression: on x86_64 in practice a PLT stub, which jumps and
		 * never calls, so only a leaf can be in one, with its return
		 * address on top of the stack.
		 */
		if (w->n != 1)
			return walk_end(w, END_UNSUPPORTED);
		cfa = w->sp + 8;
		row.rules = FP_UNCHANGED | (RA_AT_CFA << 4);
		row.ra_offset = -1;
		break;
	default: /* CFA_NONE: between functions */
		return frame_pointer_step(w);
	}

	ra_kind = row.rules >> 4;
	fp_kind = row.rules & 0xf;
	if (ra_kind == RA_UNDEFINED)
		return walk_end(w, END_OUTERMOST);
	if (ra_kind != RA_AT_CFA)
		return walk_end(w, END_UNSUPPORTED);
	if (cfa <= w->sp || cfa >= USER_ADDRESS_END)
		return walk_end(w, END_BAD_FRAME);
	if (bpf_probe_read_user(&ra, sizeof(ra), (void *)(cfa + (s64)row.ra_offset * 8)))
		return walk_end(w, END_READ_FAULT);
	if (fp_kind == FP_AT_CFA) {
		if (bpf_probe_read_user(&fp, sizeof(fp), (void *)(cfa + (s64)row.fp_offset * 8)))
			return walk_end(w, END_READ_FAULT);
		w->fp = fp;
	} else if (fp_kind != FP_UNCHANGED) {
		w->fp = 0; /* unknown: a later frame-pointer step ends the walk */
	}
	if (ra == 0)
		return walk_end(w, END_OUTERMOST);
	w->sp = cfa;
	w->pc = ra;
	w->exact = 0;
	count_stat(STAT_FRAMES_TABLE);
	return 0;
}

/* What the frame loop works on, looked up once per sample. */
struct frame_loop {
	struct scratch_space *s;
	struct process_mappings *pm;
};

/* bpf_loop callback: records the frame at w->pc and finds its caller. */
static long unwind_frame(u32 index, struct frame_loop *loop)
{
	struct scratch_space *s = loop->s;
	struct walk *w = &s->walk;
	u64 *frame, slot; /* 64-bit: a u32 is checked and used as two copies */

	slot = (u64)w->first + w->n;
	if (slot >= 2 * MAX_FRAMES)
		return walk_end(w, END_DEPTH);
	frame = &s->event.frames[slot];
	/* The leaf needs no mark: the first frame is always exact. */
	*frame = w->pc | (w->exact && w->n > 0 ? FRAME_EXACT : 0);
	w->n++;
	if (step(w, loop->pm))
		return 1;
	/* A signal frame's step leaves the interrupted pc exact; the trampoline is named by
	 * its own address too (its unwind entry starts a byte early, for the lookup). */
	if (w->exact)
		*frame |= FRAME_EXACT;
	if (w->n >= MAX_FRAMES)
		return walk_end(w, END_DEPTH);
	return 0;
}

/*
 * For a process user space does not know yet, or whose walk met an unknown mapping: its
 * user registers and as much of the top of its stack as can be read (8 KiB, or less near
 * the top of the stack), placed after the `at` frames present, for user space to unwind
 * once it has the tables and mappings. At most MAX_STACK_COPIES per process image.
 */
static __always_inline void copy_stack(struct sample_event *e, struct pt_regs *regs)
{
	u32 tgid = e->pid, one = 1, *copies;
	u64 *out;
	u8 *stack;
	u64 sp;
	u32 size = STACK_COPY_BYTES;

	copies = bpf_map_lookup_elem(&stack_copies, &tgid);
	if (copies && *copies >= MAX_STACK_COPIES) {
		if (*copies >= MAX_STACK_COPIES_IDLE ||
		    bpf_ringbuf_query(&events, BPF_RB_AVAIL_DATA) >
			    bpf_ringbuf_query(&events, BPF_RB_RING_SIZE) / 16)
			return;
	}
	if (copies)
		__sync_fetch_and_add(copies, 1);
	else
		bpf_map_update_elem(&stack_copies, &tgid, &one, BPF_ANY);
	out = (u64 *)e->tail;
	out[0] = BPF_CORE_READ(regs, ip);
	out[1] = sp = BPF_CORE_READ(regs, sp);
	out[2] = BPF_CORE_READ(regs, bp);
	if (out[0] == 0 || sp == 0 || sp >= USER_ADDRESS_END)
		return;
	stack = (u8 *)(out + 3);
	/*
	 * One read fails whole when it crosses the end of the stack mapping, which is a page
	 * boundary: so the reads tried are 8 KiB, then up to the end of the second page
	 * from sp, then of the first. (Near the top of a process's stack, as in its
	 * dynamic loader at start, halving would drop the outermost frames.)
	 */
	for (int i = 0; i < 3; i++) {
		if (i > 0) {
			u64 end = (sp & ~4095ULL) + 4096ULL * (3 - i);

			size = end - sp;
		}
		barrier_var(size);
		if (size == 0 || size > STACK_COPY_BYTES)
			continue;
		if (bpf_probe_read_user(stack, size, (void *)sp) == 0) {
			e->stack_bytes = size;
			e->flags |= SAMPLE_STACK_COPY;
			return;
		}
	}
}

/* Walks the user stack of the current task into e->frames[first...]; returns the frames.
 * Sets s->walk.copy where the walk should be done again by user space from a copy. */
static __always_inline u32 user_stack(void *ctx, struct scratch_space *s, u32 tgid, u32 first)
{
	struct task_struct *task = bpf_get_current_task_btf();
	struct sample_event *e = &s->event;
	struct walk *w = &s->walk;
	struct process_mappings *pm;
	struct frame_loop loop;
	struct pt_regs *regs;
	long bytes;
	u32 n;

	first &= 0x7f; /* no-op for 0..127; lets the verifier bound the offset */
	if (!BPF_CORE_READ(task, mm)) {
		w->end = END_NO_USER;
		return 0;
	}
	regs = (struct pt_regs *)bpf_task_pt_regs(task);
	/*
	 * A sample in the kernel during execve: the user registers are the old image's
	 * call (or already the new entry point), the memory maybe already the new
	 * image's, and neither matches the mappings user space reads. Its user stack
	 * would be resolved against the wrong image, so it has none.
	 */
	if (first > 0) {
		long nr = BPF_CORE_READ(regs, orig_ax);

		if (nr == SYSCALL_EXECVE || nr == SYSCALL_EXECVEAT) {
			w->end = END_IN_EXEC;
			return 0;
		}
	}
	/* Held for the whole walk: removing it meanwhile frees it only after this program. */
	pm = bpf_map_lookup_elem(&process_mappings, &tgid);
	if (!pm) {
		/* Not known to user space yet: frame pointers, as the kernel walks them. */
		w->end = END_NO_PROCESS;
		bytes = bpf_get_stack(ctx, &e->frames[first], MAX_FRAMES * sizeof(u64),
				      BPF_F_USER_STACK);
		n = bytes > 0 ? (u32)bytes / sizeof(u64) : 0;
		if (n >= MAX_FRAMES) {
			n = MAX_FRAMES;
			e->flags |= SAMPLE_USER_TRUNCATED;
		}
		w->copy = 1;
		return n;
	}
	w->pc = BPF_CORE_READ(regs, ip);
	w->sp = BPF_CORE_READ(regs, sp);
	w->fp = BPF_CORE_READ(regs, bp);
	w->pid = tgid;
	w->first = first;
	w->n = 0;
	w->end = END_DEPTH;
	w->flags = 0;
	w->exact = 1;
	if (w->pc == 0 || w->pc >= USER_ADDRESS_END) {
		w->end = END_NO_USER;
		return 0;
	}
	loop.s = s;
	loop.pm = pm;
	bpf_loop(MAX_FRAMES, unwind_frame, &loop, 0);
	e->flags |= w->flags;
	if (w->end != END_OUTERMOST && w->end != END_FP_CHAIN)
		e->flags |= SAMPLE_USER_TRUNCATED;
	n = w->n;
	if (n > MAX_FRAMES)
		n = MAX_FRAMES;
	/* A library mapped since user space read the maps (the dynamic loader at start,
	 * dlopen): the walk stopped there, so the sample carries a copy to be walked
	 * again once user space has given the new mappings. */
	if (w->flags & SAMPLE_UNKNOWN_MAPPING)
		w->copy = 1;
	return n;
}

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

	cfg = bpf_map_lookup_elem(&config, &zero);
	if (!cfg)
		return false;
	/* The idle task (swapper, pid 0) only where asked for: it is where a CPU waits. */
	if (tgid == 0 && !(cfg->flags & FILTER_SEND_IDLE))
		return false;
	if (cfg->self_tgid != 0 && tgid == cfg->self_tgid)
		return false;
	if (bpf_map_lookup_elem(&refused_pids, &tgid))
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

/* A word of the process's memory at addr; 0 when it cannot be read. */
static __always_inline u64 read_user_u64(u64 addr)
{
	u64 value = 0;

	if (bpf_probe_read_user(&value, sizeof(value), (void *)addr))
		return 0;
	return value;
}

#define MAX_PYTHON_THREAD_STEPS 1024

/* What the Python loops hand their steps: the process's record and the scratch space,
 * which holds the state that changes (read back from a map, its values are unknown to
 * the verifier, so that its states converge instead of one per count). */
struct python_loop {
	struct python_proc *py;
	struct scratch_space *s;
};

/* One thread state of the walk over every interpreter's threads. */
static long python_thread_step(u32 index, struct python_loop *loop)
{
	struct python_proc *py = loop->py;
	struct python_state *q = &loop->s->python;

	if (q->tstate == 0) {
		if (q->interp == 0)
			return 1;
		q->interp = read_user_u64(q->interp + py->interp_next);
		if (q->interp == 0)
			return 1;
		q->tstate = read_user_u64(q->interp + py->interp_threads);
		return 0;
	}
	if (read_user_u64(q->tstate + py->thread_id) == q->fsbase) {
		q->found = q->tstate;
		return 1;
	}
	q->tstate = read_user_u64(q->tstate + py->thread_next);
	return 0;
}

/* A field of `size` bytes at `offset` of a block read into `bytes` (`len` read): 0 when
 * it lies outside what was read. */
static __always_inline u64 field_at(u8 *bytes, u32 len, u32 offset, u32 size)
{
	u64 value = 0;

	if (offset > PYTHON_FRAME_READ_MAX - 8 || offset + size > len)
		return 0;
	if (size == 8)
		value = *(u64 *)(bytes + offset);
	else if (size == 4)
		value = *(u32 *)(bytes + offset);
	else
		value = *(u8 *)(bytes + offset);
	return value;
}

/*
 * Records one Python frame: its code object, first line, position, entry mark and the
 * code object's identity. Two reads of the process's memory: the frame (every field the
 * walk needs lies within its first frame_read_len bytes) and the part of the code
 * object that holds its first line, file name and name.
 */
static long python_frame_step(u32 index, struct python_loop *loop)
{
	struct python_proc *py = loop->py;
	struct python_state *w = &loop->s->python;
	struct sample_event *e = &loop->s->event;
	u32 frame_len = py->frame_read_len, code_len = py->code_read_len, at = w->at;
	u64 frame = w->frame, code, word, identity, filename, name;
	u32 first_line, code_start = py->code_read_start;
	s32 position;

	if (frame == 0) {
		w->end = PYTHON_COMPLETE;
		return 1;
	}
	if (w->n >= MAX_PYTHON_FRAMES || at >= FRAME_WORDS - 2) {
		w->end = PYTHON_DEPTH;
		return 1;
	}
	if (frame_len == 0 || frame_len > PYTHON_FRAME_READ_MAX || code_len == 0 ||
	    code_len > PYTHON_CODE_READ_MAX ||
	    bpf_probe_read_user(w->frame_bytes, frame_len, (void *)frame)) {
		w->end = PYTHON_READ_FAULT;
		return 1;
	}
	code = field_at(w->frame_bytes, frame_len, py->frame_code, 8);
	if (py->instruction_is_pointer) {
		/* In code units from the start of the bytecode; -1 before the first. */
		u64 instruction = field_at(w->frame_bytes, frame_len, py->frame_instruction, 8);

		position = (s32)(((s64)(instruction - code) - (s64)py->code_bytecode) >> 1);
	} else {
		position = (s32)field_at(w->frame_bytes, frame_len, py->frame_instruction, 4);
	}
	word = (u32)position;
	if (py->frame_marker != PYTHON_NO_OFFSET &&
	    field_at(w->frame_bytes, frame_len, py->frame_marker, 1) == py->marker_value)
		word |= PYTHON_FRAME_ENTRY;
	/* A shim's code is Py_None (3.13), which has no such fields: user space finds that
	 * its identity does not match and drops it with its group's mark. */
	identity = 0;
	if (bpf_probe_read_user(w->code_bytes, code_len, (void *)(code + code_start)) == 0) {
		first_line = field_at(w->code_bytes, code_len, py->code_firstlineno - code_start, 4);
		filename = field_at(w->code_bytes, code_len, py->code_filename - code_start, 8);
		name = field_at(w->code_bytes, code_len, py->code_name - code_start, 8);
		word |= (u64)(first_line & 0xffffff) << 32;
		identity = filename ^ (name * 0x9E3779B97F4A7C15ULL);
	}
	e->frames[at] = code;
	e->frames[at + 1] = word;
	e->frames[at + 2] = identity;
	w->at = at + PYTHON_FRAME_WORDS;
	w->n++;
	frame = field_at(w->frame_bytes, frame_len, py->frame_back, 8);
	w->frame = frame;
	return 0;
}

/* The thread state's current frame (through _PyCFrame on 3.11/3.12); 0 for none. */
static __always_inline u64 python_first_frame(struct python_proc *py, u64 tstate)
{
	u64 frame = read_user_u64(tstate + py->thread_frame);

	if (frame && py->cframe_frame != PYTHON_NO_OFFSET)
		frame = read_user_u64(frame + py->cframe_frame);
	return frame;
}

/*
 * The current thread's Python frames, leaf first, into s->event.frames[at...], if its
 * process runs CPython and the thread has a thread state; returns how many.
 *
 * The thread state is found by the thread's fs base, which is what CPython keeps as its
 * thread_id (pthread_self), in the interpreters' thread lists. Not through the GIL
 * holder or the thread-local current state: a thread that released the GIL (in zlib,
 * a sleep, I/O) has neither, and its Python frames are just as much its stack.
 *
 * A global function, verified once on its own: inlined into both samplers, the
 * verifier's paths multiplied past its limit. So s may be NULL as far as it knows.
 */
__attribute__((noinline)) int python_stack(struct scratch_space *s, u32 tgid, u32 at)
{
	struct python_proc *py = bpf_map_lookup_elem(&python_procs, &tgid);
	struct python_loop loop;
	struct python_state *q;
	struct task_struct *task;
	u64 *cached, tstate = 0, fsbase, frame;
	u32 tid;

	if (!s || !py)
		return 0;
	q = &s->python;
	tid = s->event.tid;
	task = bpf_get_current_task_btf();
	fsbase = BPF_CORE_READ(task, thread.fsbase);
	s->event.python_end = PYTHON_NO_THREAD;
	if (fsbase == 0)
		return 0;
	loop.py = py;
	loop.s = s;
	cached = bpf_map_lookup_elem(&python_threads, &tid);
	if (cached && *cached && read_user_u64(*cached + py->thread_id) == fsbase)
		tstate = *cached;
	/* A cached state that has no frame may have been freed and the thread given
	 * another (PyGILState_Ensure after a Release): looked for again. */
	if (tstate && python_first_frame(py, tstate) == 0)
		tstate = 0;
	if (!tstate) {
		q->fsbase = fsbase;
		q->found = 0;
		q->interp = read_user_u64(py->runtime + py->interp_head);
		q->tstate = q->interp ? read_user_u64(q->interp + py->interp_threads) : 0;
		bpf_loop(MAX_PYTHON_THREAD_STEPS, python_thread_step, &loop, 0);
		tstate = q->found;
		if (!tstate)
			return 0;
		bpf_map_update_elem(&python_threads, &tid, &tstate, BPF_ANY);
	}
	frame = python_first_frame(py, tstate);
	q->frame = frame;
	q->at = at;
	q->n = 0;
	q->end = PYTHON_DEPTH;
	bpf_loop(MAX_PYTHON_FRAMES + 1, python_frame_step, &loop, 0);
	s->event.python_end = q->end;
	s->event.python_frames = q->n;
	return q->n;
}

/*
 * Builds the sample record of the current task in s->event (kernel stack from ctx, user
 * stack walked, and where `copies` a stack copy for user space to walk if the walk
 * could not) and returns its length in bytes.
 */
static __always_inline u64 build_sample(void *ctx, struct scratch_space *s, u64 pid_tgid,
					bool copies)
{
	struct sample_event *e = &s->event;
	u32 tgid = pid_tgid >> 32;
	long kernel_bytes;
	u32 nk, nu, np = 0;
	u64 len;

	e->kind = EVENT_SAMPLE;
	e->flags = 0;
	e->stack_bytes = 0;
	e->python_frames = 0;
	e->python_end = PYTHON_NONE;
	e->off_cpu_ns = 0;
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

	/* User stack right after the kernel frames. */
	s->walk.copy = 0;
	nu = user_stack(ctx, s, tgid, nk);
	e->flags |= (s->walk.end & 0xf) << SAMPLE_END_SHIFT;
	count_stat(s->walk.end & 0xf);

	nk &= 0x7f;
	e->kernel_frames = nk;
	e->user_frames = nu;
	/* Python frames after the user frames, then any stack copy. */
	np = python_stack(s, tgid, nk + nu);
	if (np > MAX_PYTHON_FRAMES) /* it never is; the verifier must know it */
		np = MAX_PYTHON_FRAMES;
	if (copies && s->walk.copy)
		copy_stack(e, (struct pt_regs *)bpf_task_pt_regs(bpf_get_current_task_btf()));

	len = SAMPLE_HEADER_LEN + (nk + nu + 3 * np) * sizeof(u64);
	/* The copy lies after every frame slot, used or not: at a fixed place, which the
	 * verifier can bound (copies are a process's first samples only). */
	if (e->flags & SAMPLE_STACK_COPY)
		len = SAMPLE_HEADER_LEN + FRAME_WORDS * sizeof(u64) + 24 +
		      (e->stack_bytes & (2 * STACK_COPY_BYTES - 1));
	return len;
}

/* Sends s->event, `len` bytes of it, with the ring buffer's `flags`; false when full. */
static __always_inline bool send_sample(struct scratch_space *s, u64 len, u64 flags)
{
	/* The checked register must be the one passed: clang would pass an unchecked copy. */
	barrier_var(len);
	if (len > sizeof(s->event))
		len = sizeof(s->event);
	barrier_var(len);
	return bpf_ringbuf_output(&events, &s->event, len, flags) == 0;
}

SEC("perf_event")
int on_cpu_sample(struct bpf_perf_event_data *ctx)
{
	u64 pid_tgid = bpf_get_current_pid_tgid();
	u32 key = SCRATCH_CPU;
	struct scratch_space *s;
	u64 len;

	if (!wanted(pid_tgid >> 32))
		return 0;
	s = bpf_map_lookup_elem(&scratch, &key);
	if (!s)
		return 0;
	len = build_sample(ctx, s, pid_tgid, true);
	/* Samples wake the reader: process events do not (below), so it is woken at most
	 * as often as samples come, not once per exec on a node that execs thousands a
	 * second; it drains them with the next sample, or within its poll timeout. */
	if (!send_sample(s, len, BPF_RB_FORCE_WAKEUP))
		count_lost(LOST_SAMPLES);
	return 0;
}

/*
 * Process events do not wake the reader, unless a quarter of the ring is waiting: an
 * exec storm with no samples must not fill it before the reader's poll times out.
 */
static __always_inline u64 process_event_flags(void)
{
	u64 waiting = bpf_ringbuf_query(&events, BPF_RB_AVAIL_DATA);
	u64 size = bpf_ringbuf_query(&events, BPF_RB_RING_SIZE);

	return waiting > size / 4 ? BPF_RB_FORCE_WAKEUP : BPF_RB_NO_WAKEUP;
}

static __always_inline void emit_process_event(u32 kind, u32 pid, u32 parent_pid)
{
	struct process_event ev = {};

	ev.kind = kind;
	ev.pid = pid;
	ev.parent_pid = parent_pid;
	if (bpf_ringbuf_output(&events, &ev, PROCESS_HEADER_LEN, process_event_flags()) < 0)
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
	/* The old image's mappings are wrong from now on: its samples go back to a stack
	 * copy until user space gives the new ones (it would only learn of the exec at
	 * its next drain of the ring). */
	bpf_map_delete_elem(&process_mappings, &ev.pid);
	bpf_map_delete_elem(&stack_copies, &ev.pid);
	bpf_map_delete_elem(&refused_pids, &ev.pid); /* judged again under its new name */
	bpf_map_delete_elem(&python_procs, &ev.pid); /* the new image may run no Python */
	filename = BPF_CORE_READ(bprm, filename);
	n = bpf_probe_read_kernel_str(ev.filename, sizeof(ev.filename), filename);
	ev.filename_len = n > 1 ? (u32)n - 1 : 0; /* n counts the NUL */

	len = PROCESS_HEADER_LEN + ev.filename_len;
	if (len > sizeof(ev))
		len = sizeof(ev);
	if (bpf_ringbuf_output(&events, &ev, len, process_event_flags()) < 0)
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
	u32 tgid;

	if (BPF_CORE_READ(p, signal, live.counter) != 0)
		return 0;
	tgid = BPF_CORE_READ(p, tgid);
	/* The pid may name another process next. */
	bpf_map_delete_elem(&process_mappings, &tgid);
	bpf_map_delete_elem(&stack_copies, &tgid);
	bpf_map_delete_elem(&refused_pids, &tgid);
	bpf_map_delete_elem(&python_procs, &tgid);
	emit_process_event(EVENT_EXIT, tgid, 0);
	return 0;
}

/*
 * Off-CPU profiling; prev is the current task, leaving the CPU, next gets it.
 *
 * prev: for a random share of switches (the draw first, so that a machine switching
 * hundreds of thousands of times a second pays for little more than a random number
 * on most), and only for wanted processes, its sample is built now and kept. Every
 * switch-out counts: blocking, sleeping, and preemption (time spent waiting for a CPU).
 *
 * next: if it was recorded leaving, its sample goes out with the time since.
 */
/* task_struct.flags: the task is exiting (include/linux/sched.h). */
#define PF_EXITING 0x00000004

static __always_inline void off_cpu_leave(void *ctx, struct filter_config *cfg,
					  struct task_struct *prev)
{
	u32 tid, word, key = SCRATCH_OFF_CPU;
	struct scratch_space *s;
	u64 pid_tgid, *mark;

	/* The draw before anything else, the clock included (it is not free in a VM). */
	if (cfg->off_cpu_threshold != OFF_CPU_ALWAYS &&
	    bpf_get_prandom_u32() >= cfg->off_cpu_threshold)
		return;
	pid_tgid = bpf_get_current_pid_tgid();
	tid = (u32)pid_tgid;
	if (tid == 0) /* the idle task does not wait */
		return;
	/* An exiting thread's last switch: it never comes back, and a new thread given its
	 * id would be sent the dead one's sample. */
	if (prev->flags & PF_EXITING)
		return;
	if (!wanted(pid_tgid >> 32))
		return;
	s = bpf_map_lookup_elem(&scratch, &key);
	if (!s)
		return;
	/* The kernel stack starts with the tracing machinery (this program, bpf_trace_run4
	 * and, on some kernels, __traceiter_sched_switch): it is taken whole, and user space
	 * cuts it at its frame in __schedule, since the count differs between kernels. */
	build_sample(ctx, s, pid_tgid, false);
	s->event.flags |= SAMPLE_OFF_CPU;
	s->event.time_ns = bpf_ktime_get_ns();
	word = tid / 64;
	mark = bpf_map_lookup_elem(&off_cpu_marks, &word);
	if (!mark) /* a thread id past the marks: its return would not be looked for */
		return;
	if (bpf_map_update_elem(&off_cpu_waiting, &tid, &s->event, BPF_ANY)) {
		count_lost(LOST_OFF_CPU);
		return;
	}
	__sync_fetch_and_or(mark, 1ULL << (tid % 64));
}

static __always_inline void off_cpu_return(struct task_struct *next)
{
	u32 tid = next->pid, word = tid / 64; /* next: a trusted pointer, read directly */
	u64 *mark, bit = 1ULL << (tid % 64);
	struct sample_event *e;
	u64 len, now;

	mark = bpf_map_lookup_elem(&off_cpu_marks, &word);
	if (!mark || !(*mark & bit) || tid == 0)
		return;
	__sync_fetch_and_and(mark, ~bit);
	e = bpf_map_lookup_elem(&off_cpu_waiting, &tid);
	if (!e)
		return;
	now = bpf_ktime_get_ns();
	e->off_cpu_ns = now - e->time_ns;
	e->time_ns = now;
	e->cpu = bpf_get_smp_processor_id();
	len = SAMPLE_HEADER_LEN + ((u64)(e->kernel_frames & 0xff) + (e->user_frames & 0xff) +
				   3 * (e->python_frames & 0x7f)) * 8;
	barrier_var(len);
	if (len > OFF_CPU_RECORD_LEN)
		len = OFF_CPU_RECORD_LEN;
	barrier_var(len);
	/* Thousands a second are possible: like process events, they wake the reader only
	 * when the ring is filling up. */
	if (bpf_ringbuf_output(&events, e, len, process_event_flags()) < 0)
		count_lost(LOST_OFF_CPU);
	bpf_map_delete_elem(&off_cpu_waiting, &tid);
}

SEC("tp_btf/sched_switch")
int BPF_PROG(on_switch, bool preempt, struct task_struct *prev, struct task_struct *next)
{
	u32 zero = 0;
	struct filter_config *cfg = bpf_map_lookup_elem(&config, &zero);

	if (!cfg || cfg->off_cpu_threshold == 0)
		return 0;
	off_cpu_leave(ctx, cfg, prev);
	off_cpu_return(next);
	return 0;
}
