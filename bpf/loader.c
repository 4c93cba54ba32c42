// SPDX-License-Identifier: GPL-2.0
/*
 * loader: a small libbpf program that loads, runs, holds and churns the bpfsym
 * workloads, and prints what the kernel says about BPF programs as JSON.
 * Tests use it as a reference independent of bpfsym.
 *
 *   loader run OBJ PROG [--repeat N] [--seconds S] [--size BYTES]
 *   loader hold OBJ [--copies N] [--seconds S]
 *   loader churn OBJ --count N --rate R [--prog NAME]
 *   loader churn --raw --count N --rate R     (2-insn programs via BPF_PROG_LOAD)
 *   loader info ID
 *
 * Output is one JSON object per line on stdout; errors go to stderr and the
 * exit status is nonzero.  Addresses are printed as "0x..." strings.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/membarrier.h>
#include <poll.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <bpf/bpf.h>
#include <bpf/btf.h>
#include <bpf/libbpf.h>

#define BATCH_REPEAT 1000
#define MAX_COPIES 50
#define CHURN_SYNC_EVERY 64

static const char *progname = "loader";

static void die(const char *fmt, ...)
{
	va_list ap;

	fprintf(stderr, "%s: ", progname);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	exit(1);
}

static void usage(void)
{
	fprintf(stderr,
		"usage: %s run OBJ PROG [--repeat N] [--seconds S] [--size BYTES]\n"
		"       %s hold OBJ [--copies N] [--seconds S]\n"
		"       %s churn OBJ --count N --rate R [--prog NAME]\n"
		"       %s churn --raw --count N --rate R\n"
		"       %s info ID\n",
		progname, progname, progname, progname, progname);
	exit(2);
}

static int print_libbpf(enum libbpf_print_level level, const char *fmt, va_list ap)
{
	if (level > LIBBPF_WARN)
		return 0;
	return vfprintf(stderr, fmt, ap);
}

static unsigned long long parse_uint(const char *what, const char *text)
{
	unsigned long long value;
	char *end;

	errno = 0;
	value = strtoull(text, &end, 0);
	if (errno || end == text || *end || text[0] == '-')
		die("invalid %s: '%s'", what, text);
	return value;
}

static double parse_seconds(const char *text)
{
	char *end;
	double value;

	errno = 0;
	value = strtod(text, &end);
	if (errno || end == text || *end || !(value >= 0))
		die("invalid seconds: '%s'", text);
	return value;
}

static unsigned long long now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (unsigned long long)ts.tv_sec * 1000000000ull + ts.tv_nsec;
}

/* ---- object file handling ---- */

struct blob {
	void *data;
	size_t size;
	const char *name;
};

static struct blob read_object(const char *path)
{
	struct blob blob = { .name = path };
	struct stat st;
	int fd = open(path, O_RDONLY | O_CLOEXEC);

	if (fd < 0 || fstat(fd, &st) < 0)
		die("%s: %s", path, strerror(errno));
	blob.size = st.st_size;
	blob.data = malloc(blob.size ? blob.size : 1);
	if (!blob.data)
		die("out of memory");
	for (size_t done = 0; done < blob.size;) {
		ssize_t n = read(fd, (char *)blob.data + done, blob.size - done);

		if (n <= 0)
			die("%s: read failed: %s", path, n ? strerror(errno) : "short file");
		done += n;
	}
	close(fd);
	return blob;
}

static struct bpf_object *open_object(const struct blob *blob)
{
	const char *base = strrchr(blob->name, '/');
	LIBBPF_OPTS(bpf_object_open_opts, opts, .object_name = base ? base + 1 : blob->name);
	struct bpf_object *obj = bpf_object__open_mem(blob->data, blob->size, &opts);

	if (!obj)
		die("%s: cannot open BPF object: %s", blob->name, strerror(errno));
	return obj;
}

static void load_object(struct bpf_object *obj, const char *path)
{
	int err = bpf_object__load(obj);

	if (err)
		die("%s: cannot load: %s", path, strerror(-err));
}

/* ---- bpf_prog_info ---- */

struct prog_details {
	struct bpf_prog_info info;
	__u64 *ksyms;
	__u32 *func_lens;
	__u8 (*tags)[BPF_TAG_SIZE];
	struct bpf_func_info *func_info;
	__u32 nr_funcs;
	char **func_names;
};

