/*
 * A context-switch-heavy workload: two threads pass one byte back and forth over two
 * pipes, so each blocks in read(2) for every byte the other sends: hundreds of
 * thousands of switches a second. Prints round trips per second.
 *
 *   gcc -O2 -pthread -o pingpong pingpong.c
 *   ./pingpong SECONDS
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

static int ping[2], pong[2];

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

static void *echo(void *arg)
{
	char byte;
	(void)arg;
	while (read(ping[0], &byte, 1) == 1 && byte != 0)
		if (write(pong[1], &byte, 1) != 1)
			break;
	return NULL;
}

int main(int argc, char **argv)
{
	double seconds = argc > 1 ? atof(argv[1]) : 5.0, start, end;
	unsigned long long trips = 0;
	pthread_t thread;
	char byte = 1;

	if (pipe(ping) || pipe(pong) || pthread_create(&thread, NULL, echo, NULL))
		return 1;
	start = now();
	end = start + seconds;
	do {
		for (int i = 0; i < 1000; i++) {
			if (write(ping[1], &byte, 1) != 1 || read(pong[0], &byte, 1) != 1)
				return 1;
		}
		trips += 1000;
	} while (now() < end);
	byte = 0;
	if (write(ping[1], &byte, 1) != 1)
		return 1;
	pthread_join(thread, NULL);
	printf("%.0f\n", trips / (now() - start));
	return 0;
}
