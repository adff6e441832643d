/*
 * Spends its time in the kernel: many small write(2)s to /dev/null, so a profiler's
 * samples carry kernel frames (the write path) under the user-space caller.
 *
 *   gcc -O1 -g -fno-omit-frame-pointer -o syscaller syscaller.c
 *   ./syscaller SECONDS
 */
#include <fcntl.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

__attribute__((noinline)) void syscaller_write_loop(int fd, double seconds) {
	char byte = 0;
	struct timespec start, now;
	clock_gettime(CLOCK_MONOTONIC, &start);
	do {
		for (int i = 0; i < 1000; i++)
			if (write(fd, &byte, 1) < 0)
				return;
		clock_gettime(CLOCK_MONOTONIC, &now);
	} while ((now.tv_sec - start.tv_sec) + (now.tv_nsec - start.tv_nsec) / 1e9 < seconds);
}

int main(int argc, char **argv) {
	int fd = open("/dev/null", O_WRONLY);
	if (fd < 0)
		return 1;
	syscaller_write_loop(fd, argc > 1 ? atof(argv[1]) : 2.0);
	return 0;
}