static void *alloc_array(__u32 count, size_t size)
{
	void *p = calloc(count ? count : 1, size);

	if (!p)
		die("out of memory");
	return p;
}

static const char *btf_func_name(const struct btf *btf, __u32 type_id)
{
	const struct btf_type *t;

	if (!btf)
		return NULL;
	t = btf__type_by_id(btf, type_id);
	if (!t || !btf_is_func(t))
		return NULL;
	return btf__name_by_offset(btf, t->name_off);
}

static void fetch_details(int fd, struct prog_details *d)
{
	struct bpf_prog_info first = {};
	__u32 len = sizeof(first);
	struct btf *btf = NULL;
	int err;

	memset(d, 0, sizeof(*d));
	err = bpf_obj_get_info_by_fd(fd, &first, &len);
	if (err)
		die("bpf_prog_info: %s", strerror(errno));

	d->ksyms = alloc_array(first.nr_jited_ksyms, sizeof(*d->ksyms));
	d->func_lens = alloc_array(first.nr_jited_func_lens, sizeof(*d->func_lens));
	d->tags = alloc_array(first.nr_prog_tags, sizeof(*d->tags));
	d->func_info = alloc_array(first.nr_func_info, sizeof(*d->func_info));

	/* Second call: only the arrays we asked for, with the counts we saw. */
	d->info.nr_jited_ksyms = first.nr_jited_ksyms;
	d->info.jited_ksyms = (__u64)(unsigned long)d->ksyms;
	d->info.nr_jited_func_lens = first.nr_jited_func_lens;
	d->info.jited_func_lens = (__u64)(unsigned long)d->func_lens;
	d->info.nr_prog_tags = first.nr_prog_tags;
	d->info.prog_tags = (__u64)(unsigned long)d->tags;
	d->info.nr_func_info = first.nr_func_info;
	d->info.func_info_rec_size = sizeof(struct bpf_func_info);
	d->info.func_info = (__u64)(unsigned long)d->func_info;
	len = sizeof(d->info);
	err = bpf_obj_get_info_by_fd(fd, &d->info, &len);
	if (err)
		die("bpf_prog_info: %s", strerror(errno));
	if (d->info.nr_jited_ksyms > first.nr_jited_ksyms ||
	    d->info.nr_jited_func_lens > first.nr_jited_func_lens ||
	    d->info.nr_prog_tags > first.nr_prog_tags || d->info.nr_func_info > first.nr_func_info)
		die("bpf_prog_info: counts changed between calls");

	d->nr_funcs = d->info.nr_jited_ksyms;
	d->func_names = alloc_array(d->nr_funcs, sizeof(*d->func_names));
	if (d->info.btf_id)
		btf = btf__load_from_kernel_by_id(d->info.btf_id);
	for (__u32 i = 0; i < d->nr_funcs; i++) {
		const char *name = NULL;

		if (i < d->info.nr_func_info)
			name = btf_func_name(btf, d->func_info[i].type_id);
		/* Without BTF the kernel names the symbol after the program. */
		if (!name)
			name = d->info.name;
		d->func_names[i] = strdup(name);
		if (!d->func_names[i])
			die("out of memory");
	}
	btf__free(btf);
}

static void free_details(struct prog_details *d)
{
	for (__u32 i = 0; i < d->nr_funcs; i++)
		free(d->func_names[i]);
	free(d->func_names);
	free(d->ksyms);
	free(d->func_lens);
	free(d->tags);
	free(d->func_info);
}

/* ---- JSON output ---- */

static void json_string(const char *s)
{
	putchar('"');
	for (; *s; s++) {
		unsigned char c = *s;

		if (c == '"' || c == '\\')
			printf("\\%c", c);
		else if (c < 0x20)
			printf("\\u%04x", c);
		else
			putchar(c);
	}
	putchar('"');
}

static void json_key(const char *key)
{
	json_string(key);
	putchar(':');
}

static void hex_tag(char out[2 * BPF_TAG_SIZE + 1], const __u8 *tag)
{
	for (int i = 0; i < BPF_TAG_SIZE; i++)
		sprintf(out + 2 * i, "%02x", tag[i]);
}

static const char *prog_type_name(__u32 type)
{
	const char *name = libbpf_bpf_prog_type_str(type);

	return name ? name : "unknown";
}

