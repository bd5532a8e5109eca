/* rng.h: private to libcbcmn: xoshiro256** (Blackman & Vigna), seeded with splitmix64. */
#ifndef CBCMN_RNG_H
#define CBCMN_RNG_H

#include <stdint.h>

struct cbcmn__rng {
	uint64_t s[4];
};

static inline uint64_t cbcmn__rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

static inline uint64_t cbcmn__splitmix64(uint64_t *x)
{
	uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

static inline void cbcmn__rng_seed(struct cbcmn__rng *r, uint64_t seed)
{
	/* splitmix64 never yields four zero words, the one state xoshiro must avoid */
	for (int i = 0; i < 4; i++)
		r->s[i] = cbcmn__splitmix64(&seed);
}

static inline uint64_t cbcmn__rng_next(struct cbcmn__rng *r)
{
	uint64_t *s = r->s;
	uint64_t result = cbcmn__rotl(s[1] * 5, 7) * 9;
	uint64_t t = s[1] << 17;
	s[2] ^= s[0];
	s[3] ^= s[1];
	s[1] ^= s[2];
	s[0] ^= s[3];
	s[2] ^= t;
	s[3] = cbcmn__rotl(s[3], 45);
	return result;
}

/* Uniform in [0, n) without modulo bias worth caring about (Lemire). */
static inline uint32_t cbcmn__rng_below(struct cbcmn__rng *r, uint32_t n)
{
	return (uint32_t)(((cbcmn__rng_next(r) >> 32) * (uint64_t)n) >> 32);
}

#endif
