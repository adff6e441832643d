/*
 * Stacks for the unwinding tests, built without frame pointers:
 *
 *   gcc -O2 -g -fomit-frame-pointer -pthread -o unwind unwind.c
 *   ./unwind MODE SECONDS
 *
 * Each mode burns SECONDS of its own CPU in a known chain of functions that are neither
 * inlined nor cloned (noipa), called where a call cannot become a jump:
 *
 *   chain    main -> chain_outer -> chain_middle -> chain_leaf
 *   qsort    main -> sort_driver -> qsort (libc, no frame pointers) -> compare_slowly
 *   thread   (a pthread) thread_start -> thread_work
 *   recurse  main -> recurse (60 deep, or DEPTH given as a third argument) -> recurse_leaf
 *   signal   main -> signal_driver, interrupted by SIGPROF -> on_signal -> signal_work
 *
 * It prints "ready" once set up, so a test knows the process is there.
 */
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>

#define KEEP __attribute__((noipa))

static double cpu_seconds(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

static volatile unsigned long sink;

KEEP unsigned long spin(unsigned long n)
{
	unsigned long x = 0;
	for (unsigned long i = 0; i < n; i++)
		x += i * i ^ (x >> 3);
	return x;
}

/* chain */
KEEP unsigned long chain_leaf(unsigned long n)
{
	return spin(n) + 1;
}

KEEP unsigned long chain_middle(unsigned long n)
{
	return chain_leaf(n) * 3 + 1;
}

KEEP unsigned long chain_outer(double seconds)
{
	unsigned long total = 0;
	double until = cpu_seconds() + seconds;
	while (cpu_seconds() < until)
		total += chain_middle(100000);
	return total;
}

/* qsort: the comparison is slow on purpose, so most samples land in it, below libc. */
KEEP int compare_slowly(const void *a, const void *b)
{
	sink += spin(200);
	return *(const int *)a - *(const int *)b;
}

KEEP unsigned long sort_driver(double seconds)
{
	int values[512];
	double until = cpu_seconds() + seconds;
	unsigned long rounds = 0;
	while (cpu_seconds() < until) {
		for (int i = 0; i < 512; i++)
			values[i] = (i * 7919) % 512;
		qsort(values, 512, sizeof(int), compare_slowly);
		rounds++;
	}
	return rounds + values[0];
}

/* thread */
static double thread_seconds;

KEEP unsigned long thread_work(double seconds)
{
	unsigned long total = 0;
	double until = cpu_seconds() + seconds;
	while (cpu_seconds() < until)
		total += spin(100000);
	return total + 1;
}

KEEP void *thread_start(void *arg)
{
	sink += thread_work(thread_seconds);
	return arg;
}

/* recurse */
KEEP unsigned long recurse_leaf(double seconds)
{
	unsigned long total = 0;
	double until = cpu_seconds() + seconds;
	while (cpu_seconds() < until)
		total += spin(100000);
	return total;
}

/* A frame of its own on every level: gcc turns `return recurse(d - 1) + 1` into a loop. */
KEEP unsigned long recurse(int depth, double seconds)
{
	volatile unsigned long here = (unsigned long)depth;
	unsigned long below;

	if (depth == 0)
		return recurse_leaf(seconds) + here;
	below = recurse(depth - 1, seconds);
	return below ^ here;
}

/* signal: SIGPROF every 10 ms of CPU; the handler burns most of each period. */
KEEP unsigned long signal_work(void)
{
	return spin(2000000) + 1;
}

KEEP void on_signal(int signo)
{
	sink += signal_work() + (unsigned long)signo;
}

KEEP unsigned long signal_driver(double seconds)
{
	unsigned long total = 0;
	double until = cpu_seconds() + seconds;
	while (cpu_seconds() < until)
		total += spin(1000);
	return total;
}

/* With UNWIND_WARM_UP=SECONDS, burns that long here first: a profiler has the process's
 * tables by the time the work under test starts, whatever its load. */
KEEP unsigned long warm_up(double seconds)
{
	unsigned long x = 0;
	double end = cpu_seconds() + seconds;
	while (cpu_seconds() < end)
		for (int i = 0; i < 10000; i++)
			x += i ^ (x >> 5);
	return x;
}

int main(int argc, char **argv)
{
	const char *mode = argc > 1 ? argv[1] : "chain";
	double seconds = argc > 2 ? atof(argv[2]) : 2.0;
	unsigned long r = 0;

	if (strcmp(mode, "signal") == 0) {
		struct sigaction sa;
		struct itimerval every = { { 0, 10000 }, { 0, 10000 } };
		memset(&sa, 0, sizeof(sa));
		sa.sa_handler = on_signal;
		sigaction(SIGPROF, &sa, NULL);
		setitimer(ITIMER_PROF, &every, NULL);
	}
	if (getenv("UNWIND_WARM_UP"))
		sink += warm_up(atof(getenv("UNWIND_WARM_UP")));
	printf("ready\n");
	fflush(stdout);
	if (strcmp(mode, "chain") == 0) {
		r = chain_outer(seconds);
	} else if (strcmp(mode, "qsort") == 0) {
		r = sort_driver(seconds);
	} else if (strcmp(mode, "thread") == 0) {
		pthread_t t;
		thread_seconds = seconds;
		pthread_create(&t, NULL, thread_start, NULL);
		pthread_join(t, NULL);
	} else if (strcmp(mode, "recurse") == 0) {
		r = recurse(argc > 3 ? atoi(argv[3]) : 60, seconds);
	} else if (strcmp(mode, "signal") == 0) {
		r = signal_driver(seconds);
	} else {
		fprintf(stderr, "unknown mode %s\n", mode);
		return 2;
	}
	printf("%lu\n", (r + sink) & 1);
	return 0;
}