/* Fields shared by every mode's per-program output; no braces. */
static void print_common(const struct prog_details *d)
{
	char tag[2 * BPF_TAG_SIZE + 1];

	hex_tag(tag, d->info.tag);
	printf("\"prog_id\":%u,", d->info.id);
	json_key("name");
	json_string(d->info.name);
	printf(",\"tag\":\"%s\",\"type\":%u,", tag, d->info.type);
	json_key("type_name");
	json_string(prog_type_name(d->info.type));
	printf(",\"xlated_prog_len\":%u,\"jited_prog_len\":%u,\"btf_id\":%u", d->info.xlated_prog_len,
	       d->info.jited_prog_len, d->info.btf_id);
	printf(",\"nr_func_info\":%u,\"nr_line_info\":%u,\"nr_jited_line_info\":%u",
	       d->info.nr_func_info, d->info.nr_line_info, d->info.nr_jited_line_info);
}

static void print_funcs(const struct prog_details *d)
{
	printf(",\"funcs\":[");
	for (__u32 i = 0; i < d->nr_funcs; i++) {
		char tag[2 * BPF_TAG_SIZE + 1] = "", ksym_tag[2 * BPF_TAG_SIZE + 1];
		char ksym[512];

		if (i < d->info.nr_prog_tags)
			hex_tag(tag, d->tags[i]);
		printf("%s{", i ? "," : "");
		json_key("name");
		json_string(d->func_names[i]);
		printf(",\"tag\":\"%s\",\"addr\":\"0x%llx\",\"len\":%u,", tag,
		       (unsigned long long)d->ksyms[i], i < d->info.nr_jited_func_lens ? d->func_lens[i] : 0);
		/*
		 * kallsyms: "bpf_prog_" + tag + "_" + BTF func name, where the main
		 * function (index 0) carries the whole program's tag rather than
		 * its own prog_tags[0], since the kernel registers the program
		 * itself, not func[0], under that symbol.
		 */
		if (i == 0)
			hex_tag(ksym_tag, d->info.tag);
		else
			memcpy(ksym_tag, tag, sizeof(ksym_tag));
		snprintf(ksym, sizeof(ksym), "bpf_prog_%s_%s", ksym_tag, d->func_names[i]);
		json_key("ksym_name");
		json_string(ksym);
		printf("}");
	}
	printf("]");
}

/* ---- run ---- */

static bool takes_packet(enum bpf_prog_type type)
{
	switch (type) {
	case BPF_PROG_TYPE_XDP:
	case BPF_PROG_TYPE_SOCKET_FILTER:
	case BPF_PROG_TYPE_SCHED_CLS:
	case BPF_PROG_TYPE_SCHED_ACT:
	case BPF_PROG_TYPE_CGROUP_SKB:
		return true;
	default:
		return false;
	}
}

/* Ethernet + IPv4 (valid header checksum) + UDP + a deterministic payload. */
static void build_packet(__u8 *pkt, __u32 size)
{
	__u32 sum = 0;

	for (__u32 i = 0; i < size; i++)
		pkt[i] = (__u8)(i * 37 + 11);
	memcpy(pkt, "\x02\x00\x00\x00\x00\x02\x02\x00\x00\x00\x00\x01\x08\x00", 14);
	__u8 *ip = pkt + 14;
	__u16 ip_len = size - 14;
	__u8 header[20] = {
		0x45, 0x00, ip_len >> 8, ip_len & 0xff, 0x12, 0x34, 0x40, 0x00,
		64, 17, 0, 0, 10, 0, 0, 1, 10, 0, 0, 2,
	};
	for (int i = 0; i < 20; i += 2)
		sum += (header[i] << 8) | header[i + 1];
	while (sum >> 16)
		sum = (sum & 0xffff) + (sum >> 16);
	sum = ~sum & 0xffff;
	header[10] = sum >> 8;
	header[11] = sum & 0xff;
	memcpy(ip, header, sizeof(header));
	__u16 udp_len = ip_len - 20;
	__u8 udp[8] = { 0x30, 0x39, 0x00, 0x35, udp_len >> 8, udp_len & 0xff, 0, 0 };
	memcpy(ip + 20, udp, sizeof(udp));
}

