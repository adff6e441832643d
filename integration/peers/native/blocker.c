/*
 * Waits in known places for known times, for off-CPU profiling tests:
 *
 *   blocker pipe  ROUNDS MS   reads a pipe that another thread writes MS ms later
 *   blocker mutex ROUNDS MS   locks a mutex another thread holds for MS ms
 *   blocker sleep ROUNDS MS   nanosleep(MS ms)
 *   blocker spin  SECONDS     burns the CPU and never waits by itself
 *
 * Before the measured waits, it waits in blocker_warm_up (poll on stdin, 20 ms at a
 * time) until a line comes on stdin: a profiler that knows the process by then walks
 * every measured wait with the process's unwind tables.
 *
 * Each wait happens in blocker_wait_<kind>, called from blocker_caller_<kind>: a
 * profiler's off-CPU stacks should show the wait under its caller. Prints the time
 * the waiting thread spent in its waits, in nanoseconds, on stdout; spin prints its
 * wall time and its CPU time, whose difference is the time it waited for a CPU.
 *
 *   gcc -O2 -g -pthread -o blocker blocker.c
 */
#include <poll.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static int rounds;
static long wait_ms;
static int pipe_fds[2];
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_barrier_t round_start, round_end;

static uint64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void sleep_ms(long ms)
{
	struct timespec ts = { .tv_sec = ms / 1000, .tv_nsec = (ms % 1000) * 1000000L };
	while (nanosleep(&ts, &ts) != 0)
		;
}

/* The helper thread: makes the waiting thread's wait last wait_ms. */
static void *helper(void *arg)
{
	const char *kind = arg;
	char byte = 1;

	for (int i = 0; i < rounds; i++) {
		if (strcmp(kind, "pipe") == 0) {
			pthread_barrier_wait(&round_start);
			sleep_ms(wait_ms);
			if (write(pipe_fds[1], &byte, 1) != 1)
				exit(2);
		} else {
			pthread_mutex_lock(&lock);
			pthread_barrier_wait(&round_start);
			sleep_ms(wait_ms);
			pthread_mutex_unlock(&lock);
		}
		pthread_barrier_wait(&round_end);
	}
	return NULL;
}

__attribute__((noinline)) void blocker_wait_pipe(void)
{
	char byte;
	if (read(pipe_fds[0], &byte, 1) != 1)
		exit(2);
}

__attribute__((noinline)) void blocker_wait_mutex(void)
{
	pthread_mutex_lock(&lock);
	pthread_mutex_unlock(&lock);
}

__attribute__((noinline)) void blocker_wait_sleep(void)
{
	sleep_ms(wait_ms);
}

__attribute__((noinline)) void blocker_warm_up(void)
{
	struct pollfd in = { .fd = 0, .events = POLLIN };
	char line[64];

	while (poll(&in, 1, 20) == 0)
		;
	if (read(0, line, sizeof(line)) < 0)
		exit(2);
}

/* Each caller times only the wait itself: the barriers around it wait too, elsewhere. */
__attribute__((noinline)) uint64_t blocker_caller_pipe(void)
{
	uint64_t start = now_ns();
	blocker_wait_pipe();
	return now_ns() - start;
}

__attribute__((noinline)) uint64_t blocker_caller_mutex(void)
{
	uint64_t start = now_ns();
	blocker_wait_mutex();
	return now_ns() - start;
}

__attribute__((noinline)) uint64_t blocker_caller_sleep(void)
{
	uint64_t start = now_ns();
	blocker_wait_sleep();
	return now_ns() - start;
}

__attribute__((noinline)) void blocker_spin(double seconds)
{
	volatile uint64_t x = 0;
	uint64_t end = now_ns() + (uint64_t)(seconds * 1e9);
	while (now_ns() < end)
		for (int i = 0; i < 10000; i++)
			x += i;
}

int main(int argc, char **argv)
{
	pthread_t thread;
	uint64_t waited = 0;
	const char *kind;

	if (argc < 3)
		return 1;
	kind = argv[1];
	if (strcmp(kind, "spin") == 0) {
		struct timespec cpu;
		uint64_t start = now_ns();

		blocker_spin(atof(argv[2]));
		clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &cpu);
		printf("%llu %llu\n", (unsigned long long)(now_ns() - start),
		       (unsigned long long)cpu.tv_sec * 1000000000ull + (unsigned long long)cpu.tv_nsec);
		return 0;
	}
	if (argc < 4)
		return 1;
	rounds = atoi(argv[2]);
	wait_ms = atol(argv[3]);
	blocker_warm_up();
	if (strcmp(kind, "sleep") == 0) {
		for (int i = 0; i < rounds; i++)
			waited += blocker_caller_sleep();
		printf("%llu\n", (unsigned long long)waited);
		return 0;
	}
	if (strcmp(kind, "pipe") != 0 && strcmp(kind, "mutex") != 0)
		return 1;
	if (pipe(pipe_fds) != 0)
		return 2;
	pthread_barrier_init(&round_start, NULL, 2);
	pthread_barrier_init(&round_end, NULL, 2);
	if (pthread_create(&thread, NULL, helper, (void *)kind) != 0)
		return 2;
	for (int i = 0; i < rounds; i++) {
		pthread_barrier_wait(&round_start);
		waited += strcmp(kind, "pipe") == 0 ? blocker_caller_pipe() : blocker_caller_mutex();
		pthread_barrier_wait(&round_end);
	}
	pthread_join(thread, NULL);
	printf("%llu\n", (unsigned long long)waited);
	return 0;
}
