/*
 * Publishes an OpenTelemetry process context (OTEP 4719) as an SDK does, then burns CPU,
 * for the profiling receiver's tests.
 *
 *   otel_ctx MODE SECONDS
 *
 * MODE good: publishes service.name "otel-ctx-app" (and deployment.environment.name
 * "ci"), prints "published", burns half of SECONDS, then updates the context the way
 * the OTEP says (timestamp 0, new payload, new timestamp) to service.name
 * "otel-ctx-updated", prints "updated", and burns the rest.
 * MODE late: burns a second first, as a process whose SDK starts late, then publishes
 * service.name "otel-ctx-app" and burns the rest.
 * MODE oversized: a header that claims a 1 MiB payload. MODE garbage: a payload that is
 * no protobuf message. Both print "published" and burn.
 *
 * The mapping is a memfd named OTEL_CTX, also named by prctl(PR_SET_VMA_ANON_NAME)
 * where the kernel allows it; the payload lives on the heap, as the header points at it.
 */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <time.h>
#include <unistd.h>

#ifndef PR_SET_VMA
#define PR_SET_VMA 0x53564d41
#define PR_SET_VMA_ANON_NAME 0
#endif

struct header {
	char signature[8];
	uint32_t version;
	uint32_t payload_size;
	uint64_t published_at_ns;
	uint64_t payload;
};

static uint64_t boottime_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_BOOTTIME, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* Appends a protobuf length-delimited field (tag, length < 128, bytes). */
static size_t field(uint8_t *out, uint8_t tag, const uint8_t *bytes, size_t len)
{
	out[0] = tag;
	out[1] = (uint8_t)len;
	memcpy(out + 2, bytes, len);
	return len + 2;
}

/* KeyValue { key = 1: string, value = 2: AnyValue { string_value = 1 } } */
static size_t key_value(uint8_t *out, const char *key, const char *value)
{
	uint8_t any[128], kv[256];
	size_t n = field(any, 0x0a, (const uint8_t *)value, strlen(value));
	size_t m = field(kv, 0x0a, (const uint8_t *)key, strlen(key));

	m += field(kv + m, 0x12, any, n);
	return field(out, 0x0a, kv, m); /* Resource.attributes = 1 */
}

/* ProcessContext { resource = 1: Resource { attributes } }, on the heap. */
static uint8_t *context_payload(const char *service, uint32_t *size)
{
	uint8_t resource[512];
	size_t n = key_value(resource, "service.name", service);
	uint8_t *out;

	n += key_value(resource + n, "deployment.environment.name", "ci");
	out = malloc(n + 2);
	*size = (uint32_t)field(out, 0x0a, resource, n);
	return out;
}

static volatile uint64_t sink;

__attribute__((noinline)) void otel_ctx_burn(double seconds)
{
	uint64_t until = boottime_ns() + (uint64_t)(seconds * 1e9), x = 1;

	while (boottime_ns() < until)
		for (int i = 0; i < 100000; i++)
			x = x * 6364136223846793005ull + 1442695040888963407ull;
	sink = x;
}

int main(int argc, char **argv)
{
	const char *mode = argc > 1 ? argv[1] : "good";
	double seconds = argc > 2 ? atof(argv[2]) : 4.0;
	int fd = memfd_create("OTEL_CTX", MFD_CLOEXEC);
	struct header *h;
	uint32_t size;
	uint8_t *payload;

	if (strcmp(mode, "late") == 0) {
		otel_ctx_burn(1.0);
		seconds -= 1.0;
	}
	if (fd < 0 || ftruncate(fd, 4096) != 0) {
		perror("memfd_create");
		return 1;
	}
	h = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (h == MAP_FAILED) {
		perror("mmap");
		return 1;
	}
	prctl(PR_SET_VMA, PR_SET_VMA_ANON_NAME, (unsigned long)h, 4096, "OTEL_CTX");
	payload = context_payload("otel-ctx-app", &size);
	if (strcmp(mode, "garbage") == 0)
		memset(payload, 0xff, size);
	memcpy(h->signature, "OTEL_CTX", 8);
	h->version = 2;
	h->payload_size = strcmp(mode, "oversized") == 0 ? (1u << 20) : size;
	h->payload = (uint64_t)(uintptr_t)payload;
	__atomic_store_n(&h->published_at_ns, boottime_ns(), __ATOMIC_RELEASE);
	printf("published\n");
	fflush(stdout);
	if (strcmp(mode, "good") != 0) {
		otel_ctx_burn(seconds);
		return 0;
	}
	otel_ctx_burn(seconds / 2);
	/* The OTEP's update: readers see 0 while it is being written. */
	__atomic_store_n(&h->published_at_ns, 0, __ATOMIC_RELEASE);
	payload = context_payload("otel-ctx-updated", &size);
	h->payload_size = size;
	h->payload = (uint64_t)(uintptr_t)payload;
	__atomic_store_n(&h->published_at_ns, boottime_ns(), __ATOMIC_RELEASE);
	printf("updated\n");
	fflush(stdout);
	otel_ctx_burn(seconds / 2);
	return 0;
}