static int cmd_run(int argc, char **argv)
{
	unsigned long long repeat = 0, runs = 0, batches = 0, time_sum = 0, start;
	double seconds = -1;
	__u32 size = 1024, retval = 0;
	struct prog_details d;
	bool have_repeat = false;
	struct bpf_program *prog;
	struct bpf_object *obj;
	struct blob blob;
	__u8 *pkt;
	int fd;

	if (argc < 2)
		usage();
	for (int i = 2; i < argc; i++) {
		if (!strcmp(argv[i], "--repeat") && i + 1 < argc) {
			repeat = parse_uint("repeat count", argv[++i]);
			have_repeat = true;
		} else if (!strcmp(argv[i], "--seconds") && i + 1 < argc) {
			seconds = parse_seconds(argv[++i]);
		} else if (!strcmp(argv[i], "--size") && i + 1 < argc) {
			unsigned long long v = parse_uint("packet size", argv[++i]);

			if (v < 64 || v > 1500)
				die("packet size must be 64..1500 bytes, not %llu", v);
			size = v;
		} else {
			usage();
		}
	}
	if (!have_repeat && seconds < 0) {
		repeat = 1;
		have_repeat = true;
	}

	blob = read_object(argv[0]);
	obj = open_object(&blob);
	prog = bpf_object__find_program_by_name(obj, argv[1]);
	if (!prog)
		die("%s: no program named '%s'", argv[0], argv[1]);
	load_object(obj, argv[0]);
	fd = bpf_program__fd(prog);
	fetch_details(fd, &d);

	pkt = alloc_array(size, 1);
	build_packet(pkt, size);
	start = now_ns();
	for (;;) {
		LIBBPF_OPTS(bpf_test_run_opts, opts);
		__u64 raw_tp_args[2] = { 0, 0 };
		__u32 batch = BATCH_REPEAT;
		int err;

		if (have_repeat) {
			if (runs >= repeat)
				break;
			if (repeat - runs < batch)
				batch = repeat - runs;
		}
		if (seconds >= 0 && runs && (now_ns() - start) >= seconds * 1e9)
			break;

		if (takes_packet(d.info.type)) {
			opts.data_in = pkt;
			opts.data_size_in = size;
			opts.repeat = batch;
		} else if (d.info.type == BPF_PROG_TYPE_RAW_TRACEPOINT) {
			/* raw_tp test runs take ctx_in and refuse repeat; no duration */
			opts.ctx_in = raw_tp_args;
			opts.ctx_size_in = sizeof(raw_tp_args);
			batch = 1;
		} else {
			die("%s: no test run support for program type %s", argv[1],
			    prog_type_name(d.info.type));
		}
		err = bpf_prog_test_run_opts(fd, &opts);
		if (err)
			die("%s: BPF_PROG_TEST_RUN: %s", argv[1], strerror(errno));
		/* opts.duration is the mean ns per repetition (test.duration) */
		time_sum += (unsigned long long)opts.duration * batch;
		retval = opts.retval;
		runs += batch;
		batches++;
	}

	printf("{");
	print_common(&d);
	printf(",\"runs\":%llu,\"batches\":%llu,\"run_time_ns_sum\":%llu,\"retval\":%u,"
	       "\"packet_size\":%u}\n",
	       runs, batches, time_sum, retval, takes_packet(d.info.type) ? size : 0);
	fflush(stdout);
	free(pkt);
	free_details(&d);
	bpf_object__close(obj);
	free(blob.data);
	return 0;
}

/* ---- hold ---- */

static void wait_for_stdin_eof(void)
{
	char buf[256];

	for (;;) {
		ssize_t n = read(STDIN_FILENO, buf, sizeof(buf));

		if (n == 0 || (n < 0 && errno != EINTR))
			return;
	}
}

static void sleep_seconds(double seconds)
{
	struct timespec ts = { .tv_sec = (time_t)seconds };

	ts.tv_nsec = (long)((seconds - ts.tv_sec) * 1e9);
	while (nanosleep(&ts, &ts) && errno == EINTR)
		;
}

