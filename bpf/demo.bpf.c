// SPDX-License-Identifier: GPL-2.0
/*
 * bpfsym demo workload.
 *
 * xdp_demo calls three sub-programs that each loop over the packet, so that
 * BPF_PROG_TEST_RUN with a large repeat count keeps all four functions busy
 * enough for a sampling profiler to see each of them.  tp_demo is a small
 * raw tracepoint program that counts system calls.
 */
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/ip.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

#define WINDOW_LARGE 1024
#define WINDOW_MEDIUM 256
#define WINDOW_SMALL 64
#define VERDICT_ROUNDS 256

enum demo_stat {
	STAT_PACKETS,
	STAT_HIGH_BYTES,
	STAT_CHECKSUM,
	STAT_HASH,
	STAT_MAX,
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, STAT_MAX);
	__type(key, __u32);
	__type(value, __u64);
} demo_stats SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 512);
	__type(key, __u64);
	__type(value, __u64);
} syscall_counts SEC(".maps");

/*
 * The sub-programs work on the first len bytes of the frame, len being one of
 * the WINDOW_* constants that xdp_demo has checked against data_end.  Fixed
 * windows keep the loops free of per-byte bounds checks, whose exit paths the
 * verifier would otherwise have to explore one by one.
 */

/* Internet checksum over the window after the Ethernet header; 0 if not IPv4. */
static __noinline __u32 parse_ipv4(__u8 *bytes, __u32 len)
{
	struct ethhdr *eth = (void *)bytes;
	struct iphdr *ip = (void *)(eth + 1);
	__u32 sum = 0;
	__u32 off;

	if (eth->h_proto != bpf_htons(ETH_P_IP) || ip->ihl < 5 || ip->version != 4)
		return 0;

#pragma clang loop unroll(disable)
	for (off = sizeof(*eth); off + 1 < len; off += 2)
		sum += ((__u32)bytes[off] << 8) | bytes[off + 1];
	sum = (sum & 0xffff) + (sum >> 16);
	sum = (sum & 0xffff) + (sum >> 16);
	return ~sum & 0xffff;
}

/* FNV-1a style hash of the window, with an extra rotate per byte. */
static __noinline __u32 hash_mix(__u8 *bytes, __u32 len, __u32 seed)
{
	__u32 h = 2166136261u ^ seed;
	__u32 off;

#pragma clang loop unroll(disable)
	for (off = 0; off < len; off++) {
		h ^= bytes[off];
		h *= 16777619u;
		h = (h << 13) | (h >> 19);
	}
	return h;
}

/* Number of window bytes whose top bit, perturbed by the hash, is set. */
static __noinline __u64 count_bytes(__u8 *bytes, __u32 len, __u32 hash)
{
	__u64 high = 0;
	__u32 off;

#pragma clang loop unroll(disable)
	for (off = 0; off < len; off++)
		if ((bytes[off] ^ (hash >> (off & 7))) & 0x80)
			high++;
	return high;
}

static __always_inline void stat_add(__u32 key, __u64 value)
{
	__u64 *slot = bpf_map_lookup_elem(&demo_stats, &key);

	if (slot)
		__sync_fetch_and_add(slot, value);
}

SEC("xdp")
int xdp_demo(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	__u32 checksum, hash, verdict, round, len;
	__u64 high;

	if (data + WINDOW_LARGE <= data_end)
		len = WINDOW_LARGE;
	else if (data + WINDOW_MEDIUM <= data_end)
		len = WINDOW_MEDIUM;
	else if (data + WINDOW_SMALL <= data_end)
		len = WINDOW_SMALL;
	else
		return XDP_PASS;

	checksum = parse_ipv4(data, len);
	if (!checksum)
		return XDP_PASS;
	hash = hash_mix(data, len, checksum);
	high = count_bytes(data, len, hash);

	verdict = hash ^ (__u32)high;
#pragma clang loop unroll(disable)
	for (round = 0; round < VERDICT_ROUNDS; round++)
		verdict = (verdict * 2654435761u) ^ (verdict >> 15) ^ round;

	stat_add(STAT_PACKETS, 1);
	stat_add(STAT_HIGH_BYTES, high);
	stat_add(STAT_CHECKSUM, checksum);
	stat_add(STAT_HASH, verdict);
	return XDP_PASS;
}

SEC("raw_tp/sys_enter")
int tp_demo(struct bpf_raw_tracepoint_args *ctx)
{
	__u64 nr = ctx->args[1];
	__u64 one = 1;
	__u64 *count = bpf_map_lookup_elem(&syscall_counts, &nr);

	if (count)
		__sync_fetch_and_add(count, 1);
	else
		bpf_map_update_elem(&syscall_counts, &nr, &one, BPF_NOEXIST);
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
