// SPDX-License-Identifier: GPL-2.0
/*
 * churner: load, optionally test-run, and close BPF programs at a fixed rate for a
 * fixed time, and say how many loads it managed (bench/churn_overhead.py builds it).
 *
 *   churner --raw | OBJ  --rate R --seconds S [--test-run N]
 *
 * --raw: a 2-insn socket filter by BPF_PROG_LOAD (libbpf's feature probes look
 * like this); OBJ: every copy of OBJ's programs through libbpf (bpf/churn.bpf.o:
 * a socket filter with two sub-programs).  Load n is due at start + n/R; a load
 * that comes late is not skipped, so a slowed loader makes fewer loads in S
 * seconds.  --test-run N runs each program N times (BPF_PROG_TEST_RUN, one call,
 * 64-byte packet) between load and close.
 *
 * Prints one JSON line: loaded, elapsed_ns, late (loads started > 1 ms after their
 * due time), the median and 99th percentile of load-to-close time, the CPU time
 * this process used, its voluntary and involuntary context switches (nivcsw counts
 * the times something preempted it: a SCHED_FIFO pinner does so once per wake-up on
 * this CPU), and prog_ids.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <linux/membarrier.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <bpf/bpf.h>
#include <bpf/libbpf.h>

#define SYNC_EVERY 64 /* an RCU grace period every 64 closes: see docs/kernel-notes.md */

static void die(const char *what)
{
	fprintf(stderr, "churner: %s: %s\n", what, strerror(errno));
	exit(1);
}

static unsigned long long now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (unsigned long long)ts.tv_sec * 1000000000ull + ts.tv_nsec;
}

static int quiet(enum libbpf_print_level level, const char *fmt, va_list ap)
{
	return level > LIBBPF_WARN ? 0 : vfprintf(stderr, fmt, ap);
}

static int cmp_ull(const void *a, const void *b)
{
	unsigned long long x = *(const unsigned long long *)a, y = *(const unsigned long long *)b;

	return x < y ? -1 : x > y;
}

static void test_run(int fd, unsigned int repeat)
{
	unsigned char pkt[64] = { 0 };
	LIBBPF_OPTS(bpf_test_run_opts, opts, .data_in = pkt, .data_size_in = sizeof(pkt),
		    .repeat = repeat);

	if (bpf_prog_test_run_opts(fd, &opts))
		die("BPF_PROG_TEST_RUN");
}

static unsigned int prog_id(int fd)
{
	struct bpf_prog_info info = {};
	__u32 len = sizeof(info);

	if (bpf_obj_get_info_by_fd(fd, &info, &len))
		die("bpf_prog_info");
	return info.id;
}

int main(int argc, char **argv)
{
	const struct bpf_insn insns[2] = {
		{ .code = BPF_ALU64 | BPF_MOV | BPF_K, .dst_reg = BPF_REG_0, .imm = 0 },
		{ .code = BPF_JMP | BPF_EXIT },
	};
	double rate = 0, seconds = 0;
	unsigned int runs = 0;
	const char *obj_path = NULL;
	size_t cap = 1 << 16, n = 0, late = 0;
	unsigned int *ids = malloc(cap * sizeof(*ids));
	unsigned long long *life = malloc(cap * sizeof(*life));
	unsigned long long start, deadline;
	struct rusage ru;

	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--raw"))
			obj_path = NULL;
		else if (!strcmp(argv[i], "--rate") && i + 1 < argc)
			rate = atof(argv[++i]);
		else if (!strcmp(argv[i], "--seconds") && i + 1 < argc)
			seconds = atof(argv[++i]);
		else if (!strcmp(argv[i], "--test-run") && i + 1 < argc)
			runs = (unsigned int)atoi(argv[++i]);
		else if (argv[i][0] != '-')
			obj_path = argv[i];
		else {
			fprintf(stderr, "usage: churner --raw|OBJ --rate R --seconds S [--test-run N]\n");
			return 2;
		}
	}
	if (rate <= 0 || seconds <= 0) {
		fprintf(stderr, "churner: --rate and --seconds must be > 0\n");
		return 2;
	}
	if (!ids || !life)
		die("malloc");
	libbpf_set_print(quiet);
	start = now_ns();
	deadline = start + (unsigned long long)(seconds * 1e9);
	for (;;) {
		unsigned long long due = start + (unsigned long long)(n * 1e9 / rate), t0;
		struct timespec ts = { .tv_sec = due / 1000000000ull, .tv_nsec = due % 1000000000ull };

		if (due >= deadline)
			break;
		while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR)
			;
		t0 = now_ns();
		if (t0 >= deadline)
			break;
		if (t0 > due + 1000000)
			late++;
		if (n == cap) {
			cap *= 2;
			ids = realloc(ids, cap * sizeof(*ids));
			life = realloc(life, cap * sizeof(*life));
			if (!ids || !life)
				die("realloc");
		}
		if (!obj_path) {
			int fd = bpf_prog_load(BPF_PROG_TYPE_SOCKET_FILTER, "churn_raw", "GPL", insns, 2,
					       NULL);

			if (fd < 0)
				die("BPF_PROG_LOAD");
			ids[n] = prog_id(fd);
			if (runs)
				test_run(fd, runs);
			close(fd);
		} else {
			struct bpf_object *obj = bpf_object__open_file(obj_path, NULL);
			struct bpf_program *prog;

			if (!obj || bpf_object__load(obj))
				die(obj_path);
			bpf_object__for_each_program(prog, obj) {
				ids[n] = prog_id(bpf_program__fd(prog));
				if (runs)
					test_run(bpf_program__fd(prog), runs);
				break; /* churn.bpf.o has one program */
			}
			bpf_object__close(obj);
		}
		life[n] = now_ns() - t0;
		n++;
		if (n % SYNC_EVERY == 0)
			syscall(SYS_membarrier, MEMBARRIER_CMD_GLOBAL, 0, 0);
	}
	getrusage(RUSAGE_SELF, &ru);
	printf("{\"loaded\":%zu,\"elapsed_ns\":%llu,\"late\":%zu,", n, now_ns() - start, late);
	if (n) {
		unsigned long long *sorted = malloc(n * sizeof(*sorted));

		memcpy(sorted, life, n * sizeof(*sorted));
		qsort(sorted, n, sizeof(*sorted), cmp_ull);
		printf("\"life_p50_ns\":%llu,\"life_p99_ns\":%llu,", sorted[n / 2], sorted[n * 99 / 100]);
		free(sorted);
	}
	printf("\"cpu_ns\":%llu,\"nvcsw\":%ld,\"nivcsw\":%ld,\"prog_ids\":[",
	       (ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1000000000ull +
		       (ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) * 1000ull,
	       ru.ru_nvcsw, ru.ru_nivcsw);
	for (size_t i = 0; i < n; i++)
		printf("%s%u", i ? "," : "", ids[i]);
	printf("]}\n");
	return 0;
}