static int cmd_hold(int argc, char **argv)
{
	unsigned long long copies = 1;
	struct bpf_object *objs[MAX_COPIES];
	double seconds = -1;
	struct blob blob;

	if (argc < 1)
		usage();
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--copies") && i + 1 < argc)
			copies = parse_uint("copy count", argv[++i]);
		else if (!strcmp(argv[i], "--seconds") && i + 1 < argc)
			seconds = parse_seconds(argv[++i]);
		else
			usage();
	}
	if (copies < 1 || copies > MAX_COPIES)
		die("copies must be 1..%d", MAX_COPIES);

	blob = read_object(argv[0]);
	for (unsigned long long c = 0; c < copies; c++) {
		struct bpf_program *prog;

		objs[c] = open_object(&blob);
		load_object(objs[c], argv[0]);
		bpf_object__for_each_program(prog, objs[c]) {
			struct prog_details d;

			fetch_details(bpf_program__fd(prog), &d);
			printf("{\"copy\":%llu,", c);
			print_common(&d);
			print_funcs(&d);
			printf("}\n");
			free_details(&d);
		}
	}
	printf("{\"ready\":true}\n");
	fflush(stdout);

	if (seconds >= 0)
		sleep_seconds(seconds);
	else
		wait_for_stdin_eof();

	for (unsigned long long c = 0; c < copies; c++)
		bpf_object__close(objs[c]);
	free(blob.data);
	return 0;
}

/* ---- churn ---- */

static void sleep_until(unsigned long long deadline_ns)
{
	struct timespec ts = {
		.tv_sec = deadline_ns / 1000000000ull,
		.tv_nsec = deadline_ns % 1000000000ull,
	};

	while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR)
		;
}

/*
 * churn --raw: the harshest case, like libbpf's feature probes: a 2-insn
 * socket filter loaded with BPF_PROG_LOAD and closed at once, living only
 * for the one bpf_obj_get_info_by_fd() that reads its id.
 */
static __u32 *churn_raw(unsigned long long count, unsigned long long rate, unsigned long long *start)
{
	struct bpf_insn insns[2] = {
		{ .code = BPF_ALU64 | BPF_MOV | BPF_K, .dst_reg = BPF_REG_0, .imm = 0 },
		{ .code = BPF_JMP | BPF_EXIT },
	};
	__u32 *ids = alloc_array(count, sizeof(*ids));

	*start = now_ns();
	for (unsigned long long n = 0; n < count; n++) {
		struct bpf_prog_info info = {};
		__u32 len = sizeof(info);
		int fd;

		if (rate)
			sleep_until(*start + n * 1000000000ull / rate);
		fd = bpf_prog_load(BPF_PROG_TYPE_SOCKET_FILTER, "churn_raw", "GPL", insns, 2, NULL);
		if (fd < 0)
			die("BPF_PROG_LOAD: %s", strerror(errno));
		if (bpf_obj_get_info_by_fd(fd, &info, &len))
			die("bpf_prog_info: %s", strerror(errno));
		ids[n] = info.id;
		close(fd);
		if ((n + 1) % CHURN_SYNC_EVERY == 0)
			syscall(SYS_membarrier, MEMBARRIER_CMD_GLOBAL, 0, 0);
	}
	return ids;
}

static int cmd_churn(int argc, char **argv)
{
	unsigned long long count = 0, rate = ULLONG_MAX, start;
	const char *only = NULL;
	__u32 *ids = NULL;
	size_t nr_ids = 0, cap_ids = 0;
	struct blob blob;

	bool raw;

	if (argc < 1)
		usage();
	raw = !strcmp(argv[0], "--raw");
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--count") && i + 1 < argc)
			count = parse_uint("count", argv[++i]);
		else if (!strcmp(argv[i], "--rate") && i + 1 < argc)
			rate = parse_uint("rate", argv[++i]);
		else if (!strcmp(argv[i], "--prog") && i + 1 < argc)
			only = argv[++i];
		else
			usage();
	}
	if (!count || rate == ULLONG_MAX)
		die("churn needs --count N (N > 0) and --rate R (loads/s, 0 = unthrottled)");

	if (raw) {
		ids = churn_raw(count, rate, &start);
		nr_ids = count;
		goto out;
	}
	blob = read_object(argv[0]);
	start = now_ns();
	for (unsigned long long n = 0; n < count; n++) {
		struct bpf_object *obj;
		struct bpf_program *prog;
		bool any = false;

		if (rate)
			sleep_until(start + n * 1000000000ull / rate);
		obj = open_object(&blob);
		bpf_object__for_each_program(prog, obj) {
			bool keep = !only || !strcmp(bpf_program__name(prog), only);

			bpf_program__set_autoload(prog, keep);
			any |= keep;
		}
		if (!any)
			die("%s: no program named '%s'", argv[0], only);
		load_object(obj, argv[0]);
		bpf_object__for_each_program(prog, obj) {
			struct bpf_prog_info info = {};
			__u32 len = sizeof(info);

			if (bpf_program__fd(prog) < 0)
				continue;
			if (bpf_obj_get_info_by_fd(bpf_program__fd(prog), &info, &len))
				die("bpf_prog_info: %s", strerror(errno));
			if (nr_ids == cap_ids) {
				cap_ids = cap_ids ? 2 * cap_ids : 256;
				ids = realloc(ids, cap_ids * sizeof(*ids));
				if (!ids)
					die("out of memory");
			}
			ids[nr_ids++] = info.id;
		}
		bpf_object__close(obj);
		/*
		 * A closed program's JIT image is freed after an RCU grace period
		 * (bpf_prog_put -> call_rcu -> bpf_prog_free_deferred).  Waiting for
		 * one now and then bounds how many dead programs the kernel still
		 * holds when loading unthrottled.
		 */
		if ((n + 1) % CHURN_SYNC_EVERY == 0)
			syscall(SYS_membarrier, MEMBARRIER_CMD_GLOBAL, 0, 0);
	}

	free(blob.data);
