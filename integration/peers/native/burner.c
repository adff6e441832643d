/*
 * A CPU burner with a known call chain, built with frame pointers so a profiler can walk
 * it: main -> burner_outer -> burner_middle -> burner_leaf. It burns the given seconds of
 * its own CPU time (CLOCK_PROCESS_CPUTIME_ID), so the expected sample count is
 * frequency x seconds.
 *
 *   gcc -O1 -g -fno-omit-frame-pointer -o burner burner.c
 *   ./burner SECONDS
 */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double cpu_seconds(void) {
	struct timespec ts;
	clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

__attribute__((noinline)) unsigned long burner_leaf(unsigned long n) {
	volatile unsigned long x = 0;
	for (unsigned long i = 0; i < n; i++)
		x += i * i;
	return x;
}

__attribute__((noinline)) unsigned long burner_middle(unsigned long n) {
	return burner_leaf(n) + 1;
}

__attribute__((noinline)) unsigned long burner_outer(double seconds) {
	unsigned long total = 0;
	double until = cpu_seconds() + seconds;
	while (cpu_seconds() < until)
		total += burner_middle(200000);
	return total;
}

int main(int argc, char **argv) {
	double seconds = argc > 1 ? atof(argv[1]) : 2.0;
	unsigned long total = burner_outer(seconds);
	printf("%lu\n", total & 1);
	return 0;
}
