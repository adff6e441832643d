#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* No frame at all: the CFA stays rsp+8. */
__attribute__((noipa)) long leaf(long x) { return x * 3 + 1; }

/* Fills a buffer, so that the callers' buffers are real. */
__attribute__((noipa)) void fill(char *p, long n) { memset(p, (int)n, (size_t)n); }

/* Six values live across a call: pushes of callee-saved registers (rbp among them). */
__attribute__((noipa)) long six_live(long a, long b, long c, long d, long e, long f) {
    long r = leaf(a + b);
    return r * a + b * c + d * e + f * r + a * d + c * f;
}

/* A 64 KiB buffer: sub rsp, beyond what an i16 holds. */
__attribute__((noipa)) long big_frame(long n) {
    char buf[65536];
    fill(buf, sizeof buf);
    return leaf(buf[n & 65535]);
}

/* With a frame pointer: the CFA moves to rbp+16. */
__attribute__((noipa, optimize("no-omit-frame-pointer"))) long with_fp(long n) {
    char *p = alloca((size_t)(n & 255) + 16);
    fill(p, (n & 255) + 16);
    return leaf(p[n & 15]);
}

int main(int argc, char **argv) {
    long n = argc > 1 ? atol(argv[1]) : 3;
    printf("%ld\n", six_live(n, n + 1, n + 2, n + 3, n + 4, n + 5) + big_frame(n) + with_fp(n));
    return 0;
}