out:
	printf("{\"loaded\":%zu,\"elapsed_ns\":%llu,\"prog_ids\":[", nr_ids, now_ns() - start);
	for (size_t i = 0; i < nr_ids; i++)
		printf("%s%u", i ? "," : "", ids[i]);
	printf("]}\n");
	fflush(stdout);
	free(ids);
	return 0;
}

/* ---- info ---- */

/* The JIT image, fetched on its own, as ,"jited":"<hex>" (the reference for image tests). */
static void print_jited(int fd, __u32 jited_len)
{
	struct bpf_prog_info info = {};
	__u32 len = sizeof(info);
	__u8 *image = alloc_array(jited_len, 1);

	info.jited_prog_len = jited_len;
	info.jited_prog_insns = (__u64)(unsigned long)image;
	if (jited_len && bpf_obj_get_info_by_fd(fd, &info, &len))
		die("bpf_prog_info (jited): %s", strerror(errno));
	printf(",\"jited\":\"");
	for (__u32 i = 0; i < jited_len && i < info.jited_prog_len; i++)
		printf("%02x", image[i]);
	printf("\"");
	free(image);
}

static int cmd_info(int argc, char **argv)
{
	unsigned long long id;
	struct prog_details d;
	int fd;

	if (argc != 1)
		usage();
	id = parse_uint("program id", argv[0]);
	if (id > UINT32_MAX)
		die("invalid program id: '%s'", argv[0]);
	fd = bpf_prog_get_fd_by_id(id);
	if (fd < 0)
		die("program %s: %s", argv[0], strerror(errno));
	fetch_details(fd, &d);

	printf("{");
	print_common(&d);
	printf(",\"id\":%u,\"nr_jited_ksyms\":%u,\"nr_jited_func_lens\":%u,\"ksyms\":[",
	       d.info.id, d.info.nr_jited_ksyms, d.info.nr_jited_func_lens);
	for (__u32 i = 0; i < d.nr_funcs; i++)
		printf("%s\"0x%llx\"", i ? "," : "", (unsigned long long)d.ksyms[i]);
	printf("],\"func_lens\":[");
	for (__u32 i = 0; i < d.info.nr_jited_func_lens; i++)
		printf("%s%u", i ? "," : "", d.func_lens[i]);
	printf("],\"load_time\":%llu,\"created_by_uid\":%u,\"run_time_ns\":%llu,\"run_cnt\":%llu",
	       (unsigned long long)d.info.load_time, d.info.created_by_uid,
	       (unsigned long long)d.info.run_time_ns, (unsigned long long)d.info.run_cnt);
	print_funcs(&d);
	print_jited(fd, d.info.jited_prog_len);
	printf("}\n");
	fflush(stdout);
	free_details(&d);
	close(fd);
	return 0;
}

int main(int argc, char **argv)
{
	const char *slash = strrchr(argv[0], '/');

	progname = slash ? slash + 1 : argv[0];
	libbpf_set_print(print_libbpf);
	if (argc < 2)
		usage();
	if (!strcmp(argv[1], "run"))
		return cmd_run(argc - 2, argv + 2);
	if (!strcmp(argv[1], "hold"))
		return cmd_hold(argc - 2, argv + 2);
	if (!strcmp(argv[1], "churn"))
		return cmd_churn(argc - 2, argv + 2);
	if (!strcmp(argv[1], "info"))
		return cmd_info(argc - 2, argv + 2);
	usage();
	return 2;
}
