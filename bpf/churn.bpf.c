// SPDX-License-Identifier: GPL-2.0
/*
 * bpfsym churn workload: a tiny socket filter with two sub-programs, loaded
 * and unloaded many times to test capture of short-lived programs.
 */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

static __noinline __u32 load_word(struct __sk_buff *skb, __u32 off)
{
	__u32 word = 0;

	bpf_skb_load_bytes(skb, off, &word, sizeof(word));
	return word;
}

static __noinline __u32 fold32(__u32 x)
{
	x ^= x >> 16;
	x ^= x >> 8;
	return x & 0xff;
}

SEC("socket")
int churn_filter(struct __sk_buff *skb)
{
	__u32 folded = fold32(load_word(skb, 0) ^ load_word(skb, 4));

	return folded & 1 ? skb->len : 0;
}

char LICENSE[] SEC("license") = "GPL";
