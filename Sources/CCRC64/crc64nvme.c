/* CRC-64/NVME's bulk by folding with carry-less multiplication, after Intel's
 * "Fast CRC Computation for Generic Polynomials Using PCLMULQDQ" (2009), in
 * the reflected domain: a 128-bit lane D, read little-endian, holds the
 * message's coefficients x^127 (bit 0) down to x^0; its low half H and high
 * half L are D = H·x^64 + L. Moving D forward by d bits is
 * H·x^(d+64) + L·x^d, each product of a half with a 64-bit constant
 * (x^n mod P) folded into the lane d bits later. A carry-less product of two
 * reflected 64-bit values reads as their product times x, so the constants
 * are x^(d+63) and x^(d-1) mod P, bit-reflected. Eight lanes run side by side
 * (128 bytes a round); they are folded into one, which is reduced with 128
 * plain shifts (once a call: no Barrett constants to get wrong). Checked in
 * Tests/XferTests/CRC32Tests.swift against the table path and AWS's values. */

#include "CCRC64.h"

#if defined(__x86_64__)
#include <immintrin.h>

/* Reflected polynomial 0xAD93D23594C93659. */
#define POLY 0x9A6C9329AC4BC9B5ULL

int xfer_crc64nvme_accelerated(void) {
    return __builtin_cpu_supports("pclmul") && __builtin_cpu_supports("sse2");
}

__attribute__((target("pclmul,sse2")))
static inline __m128i fold(__m128i lane, __m128i constants, __m128i into) {
    __m128i low = _mm_clmulepi64_si128(lane, constants, 0x00);   /* H · x^(d+63) */
    __m128i high = _mm_clmulepi64_si128(lane, constants, 0x11);  /* L · x^(d-1) */
    return _mm_xor_si128(_mm_xor_si128(low, high), into);
}

/* r · x^64 mod P, for a reflected register r: 64 shifts. */
static uint64_t shift64(uint64_t r) {
    for (int i = 0; i < 64; i++) r = (r & 1) ? (r >> 1) ^ POLY : r >> 1;
    return r;
}

__attribute__((target("pclmul,sse2")))
uint64_t xfer_crc64nvme_blocks(uint64_t crc, const uint8_t *bytes, size_t blocks) {
    if (blocks == 0) return crc;
    /* (x^(d+63), x^(d-1)) mod P, reflected, for d = 1024, 896, …, 128 bits. */
    const __m128i by1024 = _mm_set_epi64x(0x5f852fb61e8d92dcLL, (long long)0xa1ca681e733f9c40ULL);
    const __m128i across[7] = {
        _mm_set_epi64x((long long)0x946588403d4adcbcULL, (long long)0xd083dd594d96319dULL), /* 896 */
        _mm_set_epi64x(0x34f5a24e22d66e90LL, 0x3c255f5ebc414423LL),                       /* 768 */
        _mm_set_epi64x(0x03363823e6e791e5LL, 0x7b0ab10dd0f809feLL),                       /* 640 */
        _mm_set_epi64x(0x62242240ace5045aLL, 0x0c32cdb31e18a84aLL),                       /* 512 */
        _mm_set_epi64x((long long)0xa3ffdc1fe8e82a8bULL, (long long)0xbdd7ac0ee1a4a0f0ULL), /* 384 */
        _mm_set_epi64x((long long)0xe1e0bb9d45d7a44cULL, (long long)0xb0bc2e589204f500ULL), /* 256 */
        _mm_set_epi64x(0x21e9761e252621acLL, (long long)0xeadc41fd2ba3d420ULL),           /* 128 */
    };
    const __m128i *p = (const __m128i *)bytes;
    __m128i lane[8];
    for (int i = 0; i < 8; i++) lane[i] = _mm_loadu_si128(p + i);
    /* The register so far stands at the message's next 64 bits. */
    lane[0] = _mm_xor_si128(lane[0], _mm_cvtsi64_si128((long long)crc));
    p += 8;
    for (size_t b = 1; b < blocks; b++, p += 8) {
        for (int i = 0; i < 8; i++) lane[i] = fold(lane[i], by1024, _mm_loadu_si128(p + i));
    }
    __m128i last = lane[7];
    for (int i = 0; i < 7; i++) last = fold(lane[i], across[i], last);
    uint64_t high = (uint64_t)_mm_cvtsi128_si64(last);                          /* H: x^127…x^64 */
    uint64_t low = (uint64_t)_mm_cvtsi128_si64(_mm_unpackhi_epi64(last, last)); /* L: x^63…x^0 */
    /* The register after D: (H·x^64 + L)·x^64 mod P. */
    return shift64(shift64(high) ^ low);
}

#else

int xfer_crc64nvme_accelerated(void) { return 0; }

uint64_t xfer_crc64nvme_blocks(uint64_t crc, const uint8_t *bytes, size_t blocks) {
    (void)bytes;
    (void)blocks;
    return crc;
}

#endif
